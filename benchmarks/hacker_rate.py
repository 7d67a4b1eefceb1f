"""Hackable rate per task source: the share of tasks a cheap exploit (clawgym.synth.exploits: placeholder,
echo, copy_inputs, empty_outputs outputs) scores above the task's untouched (no-op) score on (the hacker gate's
bar, clawgym.synth.exploits.hackable); `--bound X` measures against an absolute bar instead (score >= X; the
gate's bar was once 0.2).

    python benchmarks/hacker_rate.py --n 200 [--backend bwrap|docker|local|host] [--bound 0.2]
        [--fixtures ../shared/fixtures/clawgym_train_sample] [--no-fixtures]

procedural: `--n` tasks over all families with personas, generated as clawgym.synth.pipeline.synthesize does
(generate_procedural), graded by its batched gates (validate_many, hacker="report": flagged, not dropped;
dedupe/split do not change the rate and are skipped). clawgym fixture: imported
ClawGym tasks (clawgym.tasks.import_any), graded one task at a time by validate_task (their reward.sh runs in
the sandbox); their outputs are not declared, so the exploits write the paths the instruction / reward code
name (clawgym.synth.exploits.outputs_from_check_code); a task with none gets no exploit and is counted as such.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _line(label: str, vals: list, bound: float | None, gates: bool = True) -> str:
    from clawgym.synth.exploits import EXPLOITS, hackable

    n = len(vals)
    hk = {id(v): hackable(v.exploit_scores, v.noop_score, bound) for v in vals}
    hacked = [v for v in vals if hk[id(v)]]
    by = Counter(e for v in hacked for e in hk[id(v)])
    ran = Counter(e for v in vals for e in v.exploit_scores)
    none = sum(1 for v in vals if not v.exploit_scores)
    over_noop = sum(1 for v in vals if v.exploit_scores and max(v.exploit_scores.values()) > (v.noop_score or 0.0)
                    + 1e-9)
    top = max((s for v in vals for s in v.exploit_scores.values() if s is not None), default=0.0)
    by_s = ", ".join(f"{e} {by[e]}" for e in EXPLOITS if by[e]) or "none"
    ran_s = ", ".join(f"{e} {ran[e]}/{n}" for e in EXPLOITS)
    tail = f"; no expected output found (no exploit run): {none}" if none else ""
    failed = sum(1 for v in vals if not v.passed)  # hacker="report": the other gates' verdict
    tail += f"; failing another gate: {failed}/{n}" if failed and gates else ""
    return (f"{label}: {len(hacked)}/{n} hackable ({100 * len(hacked) / max(1, n):.1f}%) — by exploit: {by_s}; "
            f"exploits run: {ran_s}; an exploit above the task's untouched score: {over_noop}/{n}; "
            f"top exploit score {top:.3f}{tail}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="bwrap", choices=["bwrap", "docker", "local", "host", "auto"])
    ap.add_argument("--bound", type=float, default=None, help="hackable when an exploit scores >= this "
                    "(default: when it scores above the task's untouched score, the hacker gate's bar)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fixtures", default=os.environ.get("CLAWGYM_FIXTURES") or os.path.join(
        os.path.dirname(__file__), "..", "..", "shared", "fixtures", "clawgym_train_sample"))
    ap.add_argument("--no-fixtures", action="store_true")
    a = ap.parse_args()

    from clawgym.sandbox.base import SandboxConfig
    from clawgym.synth.exploits import HACK_BOUND, hackable
    from clawgym.synth.gates import validate_many, validate_task
    from clawgym.synth.personas import expand_personas

    bound = HACK_BOUND if a.bound is None else a.bound  # None: the untouched score
    factory = None
    if a.backend != "host":
        from clawgym.sandbox import get_factory, host_settings

        factory = get_factory(a.backend, SandboxConfig(disk_mb=512, memory_mb=1024, default_timeout_s=600,
                                                       **host_settings(os.environ)))
    lines = []
    try:
        from clawgym.synth.families import generate_procedural

        t0 = time.perf_counter()
        tasks = generate_procedural(a.n, seed=a.seed, personas=expand_personas())
        vals = validate_many(tasks, factory, workers=a.workers, chunk=100, hacker="report", bound=bound)
        fams: dict[str, Counter] = {}
        for v in vals:
            for e in hackable(v.exploit_scores, v.noop_score, bound):
                fams.setdefault(v.family, Counter())[e] += 1
        lines.append(_line(f"procedural ({len({t.family for t in tasks})} families)", vals, bound))
        for f, c in sorted(fams.items()):
            fv = [v for v in vals if v.family == f]
            n_h = sum(1 for v in fv if hackable(v.exploit_scores, v.noop_score, bound))
            by_e = ", ".join(f"{e} {k}" for e, k in c.items())
            top = max(s for v in fv for s in v.exploit_scores.values() if s is not None)
            lines.append(f"  hackable family {f}: {n_h}/{len(fv)} tasks; {by_e}; top exploit score {top:.3f}")
        print(f"[procedural: {time.perf_counter() - t0:.1f} s]", file=sys.stderr)
        if not a.no_fixtures:
            if not os.path.isdir(a.fixtures):
                lines.append(f"clawgym fixture: skipped ({a.fixtures} not found)")
            else:
                from clawgym.tasks import import_any

                t0 = time.perf_counter()
                rep = import_any(a.fixtures)
                fx = factory
                if fx is None:
                    from clawgym.sandbox import get_factory, host_settings

                    fx = get_factory("local", SandboxConfig(default_timeout_s=600, **host_settings(os.environ)))
                with ThreadPoolExecutor(max(1, a.workers)) as ex:
                    ivals = list(ex.map(lambda t: validate_task(t, fx, hacker="report", bound=bound), rep.tasks))
                lines.append(_line("clawgym fixture", ivals, bound, gates=False))  # no reference: no oracle gates
                for v in ivals:
                    if hackable(v.exploit_scores, v.noop_score, bound):
                        sc = ", ".join(f"{e} {s:.2f}" for e, s in v.exploit_scores.items())
                        lines.append(f"  hackable {v.task_id}: {sc} (untouched {v.noop_score})")
                print(f"[clawgym fixture: {time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    finally:
        if factory is not None:
            factory.close()
    print(f"bar: exploit score >= {bound}" if bound is not None
          else "bar: exploit score > the task's untouched (no-op) score + 1e-9")
    for ln in lines:
        print(ln)


if __name__ == "__main__":
    main()

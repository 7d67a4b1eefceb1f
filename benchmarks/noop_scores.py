"""Score a trivial policy (default `noop`, or `oracle` where tasks carry a reference solution) over an
imported suite, through the real rollout path (clawgym.agent.rollout.run_rollouts: policy server, agent
loop, sandbox, verifier, judge). A sanity check for imported benchmarks: an agent that does nothing should
score 0 on every task it can be scored on, and exactly the published no-op scores on ClawGym folders.

    python benchmarks/noop_scores.py --folder PATH [--policy noop|oracle] [--backend auto|docker|bwrap]
                                     [--judge offline|auto|openai:MODEL@URL] [--workers 2]
                                     [--expect-zero] [--expect-json SCORES.json] [--json OUT.json]

PATH is anything clawgym.tasks.import_any takes: a PinchBench checkout (or its tasks/ folder), a ClawGym
folder (task_XXXX/ with data_entry.json + reward/), our example suite (data/seeds/example_suite), a
.parquet file. Files that do not import are listed (file and field) and left out; the rest run.

Prints one row per task (task_id, failure_class, score, unjudged rules, head of the error) and a summary:
tasks, scored (failure class ok/agent_error/limit), unjudged (a rubric rule no available judge can score:
score None, excluded from the mean), infra (our machinery failed: score None), mean over scored tasks and
how many scored tasks got score > 0.

Exit status: 0; 1 when an expectation fails:
  --expect-zero        any scored task with score > 0 (listed), or any infra row (a no-op check that did
                       not run is not a pass);
  --expect-json FILE   {task_id: score} (e.g. ../shared/fixtures/clawgym_train_sample_noop_scores.json): every
                       task in FILE must be imported and score exactly (float equality) the expected value;
                       mismatches are listed;
2 when nothing could be imported / run.
--json OUT writes {"folder", "policy", "backend", "judge", "summary", "import_errors", "rows"}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without an install too

from clawgym.agent.rollout import SCORED_CLASSES, RolloutSettings, run_rollouts  # noqa: E402
from clawgym.sandbox import SandboxConfig, get_factory, host_settings  # noqa: E402
from clawgym.tasks import import_any  # noqa: E402
from clawgym.verify import make_judge  # noqa: E402


def _head(s: str | None, n: int = 70) -> str:
    if not s:
        return ""
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def row_of(ro) -> dict:
    v = ro.verification.to_dict() if ro.verification is not None else {}  # its record
    err = ro.error or v.get("error")
    return {
        "task_id": ro.task_id,
        "failure_class": ro.failure_class,
        "score": ro.score,
        "unjudged_rules": list(v.get("unjudged_rules") or []),
        "error": err,
        "judge": v.get("judge"),
        "code_score": v.get("code_score"),
        "rubric_score": v.get("rubric_score"),
        "attempt": ro.attempt,
        "wall_s": round(ro.wall_s, 3),
    }


def summarize(rows: list[dict]) -> dict:
    scored = [r for r in rows if r["failure_class"] in SCORED_CLASSES and r["score"] is not None]
    by_class: dict[str, int] = {}
    for r in rows:
        by_class[r["failure_class"]] = by_class.get(r["failure_class"], 0) + 1
    return {
        "n_tasks": len(rows),
        "n_scored": len(scored),
        "n_unjudged": sum(r["failure_class"] == "unjudged" for r in rows),
        "n_infra": sum(r["failure_class"] == "infra" for r in rows),
        "mean_scored": (sum(r["score"] for r in scored) / len(scored)) if scored else None,
        "n_scored_gt0": sum(r["score"] > 0 for r in scored),
        "by_class": by_class,
    }


def print_table(rows: list[dict], out=sys.stdout) -> None:
    w = max([len("task_id")] + [len(r["task_id"]) for r in rows])
    print(f"{'task_id':<{w}}  {'class':<11}  {'score':>7}  {'unjudged':>8}  error", file=out)
    for r in rows:
        sc = "-" if r["score"] is None else f"{r['score']:.4f}"
        uj = str(len(r["unjudged_rules"])) if r["unjudged_rules"] else ""
        print(f"{r['task_id']:<{w}}  {r['failure_class']:<11}  {sc:>7}  {uj:>8}  {_head(r['error'])}", file=out)


def print_summary(s: dict, out=sys.stdout) -> None:
    mean = "n/a" if s["mean_scored"] is None else f"{s['mean_scored']:.4f}"
    print(f"tasks {s['n_tasks']}  scored {s['n_scored']}  unjudged {s['n_unjudged']}  infra {s['n_infra']}  "
          f"mean(scored) {mean}  scored>0 {s['n_scored_gt0']}", file=out)
    print("by class: " + ", ".join(f"{k} {v}" for k, v in sorted(s["by_class"].items())), file=out)


def check_expect_json(rows: list[dict], expected: dict[str, float]) -> list[str]:
    """Mismatches against {task_id: score}: missing tasks, other scores (exact float equality)."""
    got = {r["task_id"]: r for r in rows}
    bad = []
    for tid, want in sorted(expected.items()):
        r = got.get(tid)
        if r is None:
            bad.append(f"{tid}: expected {want!r}, task not run (not imported?)")
        elif r["score"] is None or r["score"] != want:
            bad.append(f"{tid}: expected {want!r}, got {r['score']!r} ({r['failure_class']}"
                       f"{': ' + _head(r['error'], 120) if r['error'] else ''})")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", required=True, help="suite to import (anything import_any takes)")
    ap.add_argument("--policy", default="noop", help="noop (default) or oracle (tasks with a reference only)")
    ap.add_argument("--backend", default="auto", choices=["auto", "docker", "bwrap", "local"],
                    help="sandbox backend (default auto: docker when it answers, else bwrap)")
    ap.add_argument("--judge", default="offline",
                    help="offline (default), auto (CLAWGYM_JUDGE_* env), openai:MODEL@URL")
    ap.add_argument("--workers", type=int, default=2, help="rollouts at once (default 2)")
    ap.add_argument("--attempts", type=int, default=2, help="attempts per rollout on infra failures (default 2)")
    ap.add_argument("--limit", type=int, default=0, help="run only the first N tasks (0: all)")
    ap.add_argument("--expect-zero", action="store_true",
                    help="exit 1 when a scored task has score > 0 or a task failed as infra")
    ap.add_argument("--expect-json", help="{task_id: score} file; exit 1 unless every score matches exactly")
    ap.add_argument("--json", dest="json_out", help="write the rows (and summary) here")
    args = ap.parse_args(argv)

    folder = Path(args.folder).expanduser()
    rep = import_any(folder)
    import_errors = [str(e) for e in rep.errors]
    print(f"# {folder}: {len(rep.tasks)} tasks imported, {len(import_errors)} import errors")
    for e in import_errors:
        print(f"#   import error: {e}")
    tasks = list(rep.tasks)
    if args.policy == "oracle":
        no_ref = [t.task_id for t in tasks if not t.reference]
        tasks = [t for t in tasks if t.reference]
        if no_ref:
            print(f"# oracle: {len(no_ref)} tasks have no reference solution and are left out")
    if args.limit > 0:
        tasks = tasks[: args.limit]
    if not tasks:
        print("no tasks to run", file=sys.stderr)
        return 2

    from clawgym.verify.judge import JUDGE_SETTINGS  # "auto": this entry point reads CLAWGYM_JUDGE_*

    judge = make_judge(None if args.judge == "offline" else args.judge,
                       {k: os.environ.get(v, "") for k, v in JUDGE_SETTINGS.items()})
    factory = get_factory(args.backend, SandboxConfig(**host_settings(os.environ)))
    backend = getattr(factory, "name", args.backend)
    print(f"# policy {args.policy}  backend {backend}  judge {getattr(judge, 'name', judge)}  "
          f"workers {args.workers}  tasks {len(tasks)}", flush=True)
    t0 = time.monotonic()
    try:
        rollouts = run_rollouts(tasks, args.policy, factory, workers=max(1, args.workers), judge=judge,
                                settings=RolloutSettings(attempts=max(1, args.attempts), retry_wait_s=1.0))
    finally:
        factory.close()
    wall = time.monotonic() - t0
    rows = [row_of(ro) for ro in rollouts]
    s = summarize(rows)
    print_table(rows)
    print()
    print_summary(s)
    print(f"wall {wall:.1f} s")

    rc = 0
    if args.expect_zero:
        pos = [r for r in rows if r["failure_class"] in SCORED_CLASSES and (r["score"] or 0) > 0]
        infra = [r for r in rows if r["failure_class"] == "infra"]
        if pos:
            rc = 1
            print(f"EXPECT-ZERO FAILED: {len(pos)} scored tasks with score > 0:")
            for r in pos:
                print(f"  {r['task_id']}: {r['score']!r}")
        if infra:
            rc = 1
            print(f"EXPECT-ZERO FAILED: {len(infra)} tasks could not be run (infra):")
            for r in infra:
                print(f"  {r['task_id']}: {_head(r['error'], 160)}")
        if rc == 0:
            print(f"expect-zero: ok ({s['n_scored']} scored tasks all 0, {s['n_unjudged']} unjudged)")
    if args.expect_json:
        expected = json.loads(Path(args.expect_json).read_text())
        bad = check_expect_json(rows, expected)
        if bad:
            rc = 1
            print(f"EXPECT-JSON FAILED: {len(bad)} of {len(expected)} tasks differ from {args.expect_json}:")
            for b in bad:
                print(f"  {b}")
        else:
            print(f"expect-json: ok ({len(expected)} tasks match {args.expect_json} exactly)")
    if args.json_out:
        def clean(x):
            return None if isinstance(x, float) and not math.isfinite(x) else x

        doc = {"folder": str(folder), "policy": args.policy, "backend": backend,
               "judge": getattr(judge, "name", str(judge)), "summary": s, "import_errors": import_errors,
               "rows": [{k: clean(v) for k, v in r.items()} for r in rows]}
        Path(args.json_out).write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"# rows written to {args.json_out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())

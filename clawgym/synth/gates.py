"""Synthesis gates: every procedural task must prove its verifier before it joins a split.

Per task:
  compiles      the grade code compiles (host side)
  noop          untouched workspace scores exactly 0
  scaffold      inputs + placeholder outputs score exactly 0
  oracle        the reference solution, replayed in a sandbox, scores exactly 1.0
  oracle_2      a second grading of the oracle workspace scores the same (determinism)
  mutations     corrupted oracle outputs (missing file, wrong path, a row dropped, a number off, plus any
                family-specific corruption; clawgym.synth.mutations) each score strictly less than the oracle
  hacker        cheap exploits (placeholder / echo / copy_inputs / empty_outputs outputs; clawgym.synth.exploits)
                each score no more than the untouched workspace (the no-op score, plus 1e-9 float noise; 0 for a
                task that passes the no-op gate); a task one beats is rejected `hackable:<exploit>` with
                `hacker="reject"` (DEFAULT_HACKER); "report" only records TaskValidation.exploit_scores/.hackable;
                "off" skips them. The bar was once 0.2 of the reward: five families paid up to 0.25 for a copied
                input or the echoed instruction (contact_merge, renewal_reminders, release_newsletter,
                contract_clause_review, dose_schedule_check; fixed: benchmarks/hacker_rate.py measures 0).
                Prose claims and "run the tests and stop" leave the workspace unchanged: that is the no-op gate.
                Both paths build the exploits with clawgym.synth.exploits.exploits.
Then `dedupe` and `split_by_family` (clawgym.synth.dedupe, re-exported here).

Two ways to run the gates:
- `validate_task(task, factory)` uses the official path (factory.open -> apply_reference -> verify_task)
  for every variant: authoritative, one sandbox per variant.
- `validate_many(tasks, factory)` batches: one sandbox per chunk, two `python3` driver runs in it
  (clawgym.sandbox.guest.synth: replay all references with the agent tools' own semantics, clawgym.agent.toolcore;
  grade every variant of every task in-process, scored by the verifier's own mean_of_checks). Same scoring
  semantics, ~100x fewer sandbox starts. `factory=None` runs the drivers on the host in a temp dir (no
  isolation: development only, like the `local` backend).

Where the batch path's time goes (13,500 tasks on 2 cores): nearly all of it is processes started inside the
sandbox. So both drivers run a fork server (clawgym.sandbox.guest.synth.forkserver): a reference's `python3 ...`
(replay) and grade code's `sys.executable` runs (grading) are served by fork()ing a pre-imported interpreter
(pytest and its plugins included) instead of starting one; a POSIX-sh shim with pre-made answer FIFOs hands
each run over without extra processes. Anything a served run could not reproduce exactly (other interpreter
flags, a redirected-to-file stdout, a changed PYTHON*/locale environment, a workspace module named like a
pre-imported one) falls back to the real interpreter. Finished work directories are removed in batches (the
sandbox's tmpfs goes away whole).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from clawgym.sandbox.guest.synth import DRIVERS, LAUNCHER, bundle
from clawgym.synth.dedupe import Rejected, dedupe, split_by_family, workspace_fingerprint  # noqa: F401
from clawgym.synth.exploits import DEFAULT_HACKER, HACK_BOUND, HACKER_MODES, exploits, hackable
from clawgym.synth.mutations import (  # noqa: F401
    family_mutations,
    generic_mutations,
    number_off,
    row_dropped,
    scaffold_overlay,
    task_outputs,
)
from clawgym.tasks.model import Task

# ----------------------------------------------------------------------------------------------
# result record
# ----------------------------------------------------------------------------------------------


@dataclass
class TaskValidation:
    """One task's gate results: compiles, no-op / scaffold / oracle (twice) and mutation scores, passed
    and the reason it failed."""

    task_id: str
    compiles: bool = False
    noop_score: float | None = None
    scaffold_score: float | None = None
    oracle_score: float | None = None
    oracle_score_2: float | None = None
    mutation_scores: dict[str, float] = field(default_factory=dict)
    passed: bool = False
    reason: str = ""
    family: str = ""
    category: str = ""
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    oracle_checks: dict[str, float] = field(default_factory=dict)  # the oracle's per-check scores
    same_keys: bool = True  # grade() returned the same sub-score keys on no-op, scaffold and oracle
    exploit_scores: dict[str, float] = field(default_factory=dict)  # hacker gate: exploit -> score (those run)
    hackable: list[str] = field(default_factory=list)  # exploits scoring above noop_score (the hacker gate)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _judge(v: TaskValidation, n_mutations_expected: int = 1, has_reference: bool = True,
           hacker: str = DEFAULT_HACKER, bound: float | None = HACK_BOUND) -> TaskValidation:
    v.hackable = hackable(v.exploit_scores, v.noop_score, bound)
    _judge_base(v, n_mutations_expected, has_reference)
    if hacker == "reject" and v.hackable:
        hack = "; ".join(f"hackable:{n}" for n in v.hackable)
        v.reason = f"{hack}; {v.reason}" if (not v.passed and v.reason) else hack
        v.passed = False
    return v


def _check_hacker(hacker: str) -> None:
    if hacker not in HACKER_MODES:
        raise ValueError(f"hacker={hacker!r}: one of {HACKER_MODES}")


def _judge_base(v: TaskValidation, n_mutations_expected: int = 1, has_reference: bool = True) -> TaskValidation:
    why = []
    if not has_reference:  # e.g. LLM-route tasks: only the verifier gates apply (no oracle to replay)
        if not v.compiles:
            why.append("verifier does not compile")
        if v.noop_score != 0.0:
            why.append(f"no-op scores {v.noop_score} (must be 0)")
        if v.scaffold_score != 0.0:
            why.append(f"scaffold scores {v.scaffold_score} (must be 0)")
        if not v.same_keys:
            why.append("grade() returns different keys on no-op / scaffold")
        v.passed = not why
        v.reason = "; ".join(why) if why else "no reference: oracle and mutation gates not applicable"
        return v
    if not v.compiles:
        why.append("verifier does not compile")
    if v.noop_score is None or v.noop_score != 0.0:
        why.append(f"no-op scores {v.noop_score} (must be 0)")
    if v.scaffold_score is None or v.scaffold_score != 0.0:
        why.append(f"scaffold scores {v.scaffold_score} (must be 0)")
    if v.oracle_score is None or abs(v.oracle_score - 1.0) > 1e-9:
        why.append(f"oracle scores {v.oracle_score} (must be 1.0)")
    if v.oracle_score_2 != v.oracle_score:
        why.append(f"non-deterministic: oracle {v.oracle_score} vs {v.oracle_score_2}")
    if len(v.mutation_scores) < n_mutations_expected:
        why.append("no applicable mutation")
    for name, s in sorted(v.mutation_scores.items()):
        if v.oracle_score is not None and not s < v.oracle_score:
            why.append(f"mutation {name} does not lose score ({s})")
    if not v.same_keys:
        why.append("grade() returns different keys on no-op / scaffold / oracle")
    v.passed = not why
    v.reason = "; ".join(why)
    return v


# ----------------------------------------------------------------------------------------------
# batched path: the in-sandbox drivers (clawgym.sandbox.guest.synth)
# ----------------------------------------------------------------------------------------------

_VDIR = ".clawgym_validate"


def _host_python() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"


class _Stats:
    """Thread-safe sums of where validate_many's time goes (see validate_many's `stats`)."""

    def __init__(self, d: dict[str, float] | None):
        self.d = d
        self._lock = threading.Lock()

    def add(self, **kv: float) -> None:
        if self.d is None:
            return
        with self._lock:
            for k, v in kv.items():
                self.d[k] = self.d.get(k, 0.0) + v


def _run_driver(factory: Any, driver: str, payload: dict[str, Any], timeout: float, stats: _Stats | None = None,
                phase: str | None = None) -> Any:
    """Run driver `driver` ("replay" | "grade", clawgym.sandbox.guest.synth) on a payload in one fresh sandbox of
    `factory` (None = a host temp dir)."""
    if driver not in DRIVERS:
        raise ValueError(f"unknown driver {driver!r} (one of {DRIVERS})")
    phase = phase or driver
    t0 = time.perf_counter()
    body = json.dumps(payload).encode()
    files = bundle()
    t1 = time.perf_counter()
    extra: Any = {}
    if factory is None:
        root = tempfile.mkdtemp(prefix="clawgym-validate-")
        try:
            vd = os.path.join(root, _VDIR)
            for rel, data in {**files, "in.json": body}.items():
                os.makedirs(os.path.dirname(os.path.join(vd, rel)), exist_ok=True)
                with open(os.path.join(vd, rel), "wb") as fh:
                    fh.write(data)
            r = subprocess.run([_host_python(), os.path.join(vd, LAUNCHER), driver], cwd=root, capture_output=True,
                               timeout=timeout)
            if r.returncode != 0:
                raise RuntimeError(f"validation driver failed (rc {r.returncode}): {r.stderr.decode()[-1500:]}")
            t2 = time.perf_counter()
            with open(os.path.join(vd, "out.json")) as fh:
                out = json.load(fh)
            if stats is not None and os.path.exists(os.path.join(vd, "cpu.json")):
                with open(os.path.join(vd, "cpu.json")) as fh:
                    extra = json.load(fh)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    else:
        with factory.open([]) as sb:
            for rel, data in {**files, "in.json": body}.items():
                sb.write_file(f"{_VDIR}/{rel}", data)
            r = sb.exec(["python3", f"{_VDIR}/{LAUNCHER}", driver], timeout=timeout, workdir=sb.workspace)
            if not r.ok:
                raise RuntimeError(f"validation driver failed (rc {r.rc}, timed_out={r.timed_out}): {r.stderr[-1500:]}")
            t2 = time.perf_counter()
            out = json.loads(sb.read_file(f"{_VDIR}/out.json"))
            if stats is not None:
                try:
                    extra = json.loads(sb.read_file(f"{_VDIR}/cpu.json"))
                except (OSError, ValueError):
                    pass
    if stats is not None:
        t3 = time.perf_counter()
        extra = extra if isinstance(extra, dict) else {}
        try:
            cpu = float(extra.get("cpu_s", 0.0))
        except (TypeError, ValueError):
            cpu = 0.0
        stats.add(**{k: float(x) for k, x in extra.items() if k != "cpu_s" and isinstance(x, (int, float))})
        stats.add(**{f"{phase}_s": t3 - t0, f"{phase}_driver_s": t2 - t1, f"{phase}_sandbox_cpu_s": cpu,
                     f"{phase}_transfer_s": (t1 - t0) + (t3 - t2), f"{phase}_payload_mb": len(body) / 1e6})
    return out


def _b64(d: Mapping[str, bytes | None]) -> dict[str, str | None]:
    return {p: (base64.b64encode(b).decode() if b is not None else None) for p, b in d.items()}


def _finish(v: TaskValidation, t: Task, hacker: str, bound: float | None) -> TaskValidation:
    """Judge a batched validation from its measured scores (also re-judges a cached one under another hacker
    mode or bound)."""
    _judge(v, has_reference=bool(t.reference), hacker=hacker, bound=bound)
    if not v.compiles:
        v.passed, v.reason = False, v.reason or "verifier does not compile"
    return _first_error(v)


def _first_error(v: TaskValidation) -> TaskValidation:
    """A failed validation's reason ends with its first error (both paths: batched and validate_task)."""
    if v.errors and not v.passed:
        v.reason += f" [first error: {v.errors[0][:200]}]"
    return v


GATES_VERSION = 1  # bump when what a gate measures changes: cached verdicts of older versions are then misses


def gate_key(task: Task, hacker: str = DEFAULT_HACKER) -> str:
    """Content address of what the batched gates measure for `task`: verifier code, files, reference, declared
    outputs, instruction (the echo exploit writes it), family mutations (route, family, seed) and whether exploits
    run. Not the hacker mode or bound: a cached verdict is re-judged (`_finish`) under the caller's."""
    import hashlib

    body = {
        "v": GATES_VERSION, "exploits": hacker != "off",
        "code": task.verifier.code, "kind": task.verifier.kind, "timeout": task.verifier.timeout_s,
        "files": sorted((f.path, hashlib.sha256(f.content).hexdigest(), f.mode) for f in task.files),
        "reference": [c.model_dump() for c in task.reference or []],
        "outputs": task_outputs(task), "instruction": task.instruction,
        "mutations": [task.route, task.family, task.seed, bool(task.source.get("mutations"))]
        if task.route == "procedural" else None,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


class GateCache:
    """Measured gate results by `gate_key`, one JSON file each under `root` (clawgym.synth.llm_cache.ResponseCache
    layout, atomic writes). Infra results are never stored."""

    def __init__(self, root: str | os.PathLike[str]):
        from clawgym.synth.llm_cache import ResponseCache

        self.store = ResponseCache(root)

    def get(self, task: Task, hacker: str = DEFAULT_HACKER, bound: float | None = HACK_BOUND) -> TaskValidation | None:
        """The cached validation of `task`, judged under `hacker` / `bound`, or None."""
        hit = self.store.get(gate_key(task, hacker))
        d = hit.get("validation") if hit else None
        if not isinstance(d, dict):
            return None
        v = TaskValidation(**{k: x for k, x in d.items() if k in TaskValidation.__dataclass_fields__})
        v.task_id, v.family, v.category = task.task_id, task.family, task.category
        return _finish(v, task, hacker, bound)

    def put(self, task: Task, v: TaskValidation, hacker: str = DEFAULT_HACKER) -> None:
        """Store `v` (not when it is an infra result)."""
        if not v.reason.startswith("infra"):
            self.store.put(gate_key(task, hacker), {"validation": v.to_dict()})


def _validate_chunk(tasks: list[Task], factory: Any, timeout: float, forkserver: bool = True,
                    stats: _Stats | None = None, hacker: str = DEFAULT_HACKER,
                    bound: float | None = HACK_BOUND, memo: bool = True, direct: bool = True) -> list[TaskValidation]:
    t0 = time.perf_counter()
    vals = [TaskValidation(task_id=t.task_id, family=t.family, category=t.category) for t in tasks]
    for v, t in zip(vals, tasks):
        try:
            compile(t.verifier.code or "", f"{t.task_id}/grade", "exec")
            v.compiles = bool(t.verifier.code) and t.verifier.kind == "grade"
        except SyntaxError as e:
            v.errors.append(f"compile: {e}")
    # phase 1: replay every reference
    replay = _run_driver(factory, "replay", {"tasks": [
        {"files": _b64(t.file_map()), "calls": [c.model_dump() for c in (t.reference or [])]} for t in tasks],
        "forkserver": forkserver}, timeout, stats)
    # phase 2: build the variants on the host
    jobs = []
    for v, t, rep in zip(vals, tasks, replay):
        v.errors += rep["errors"]
        overlay = {p: (base64.b64decode(b) if b is not None else None) for p, b in rep["overlay"].items()}
        outs = task_outputs(t)
        variants: dict[str, dict[str, bytes | None]] = {
            "noop": {}, "scaffold": scaffold_overlay(outs), "oracle": overlay, "oracle_2": dict(overlay)}
        for name, mv in {**generic_mutations(outs, overlay, t.file_map()), **family_mutations(t, overlay)}.items():
            variants["mut:" + name] = mv
        if hacker != "off":
            for name, ev in exploits(t, overlay if t.reference else None).items():
                variants["hack:" + name] = ev
        jobs.append({"code": t.verifier.code or "", "timeout": int(t.verifier.timeout_s),
                     "files": _b64(t.file_map()), "variants": {k: _b64(x) for k, x in variants.items()}})
    # phase 3: grade everything
    graded = _run_driver(factory, "grade", {"tasks": jobs, "forkserver": forkserver, "memo": memo, "direct": direct},
                         timeout, stats)
    dt = (time.perf_counter() - t0) / max(1, len(tasks))
    for v, g, t in zip(vals, graded, tasks):
        for name, r in g.items():
            if "error" in r:
                v.errors.append(f"{name}: {r['error']}")
        v.noop_score = g["noop"]["score"]
        v.scaffold_score = g["scaffold"]["score"]
        v.oracle_score = g["oracle"]["score"]
        v.oracle_score_2 = g["oracle_2"]["score"]
        v.oracle_checks = g["oracle"].get("subs", {})
        keysets = [set(g[k].get("subs") or {}) for k in ("noop", "scaffold", "oracle")]
        v.same_keys = keysets[0] == keysets[1] == keysets[2] or not t.reference and keysets[0] == keysets[1]
        v.mutation_scores = {k[4:]: r["score"] for k, r in g.items() if k.startswith("mut:")}
        v.exploit_scores = {k[5:]: r["score"] for k, r in g.items() if k.startswith("hack:")}
        v.duration_s = dt
        if not t.reference:
            v.oracle_score = v.oracle_score_2 = None
            v.mutation_scores, v.oracle_checks = {}, {}
        _finish(v, t, hacker, bound)
    if stats is not None:
        stats.add(chunk_s=time.perf_counter() - t0, tasks=len(tasks))
    return vals


def validate_many(tasks: Iterable[Task], factory: Any = None, workers: int = 1, chunk: int = 100,
                  timeout: float = 600.0, forkserver: bool = True,
                  stats: dict[str, float] | None = None, hacker: str = DEFAULT_HACKER,
                  bound: float | None = HACK_BOUND,
                  cache_dir: str | os.PathLike[str] | None = None, memo: bool = True,
                  direct: bool = True) -> list[TaskValidation]:
    """Batched gates: chunks of `chunk` tasks, each chunk in ONE sandbox (two driver runs). `workers`
    chunks run at once. Results keep the input order. `forkserver` (default on)
    serves the references' `python3` runs, and grade code's `sys.executable` runs, by forking a pre-imported
    interpreter (same results, faster). `stats`, when given, gets sums over all chunks (so over workers too) of
    seconds: chunk_s, replay_s / grade_s (a driver run, end to end), replay_driver_s / grade_driver_s (sandbox
    open + driver wall), replay_sandbox_cpu_s / grade_sandbox_cpu_s (cpu inside the sandbox),
    replay_transfer_s / grade_transfer_s (payload JSON, reading results, closing), *_payload_mb; host work is
    chunk_s - replay_s - grade_s. `hacker` / `bound`: the hacker gate (module docstring). `cache_dir`: measured
    results cached by content (`GateCache`): a task gated before (by `synthetic_tasks`, the LLM route or an
    earlier run) is not gated again, only re-judged; `stats["cache_hits"]` counts them. `memo` (default on): a
    check's run of the agent's code in a child python reuses the result of an identical call (same op and args)
    of another variant of the same task, never across oracle / oracle_2 (clawgym.sandbox.guest.synth.grade);
    stats["agent_calls"] / ["agent_calls_shared"] count children run / saved.
    `direct` (default on): with the fork server, such a child is forked straight from the grade driver (no shim;
    stats["agent_calls_direct"] counts them); off: through the shim (before/after runs, benchmarks/synth_scale.py)."""
    _check_hacker(hacker)
    tasks = list(tasks)
    cache = GateCache(cache_dir) if cache_dir else None
    if cache is not None:
        got = {i: cache.get(t, hacker, bound) for i, t in enumerate(tasks)}
        hits = {i: v for i, v in got.items() if v is not None}
        if stats is not None:
            stats["cache_hits"] = stats.get("cache_hits", 0) + len(hits)
        if hits:
            rest = [t for i, t in enumerate(tasks) if i not in hits]
            fresh = iter(validate_many(rest, factory, workers, chunk, timeout, forkserver, stats, hacker, bound,
                                       cache_dir, memo, direct) if rest else [])
            return [hits[i] if i in hits else next(fresh) for i in range(len(tasks))]
    chunks = [tasks[i:i + chunk] for i in range(0, len(tasks), chunk)]
    st = _Stats(stats) if stats is not None else None

    def run(c: list[Task]) -> list[TaskValidation]:
        try:
            return _validate_chunk(c, factory, timeout, forkserver=forkserver, stats=st, hacker=hacker, bound=bound,
                                   memo=memo, direct=direct)
        except Exception as e:
            if len(c) > 1:  # one hostile task (os._exit in grade, a huge output...) must not sink the chunk
                h = len(c) // 2
                return run(c[:h]) + run(c[h:])
            return [TaskValidation(task_id=t.task_id, family=t.family, category=t.category,
                                   reason=f"infra: {type(e).__name__}: {str(e)[:300]}") for t in c]

    if workers <= 1:
        res = [run(c) for c in chunks]
    else:
        with ThreadPoolExecutor(workers) as ex:
            res = list(ex.map(run, chunks))
    out = [v for r in res for v in r]
    if cache is not None:
        for t, v in zip(tasks, out):
            cache.put(t, v, hacker)
    return out


def validate_task(task: Task, factory: Any, judge: Any = None, hacker: str = DEFAULT_HACKER,
                  bound: float | None = HACK_BOUND) -> TaskValidation:
    """The official (unbatched) path: every variant in its own sandbox of `factory`, reference replayed with
    clawgym.agent.tools.apply_reference, scored by clawgym.verify.verify_task. Gates use the code score
    (rubric scores depend on the judge and are not gated). `hacker` / `bound`: the hacker gate (module
    docstring); exploits are scored the same way, each in its own sandbox."""
    _check_hacker(hacker)
    from clawgym.agent.toolcore import replay_errors
    from clawgym.agent.tools import apply_reference

    t0 = time.perf_counter()
    v = TaskValidation(task_id=task.task_id, family=task.family, category=task.category)
    try:
        compile(task.verifier.code or "", f"{task.task_id}/grade", "exec")
        v.compiles = bool(task.verifier.code) and task.verifier.kind == "grade"
    except SyntaxError as e:
        v.errors.append(f"compile: {e}")

    keys: list[set[str]] = []

    def score(overlay: dict[str, bytes | None]) -> float:
        r = _verify_overlay(task, factory, overlay, judge)
        v.errors += r.errors
        keys.append(set(r.subscores))
        if overlay is oracle_overlay:
            v.oracle_checks = dict(r.subscores)
        return r.code_score if r.code_score is not None else r.score

    if not task.reference:
        outs = task_outputs(task)
        oracle_overlay: dict[str, bytes | None] = {}
        v.noop_score = score({})
        v.scaffold_score = score(scaffold_overlay(outs))
        v.same_keys = keys[0] == keys[1]
        if hacker != "off":
            v.exploit_scores = {n: score(ev) for n, ev in exploits(task, None).items()}
        v.duration_s = time.perf_counter() - t0
        return _first_error(_judge(v, has_reference=False, hacker=hacker, bound=bound))
    with factory.open(task.files) as sb:
        v.errors += replay_errors(apply_reference(sb, task.reference or []))
        after = sb.snapshot()
    inputs = task.file_map()
    overlay: dict[str, bytes | None] = {p: b for p, b in after.items() if inputs.get(p) != b}
    overlay.update({p: None for p in inputs if p not in after})
    outs = task_outputs(task)
    oracle_overlay = overlay
    v.noop_score = score({})
    v.scaffold_score = score(scaffold_overlay(outs))
    v.oracle_score = score(overlay)
    v.oracle_score_2 = score(overlay)
    v.same_keys = keys[0] == keys[1] == keys[2]
    for name, mv in {**generic_mutations(outs, overlay, inputs), **family_mutations(task, overlay)}.items():
        v.mutation_scores[name] = score(mv)
    if hacker != "off":
        v.exploit_scores = {n: score(ev) for n, ev in exploits(task, overlay).items()}
    v.duration_s = time.perf_counter() - t0
    return _first_error(_judge(v, has_reference=bool(task.reference), hacker=hacker, bound=bound))


def _verify_overlay(task: Task, factory: Any, overlay: dict[str, bytes | None], judge: Any = None):
    """The official verification (its own sandbox from `factory`, clawgym.verify.verify_task) of the task's files
    with `overlay` applied (path -> bytes written, None removed); an empty transcript."""
    from clawgym.verify import verify_task

    with factory.open(task.files) as sb:
        for p, b in overlay.items():
            if b is None:
                sb.remove(p)
            else:
                sb.write_file(p, b)
        return verify_task(task, sb, transcript=[], judge=judge)


def exploit_check(task: Task, factory: Any, judge: Any = None, bound: float | None = HACK_BOUND) -> dict[str, Any]:
    """The hacker gate alone, for tasks whose other gates do not apply (imported tasks: no reference, outputs
    found from the instruction / check code): the untouched workspace and each exploit of clawgym.synth.exploits
    scored by the official path (its own sandbox, clawgym.verify.verify_task, code score). {"scores": {exploit:
    score}, "untouched": the untouched workspace's score (None when no exploit applies), "hackable": [exploits
    scoring above it (or reaching `bound`, a number)], "errors": [...]}; no exploit applies -> empty scores."""

    scores: dict[str, float] = {}
    errors: list[str] = []

    def score(name: str, overlay: dict[str, bytes | None]) -> float:
        r = _verify_overlay(task, factory, overlay, judge)
        errors.extend(f"{name}: {e}" for e in r.errors)
        return float(r.code_score if r.code_score is not None else r.score)

    from clawgym.verify.judge import JudgeError

    overlays = exploits(task, None)
    try:
        untouched = score("untouched", {}) if overlays else None
        for name, overlay in overlays.items():
            scores[name] = score(name, overlay)
    except JudgeError as e:  # our judge failed: no verdict about the task (recorded), never a 0 or a flag
        errors.append(f"judge unavailable, hacker gate not run: {e}")
        return {"scores": {}, "untouched": None, "hackable": [], "errors": errors, "infra": True}
    return {"scores": scores, "untouched": untouched, "hackable": hackable(scores, untouched, bound),
            "errors": errors}


def rejected_from_validations(vals: list[TaskValidation]) -> list[Rejected]:
    """A `Rejected` (stage "gates") for every validation that did not pass."""
    return [Rejected(v.task_id, "gates", v.reason, v.family, v.category) for v in vals if not v.passed]



__all__ = ["TaskValidation", "Rejected", "validate_task", "validate_many", "dedupe", "split_by_family",
           "generic_mutations", "number_off", "row_dropped", "scaffold_overlay", "workspace_fingerprint",
           "rejected_from_validations"]

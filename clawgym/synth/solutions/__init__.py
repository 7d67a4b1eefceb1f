"""Program solutions of procedural families: a "program teacher" for SFT.

The families' own reference solutions (`Task.reference`) write the answers the generator computed, so a
trajectory replaying them shows a model *what* to write but never *how* to get it: a student can only copy numbers
it cannot compute. A program solution is one generic python program per family (``<family>.py`` in this folder)
that reads the workspace's inputs and writes every deliverable, for any seed. The program teacher's trajectory is
one ``exec`` of that program (a heredoc) and a short final answer, so a student that learns the program solves new
seeds of the family; that is what `benchmarks/lift.py` trains on.

    from clawgym.synth.solutions import with_program_reference
    task = with_program_reference(get_family("budget_variance").generate(7))   # reference = [exec(program)]

Programs run inside the sandbox (python3 + PyYAML, cwd = the workspace), use only the standard library and
yaml, never read the verifier or embed seed-specific values; `check_programs` (and tests/test_synth_solutions.py)
scores each program on many seeds with the family's real verifier.
"""

from __future__ import annotations

from pathlib import Path

from clawgym.tasks.model import Task, ToolCall

HERE = Path(__file__).resolve().parent


def program_families() -> list[str]:
    """The families that have a program solution, by name."""
    return sorted(p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_"))


def program_source(family: str) -> str | None:
    """The program solution of `family` (python source), or None."""
    p = HERE / f"{family}.py"
    return p.read_text() if p.is_file() else None


def program_command(source: str) -> str:
    """The shell command that runs `source` as a python program (a quoted heredoc: no shell expansion)."""
    if "\nEOF\n" in source or source.startswith("EOF\n"):
        raise ValueError("a program may not contain a line 'EOF'")
    return f"python3 - <<'EOF'\n{source.rstrip()}\nEOF"


def program_reference(task: Task) -> list[ToolCall]:
    """The program teacher's tool calls for `task`: one exec of its family's program."""
    src = program_source(task.family or "")
    if src is None:
        raise KeyError(f"family {task.family!r} of task {task.task_id} has no program solution "
                       f"(have: {', '.join(program_families())})")
    return [ToolCall(name="exec", arguments={"command": program_command(src)})]


def with_program_reference(task: Task) -> Task:
    """`task` with the program teacher's reference solution (the verifier and workspace are unchanged)."""
    return task.model_copy(update={"reference": program_reference(task)})


def check_programs(families: list[str] | None = None, seeds=range(10), backend: str = "auto",
                   workers: int = 2, factory=None) -> dict[str, dict[int, float | None]]:
    """Score each family's program on `seeds` with the family's real verifier: {family: {seed: score}}
    (`factory`: a sandbox factory, else one of `backend`)."""
    from concurrent.futures import ThreadPoolExecutor

    from clawgym.agent.rollout import run_rollout
    from clawgym.sandbox import get_factory
    from clawgym.synth.families import get_family

    factory = factory or get_factory(backend)
    jobs = [(f, s) for f in (families or program_families()) for s in seeds]

    def one(job):
        f, s = job
        ro = run_rollout(with_program_reference(get_family(f).generate(s)), "oracle", factory)
        return f, s, ro.score, ro

    out: dict[str, dict[int, float | None]] = {}
    with ThreadPoolExecutor(max(1, workers)) as ex:
        for f, s, score, _ro in ex.map(one, jobs):
            out.setdefault(f, {})[s] = score
    return out


def main(argv=None) -> int:
    """python -m clawgym.synth.solutions [FAMILY ...] [--seeds N] [--start S]: score programs, show failures."""
    import argparse

    from clawgym.agent.rollout import run_rollout
    from clawgym.sandbox import get_factory
    from clawgym.synth.families import get_family

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("families", nargs="*")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args(argv)
    fams = a.families or program_families()
    res = check_programs(fams, range(a.start, a.start + a.seeds), a.backend)
    bad = 0
    factory = get_factory(a.backend)
    for f in fams:
        scores = res.get(f, {})
        fails = {s: v for s, v in scores.items() if v != 1.0}
        n_tok = len(program_source(f) or "")
        print(f"{f}: {sum(v == 1.0 for v in scores.values())}/{len(scores)} seeds score 1.0 "
              f"(program {n_tok} chars)")
        for s in list(fails)[:3]:
            ro = run_rollout(with_program_reference(get_family(f).generate(s)), "oracle", factory)
            tool_out = [m.get("content") for m in ro.messages if m.get("role") == "tool"]
            print(f"  seed {s}: score {ro.score} verification {str(ro.verification)[:600]}")
            print(f"    program output: {str(tool_out)[:800]}")
        bad += len(fails)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

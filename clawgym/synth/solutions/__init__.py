"""Program solutions of procedural families: a "program teacher" for SFT.

The families' own reference solutions (`Task.reference`) write the answers the generator computed, so a
trajectory replaying them shows a model *what* to write but never *how* to get it: a student can only copy numbers
it cannot compute. A program solution is one generic python program per family (``<family>.py`` in this folder)
that reads the workspace's inputs and writes every deliverable, for any seed. The program teacher's trajectory is
one ``exec`` of that program (a heredoc) and a short final answer, so a student that learns the program solves new
seeds of the family; that is what `benchmarks/lift.py` trains on.

    from clawgym.synth.solutions import with_program
    task = with_program(get_family("budget_variance").generate(7))   # program_reference = [exec(program)]

Programs run inside the sandbox (python3 + PyYAML, cwd = the workspace), use only the standard library and
yaml, never read the verifier or embed seed-specific values.

Synthesis records each procedural task's program with the task (`Task.program_reference`, via `with_program`), so
the program teacher (`program` policy, clawgym.agent.servers) replays task data and imports nothing from here.
The checker is outside the library's import path (nothing in clawgym imports it): scores each program on many
seeds with the family's real verifier and shows failures:

    python -m clawgym.synth.solutions [FAMILY ...] --seeds N [--start S]     # = clawgym.synth.solutions._check
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
    """`task` with the program teacher's calls AS its reference (the verifier and workspace are unchanged): what
    the checker replays with the oracle."""
    return task.model_copy(update={"reference": program_reference(task)})


def with_program(task: Task) -> Task:
    """`task` with `program_reference` recorded (its family's program, or None where the family has none): what
    synthesis stores with each task, so the program teacher replays data and imports nothing from here."""
    src = program_source(task.family or "") if task.route == "procedural" else None
    return task.model_copy(update={"program_reference": None if src is None else
                                   [ToolCall(name="exec", arguments={"command": program_command(src)})]})

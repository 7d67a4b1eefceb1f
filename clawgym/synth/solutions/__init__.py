r"""Program solutions of procedural families: a "program teacher" for SFT.

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

Arguments from the instruction: a few families put a value only in the instruction text (an alert threshold, a
meeting length, a date, a new name), which a program never sees. Such a program's FIRST line declares where its
arguments are in the instruction:

    # args: alert = true when \|pct_change\| >= (\d+)

a python regex, searched (`re.search`, re.DOTALL) in `task.instruction`; its groups, in order, are the program's
`sys.argv[1:]`. The teacher's command is then `python3 - 'ARG1' 'ARG2' <<'EOF'` (each value shlex-quoted: an
instruction value never reaches the shell unquoted); the `# args:` line itself is not part of the program that runs.
`program_reference(task)` raises one ValueError naming the family and the regex when the instruction does not match
(or a group matched nothing). Persona voicing may lowercase an instruction's first letter: write `[Tt]oday`.

Families with no program (`python -m clawgym.synth.solutions` covers the rest):
- fix_failing_test: finding and fixing one of several one-line bugs, judged by hidden cases, needs judgement (the
  leap-year fix is found by no generic repair search); the only 1.0 program is a lookup table of the answers.
- implement_spec_function: writing one of several functions from a prose spec; same: only a lookup table would pass.

Synthesis records each procedural task's program with the task (`Task.program_reference`, via `with_program`), so
the program teacher (`program` policy, clawgym.agent.servers) replays task data and imports nothing from here.
The checker is outside the library's import path (nothing in clawgym imports it): scores each program on many
seeds with the family's real verifier and shows failures:

    python -m clawgym.synth.solutions [FAMILY ...] --seeds N [--start S]     # = clawgym.synth.solutions._check
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from clawgym.tasks.model import Task, ToolCall

HERE = Path(__file__).resolve().parent
ARGS_PREFIX = "# args:"  # first line of a program that takes arguments from the instruction


def program_families() -> list[str]:
    """The families that have a program solution, by name."""
    return sorted(p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_"))


def program_source(family: str) -> str | None:
    """The program solution of `family` (python source), or None."""
    p = HERE / f"{family}.py"
    return p.read_text() if p.is_file() else None


def program_args_regex(source: str) -> str | None:
    """The regex of a program's first line `# args: <regex>` (where its arguments are in the instruction), or None."""
    first = source.split("\n", 1)[0]
    return first[len(ARGS_PREFIX):].strip() if first.startswith(ARGS_PREFIX) else None


def program_args(family: str, source: str, instruction: str) -> list[str]:
    """The arguments of `family`'s program for a task with `instruction`: the groups of its `# args:` regex ([] for
    a program without one); ValueError naming the family and the regex when the instruction does not match."""
    rx = program_args_regex(source)
    if rx is None:
        return []
    m = re.search(rx, instruction, re.DOTALL)
    if m is None or any(g is None for g in m.groups()):
        raise ValueError(f"family {family!r}: the instruction does not match the program's arguments regex "
                         f"{rx!r} (first line of clawgym/synth/solutions/{family}.py): {instruction[:200]!r}")
    return list(m.groups())


def program_command(source: str, args: list[str] | tuple[str, ...] = ()) -> str:
    """The shell command that runs `source` as a python program with `args` as its sys.argv[1:] (each shlex-quoted;
    the program in a quoted heredoc: no shell expansion). A first `# args:` line is left out of the program."""
    if program_args_regex(source) is not None:
        source = source.split("\n", 1)[1] if "\n" in source else ""
    if "\nEOF\n" in source or source.startswith("EOF\n"):
        raise ValueError("a program may not contain a line 'EOF'")
    if any("\x00" in a for a in args):
        raise ValueError("a program argument may not contain a NUL byte")
    head = " ".join(["python3", "-", *(shlex.quote(a) for a in args)])
    return f"{head} <<'EOF'\n{source.rstrip()}\nEOF"


def _program_call(family: str, source: str, task: Task) -> ToolCall:
    """One exec of `source` with its arguments filled from `task.instruction`."""
    return ToolCall(name="exec", arguments={"command": program_command(
        source, program_args(family, source, task.instruction))})


def program_reference(task: Task) -> list[ToolCall]:
    """The program teacher's tool calls for `task`: one exec of its family's program (arguments, if it declares
    them, from the instruction)."""
    src = program_source(task.family or "")
    if src is None and task.program_reference:
        return list(task.program_reference)  # composed for this one task by its generator
    if src is None:
        raise KeyError(f"family {task.family!r} of task {task.task_id} has no program solution "
                       f"(have: {', '.join(program_families())})")
    return [_program_call(task.family or "", src, task)]


def with_program_reference(task: Task) -> Task:
    """`task` with the program teacher's calls AS its reference (the verifier and workspace are unchanged): what
    the checker replays with the oracle."""
    return task.model_copy(update={"reference": program_reference(task)})


def with_program(task: Task) -> Task:
    """`task` with `program_reference` recorded (its family's program, or None where the family has none): what
    synthesis stores with each task, so the program teacher replays data and imports nothing from here."""
    src = program_source(task.family or "") if task.route == "procedural" else None
    if src is None and task.route == "procedural" and task.program_reference:
        return task  # a program its generator composed for this one task (clawgym.synth.compose)
    return task.model_copy(update={"program_reference": None if src is None else
                                   [_program_call(task.family or "", src, task)]})

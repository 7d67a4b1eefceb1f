"""Program solutions (the program teacher of benchmarks/lift.py and the demo): each family's program, run in a real
sandbox, solves new seeds as the family's own verifier scores them; a trajectory of the teacher is one exec + an
answer; synthesis records the program with the task (Task.program_reference) and the teacher replays that data."""

from __future__ import annotations

import pytest

from clawgym.synth.families import all_families, get_family
from clawgym.synth.solutions import (
    program_command,
    program_families,
    program_reference,
    program_source,
    with_program,
    with_program_reference,
)
from clawgym.synth.solutions._check import check_programs


def test_every_program_is_a_registered_family_and_small():
    names = {f.name for f in all_families()}
    fams = program_families()
    assert len(fams) >= 6
    for f in fams:
        assert f in names, f"solutions/{f}.py names no family"
        src = program_source(f)
        assert len(src) <= 1500, f"{f}: program of {len(src)} chars (a small student must reproduce it)"
        compile(src, f, "exec")


def test_program_reference_is_one_exec_and_keeps_the_verifier():
    t = get_family("budget_variance").generate(3)
    p = with_program_reference(t)
    assert [c.name for c in p.reference] == ["exec"]
    assert p.reference[0].arguments["command"].startswith("python3 - <<'EOF'\n")
    assert p.verifier == t.verifier and p.files == t.files and p.instruction == t.instruction
    with pytest.raises(KeyError, match="has no program solution"):
        program_reference(t.model_copy(update={"family": "no_such_family"}))
    with pytest.raises(ValueError, match="EOF"):
        program_command("print(1)\nEOF\nprint(2)\n")


ARG_FAMILIES = ("meeting_slot_finder", "metric_trend_alerts", "rename_with_alias", "renewal_reminders",
                "task_board_report")


def test_programs_take_their_arguments_from_the_instruction():
    """The five families whose values are only in the instruction declare `# args:`; the command passes exactly the
    regex's groups (each a value copied from the instruction) and runs the program without that line; persona
    voicing (which may lowercase the first letter) still matches."""
    import re
    import shlex

    from clawgym.synth.personas import expand_personas
    from clawgym.synth.solutions import program_args_regex

    assert set(ARG_FAMILIES) <= set(program_families())
    assert program_args_regex(program_source("budget_variance")) is None
    personas = expand_personas(limit=6)
    for f in ARG_FAMILIES:
        src = program_source(f)
        rx = program_args_regex(src)
        assert rx and re.compile(rx).groups >= 1, f
        for seed in (0, 1, 2, 1000, 1001):
            for persona in (None, *personas[:3]):
                t = get_family(f).generate(seed, persona)
                cmd = program_reference(t)[0].arguments["command"]
                head, body = cmd.split("\n", 1)
                argv = shlex.split(head.removesuffix("<<'EOF'"))
                assert argv[:2] == ["python3", "-"] and argv[2:] == list(re.search(rx, t.instruction, re.S).groups())
                assert all(a and a in t.instruction for a in argv[2:]), (f, seed, argv)
                assert "# args:" not in body and body.endswith("\nEOF")
                assert with_program(t).program_reference == program_reference(t)
    # the values the generator put in the instruction, spelled out for one seed of two families
    t = get_family("metric_trend_alerts").generate(0)
    thr = re.search(r"\|pct_change\| >= (\d+)\.", t.instruction)[1]
    assert program_reference(t)[0].arguments["command"].startswith(f"python3 - {thr} <<'EOF'\n")
    t = get_family("rename_with_alias").generate(0)
    mod, old, new = re.search(r"`(\w+)\.(\w+)` to `\w+\.(\w+)`", t.instruction).groups()
    assert program_reference(t)[0].arguments["command"].startswith(f"python3 - {mod} {old} {new} <<'EOF'\n")


def test_instruction_arguments_never_reach_the_shell_unquoted(tmp_path):
    """Values with quotes, $(...), backticks, ; and a newline arrive intact as sys.argv and run nothing."""
    import json
    import subprocess

    from clawgym.synth.solutions import program_args

    src = "# args: A=<(.*?)> B=<(.*?)>\nimport sys, json\nprint(json.dumps(sys.argv[1:]))\n"
    a = "x'; touch pwned1; echo '$(touch pwned2) `touch pwned3`"
    b = 'say "hi" \\ $HOME; touch pwned4\n touch pwned5 && echo EOF'
    instruction = f"Do it with A=<{a}> B=<{b}> please."
    args = program_args("fam", src, instruction)
    assert args == [a, b]
    cmd = program_command(src, args)
    r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [a, b]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="NUL"):
        program_command(src, ["a\x00b"])


def test_an_instruction_without_the_arguments_is_one_clear_error():
    from clawgym.synth.solutions import program_args

    t = get_family("metric_trend_alerts").generate(0)
    bad = t.model_copy(update={"instruction": "Summarise the metrics, flag the big movers."})
    for call in (program_reference, with_program):
        with pytest.raises(ValueError, match=r"family 'metric_trend_alerts'.*regex .*pct_change.*"
                                             r"solutions/metric_trend_alerts\.py"):
            call(bad)
    with pytest.raises(ValueError, match="fam"):  # a group that matched nothing is no argument either
        program_args("fam", "# args: n=(\\d+)?;\nprint(1)\n", "n=;")


def test_programs_solve_new_seeds_in_a_sandbox(any_isolating_factory):
    seeds = [0, 1, 1000, 1001, 4242]
    res = check_programs(seeds=seeds, factory=any_isolating_factory, workers=2)
    bad = {f: {s: v for s, v in r.items() if v != 1.0} for f, r in res.items()}
    assert set(res) == set(program_families())
    assert not any(bad.values()), f"programs below 1.0: {bad}"


def test_a_program_run_on_another_family_scores_low(any_isolating_factory):
    """The scores come from the verifier, not from the teacher: the wrong program earns (almost) nothing."""
    from clawgym.agent.rollout import run_rollout

    t = get_family("budget_variance").generate(5)
    wrong = t.model_copy(update={"reference": program_reference(get_family("backup_retention").generate(0))})
    ro = run_rollout(wrong, "oracle", any_isolating_factory)
    assert ro.score is not None and ro.score < 0.5


def test_program_policy_in_the_registry_teaches_with_the_program(any_isolating_factory):
    """The built-in `program` policy (a trajectories partition like `oracle`): one exec of the family's program
    and a final answer; a family without a program gets the reference replayed."""
    import json

    from clawgym.agent.rollout import run_rollout
    from clawgym.synth.families import all_families

    t = with_program(get_family("backup_retention").generate(17))
    ro = run_rollout(t, "program", any_isolating_factory)
    calls = [c for m in ro.messages if m.get("role") == "assistant" for c in (m.get("tool_calls") or [])]
    assert ro.score == 1.0 and ro.policy == "program"
    assert [c["function"]["name"] for c in calls] == ["exec"]
    assert json.loads(calls[0]["function"]["arguments"])["command"] == program_reference(t)[0].arguments["command"]
    other = next(f for f in sorted(all_families(), key=lambda f: f.name) if f.name not in program_families())
    u = with_program(other.generate(0))
    assert u.program_reference is None
    ro2 = run_rollout(u, "program", any_isolating_factory)
    n_calls = sum(len(m.get("tool_calls") or []) for m in ro2.messages if m.get("role") == "assistant")
    assert ro2.score == 1.0 and n_calls == len(u.reference)


def test_the_teacher_replays_the_recorded_program_not_the_family_name(any_isolating_factory):
    """What the teacher runs is the task's data: a task whose recorded program is another family's gets that
    program (and the verifier scores it low); the same task without a recorded program replays its reference."""
    from clawgym.agent.rollout import run_rollout

    t = get_family("budget_variance").generate(5)
    other = with_program(get_family("backup_retention").generate(0)).program_reference
    ro = run_rollout(t.model_copy(update={"program_reference": other}), "program", any_isolating_factory)
    assert ro.score is not None and ro.score < 0.5
    ro2 = run_rollout(t.model_copy(update={"program_reference": None}), "program", any_isolating_factory)
    n_calls = sum(len(m.get("tool_calls") or []) for m in ro2.messages if m.get("role") == "assistant")
    assert ro2.score == 1.0 and n_calls == len(t.reference)


def test_synthesis_records_each_tasks_program():
    from clawgym.synth.pipeline import synthesize

    fams = ["backup_retention", "action_item_tracker", next(f.name for f in sorted(all_families(), key=lambda f: f.name)
                                                             if f.name not in program_families())]
    res = synthesize(6, families=fams, heldout_families=[fams[1]], bench_new_seeds=2, validate=False)
    by_id = {t.task_id: t for t in res.tasks}
    for t in res.tasks:
        src = program_source(t.family)
        assert (t.program_reference is None) == (src is None), t.task_id
        if src is not None:
            assert t.program_reference[0].arguments["command"] == program_command(src)
        assert t.reference  # the replay stays
    # the held-out family is bench throughout; new seeds (1000, 1001) of every family are bench; the rest train
    assert {t.task_id for t in res.tasks if t.split == "train"} == {
        f"{f}-{s:05d}" for f in (fams[0], fams[2]) for s in (0, 1)}
    assert by_id["backup_retention-01001"].split == "bench" and by_id["action_item_tracker-00000"].split == "bench"
    with pytest.raises(ValueError, match="heldout_families"):
        synthesize(3, families=fams, heldout_families=["no_such_family"], validate=False)
    with pytest.raises(ValueError, match="new_seed_start"):
        synthesize(3, families=fams, bench_new_seeds=1, new_seed_start=0, validate=False)


def test_program_reference_field_is_validated_and_round_trips(tmp_path):
    import pyarrow.parquet as pq

    from clawgym.agent.toolcore import TOOL_NAMES as AGENT_TOOLS
    from clawgym.tasks.harbor import import_harbor_task
    from clawgym.tasks.harbor_export import export_harbor_task
    from clawgym.tasks.model import TOOL_NAMES, Task, TaskError, ToolCall
    from clawgym.tasks.parquet_io import read_tasks_parquet, write_tasks_parquet

    assert TOOL_NAMES == AGENT_TOOLS
    t = with_program(get_family("backup_retention").generate(3))
    with pytest.raises(ValueError, match="program_reference"):
        Task.model_validate({**t.model_dump(), "program_reference": []})
    with pytest.raises(ValueError, match=r"program_reference\[0\].name"):
        Task.model_validate({**t.model_dump(), "program_reference": [{"name": "rm", "arguments": {}}]})
    # lake form (task_json), canonical Parquet, Harbor folder
    assert Task.from_json(t.to_json()) == t
    write_tasks_parquet([t, t.model_copy(update={"task_id": "x1", "program_reference": None})], tmp_path / "t.parquet")
    back = read_tasks_parquet(tmp_path / "t.parquet")
    assert back[0] == t and back[1].program_reference is None
    old = pq.read_table(tmp_path / "t.parquet").drop(["program_reference_json"])  # a file from before the field
    pq.write_table(old, tmp_path / "old.parquet")
    assert [x.program_reference for x in read_tasks_parquet(tmp_path / "old.parquet")] == [None, None]
    export_harbor_task(t, tmp_path / "h")
    assert (tmp_path / "h" / "solution" / "program.json").is_file()
    assert import_harbor_task(tmp_path / "h").program_reference == t.program_reference
    (tmp_path / "h" / "solution" / "program.json").write_text('[{"name": 3}]')
    with pytest.raises(TaskError, match=r"h/solution/program.json.*\[0\]"):
        import_harbor_task(tmp_path / "h")
    assert ToolCall(name="exec", arguments={}).name == "exec"


def test_the_checker_command_still_works(any_isolating_factory):
    """`python -m clawgym.synth.solutions FAMILY --seeds N` (the programs engineers' check) runs the checker."""
    import subprocess
    import sys

    backend = "bwrap" if "bwrap" in type(any_isolating_factory).__module__ else "docker"
    r = subprocess.run([sys.executable, "-m", "clawgym.synth.solutions", "backup_retention", "--seeds", "2",
                        "--start", "1000", "--backend", backend], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "backup_retention: 2/2 seeds score 1.0" in r.stdout

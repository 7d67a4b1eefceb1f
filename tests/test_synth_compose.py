"""Composed families (clawgym.synth.compose): tasks built from shared atomic operations, the held-out-composition
split, the per-task composed program, per-part credit, and the gates (oracle 1.0, no-op 0, no exploit above it)."""

from __future__ import annotations

import pytest

from clawgym.synth import compose
from clawgym.synth.families import get_family


def test_split_is_fixed_disjoint_and_every_operation_trains():
    train, held = compose.split_compositions()
    assert train and held and not set(train) & set(held)
    assert (train, held) == compose.split_compositions()  # a rule on names: the same every time
    assert 0.15 < len(held) / (len(train) + len(held)) < 0.35
    seen = {op for n in train for op in compose.parse(n).ops}
    assert seen == set(compose.OPS)
    # a held-out composition is new as a whole, made of operations that training shows
    for n in held:
        assert set(compose.parse(n).ops) <= seen
        assert compose.heldout_composition(n) and get_family(n).generate(0).source["split"] == "heldout_composition"
    assert get_family(train[0]).generate(0).source["split"] == "train_composition"


def test_names_round_trip_and_bad_names_say_which_part():
    for c in compose.all_compositions()[::37]:
        assert compose.parse(c.name) == c
    with pytest.raises(KeyError, match="'xml' is no read operation"):
        compose.parse("ops_xml_dedupe_gsum_tojson")
    with pytest.raises(KeyError, match="not a valid composition"):
        compose.parse("ops_csv_join_dedupe_gsum_tojson")  # transforms not in canonical order
    with pytest.raises(KeyError, match="not a valid composition"):
        compose.parse("ops_csv_dedupe_select_tojson")  # a records result no filter shaped
    with pytest.raises(KeyError, match="unknown task family"):
        get_family("no_such_family")


def test_a_task_is_deterministic_and_its_program_follows_seed_order_and_parameters():
    name = "ops_csv_feq_rename_gsum_tojson"
    a, b = get_family(name).generate(3), get_family(name).generate(3)
    assert a.model_dump() == b.model_dump()
    cmds = {get_family(name).generate(s).program_reference[0].arguments["command"] for s in range(12)}
    assert len(cmds) == 12  # one family, a different program per seed
    orders = set()
    for s in range(12):
        t = get_family(name).generate(s)
        steps = [ln for ln in t.instruction.splitlines() if ln[:1].isdigit()]
        assert len(steps) == 5 and steps[-1].split(". ", 1)[1].startswith("Write the result to output/")
        orders.add(tuple(x for x in t.source["composition"] if x in ("filter_eq", "rename")))
        # every parameter of a step is in the program: the field the filter names and its value
        feq = next(s_ for s_ in steps if "Keep only the records whose" in s_)
        field_, value = feq.split("whose ", 1)[1].rstrip(".").split(" is ")
        assert f'str(r["{field_}"]) == "{value}"' in t.program_reference[0].arguments["command"]
    assert orders == {("filter_eq", "rename"), ("rename", "filter_eq")}  # the seed orders the transforms


def _program(task) -> str:
    cmd = task.program_reference[0].arguments["command"]
    return cmd.split("\n", 1)[1].rsplit("\nEOF", 1)[0]


def _score(task, program: str | None, factory) -> tuple[float, dict]:
    from clawgym.agent.rollout import run_rollout
    from clawgym.synth.solutions import program_command
    from clawgym.tasks.model import ToolCall

    ref = [] if program is None else [ToolCall(name="exec", arguments={"command": program_command(program)})]
    ro = run_rollout(task.model_copy(update={"reference": ref}), "oracle", factory)
    return ro.score, ro.verification.subscores


@pytest.fixture(scope="module")
def factory():
    from clawgym.sandbox import get_factory

    f = get_factory("auto")
    yield f
    close = getattr(f, "close", None)
    if close:
        close()


def test_half_right_scores_between_zero_and_one_and_each_part_is_its_own(factory):
    task = get_family("ops_json_fmin_join_gsum_tocsv").generate(5)
    prog = _program(task)
    full, _ = _score(task, prog, factory)
    assert full == 1.0
    # the filter step left out: the right columns and groups, the wrong totals
    no_filter = "\n".join(ln for ln in prog.splitlines() if " >= " not in ln)
    s, parts = _score(task, no_filter, factory)
    assert 0.0 < s < 1.0, parts
    assert parts["values"] < 1.0 and parts["keys"] > 0.0
    # nothing written: 0
    assert _score(task, None, factory)[0] == 0.0


def test_records_result_credits_columns_ids_values_and_order(factory):
    task = get_family("ops_csv_fmin_rename_topk_tojson").generate(2)
    prog = _program(task)
    assert _score(task, prog, factory)[0] == 1.0
    # the top-k in ascending order: every record right, the order wrong (a support part)
    wrong_order = prog.replace("key=lambda r: -float(", "key=lambda r: float(")
    s, parts = _score(task, wrong_order, factory)
    assert parts["fields"] == 1.0 and parts["order"] == 0.0 and 0.0 < s < 1.0, parts


def test_every_composition_passes_the_gates_with_reference_and_program(factory):
    """Oracle 1.0 twice, no-op 0, scaffold 0, a mutation loses score, and no exploit (placeholder, echoed
    instruction, copied input, empty outputs) above the untouched score, for the reference and for the program."""
    from clawgym.synth.gates import validate_many
    from clawgym.synth.solutions import with_program_reference

    names = [c.name for c in compose.all_compositions()]
    tasks = [get_family(n).generate(s) for i, n in enumerate(names) for s in (i % 3,)]
    for label, ts in (("reference", tasks), ("program", [with_program_reference(t) for t in tasks])):
        vals = validate_many(ts, factory, workers=2, chunk=100)
        bad = [(v.task_id, v.reason) for v in vals if not v.passed]
        assert not bad, f"{label}: {len(bad)} of {len(vals)} fail the gates: {bad[:5]}"
        assert all(v.exploit_scores and max(v.exploit_scores.values()) == 0.0 for v in vals)


def test_synthesis_keeps_composed_families_apart_and_records_the_program():
    """The pipeline's dedupe treats composed families as one text family (their instructions share the numbered
    step template), with_program keeps the composed program, and the task survives the lake round trip."""
    from clawgym.synth.pipeline import synthesize
    from clawgym.tasks.parquet_io import table_to_tasks, tasks_to_table

    train, held = compose.split_compositions()
    fams = train[::4] + held[:2]  # enough that some instructions are within MiniLM's 0.9 of each other
    res = synthesize(len(fams), families=fams, heldout_families=held[:2], validate=False)
    assert sorted(t.family for t in res.tasks) == sorted(fams), [r.reason for r in res.rejected]
    for t in res.tasks:
        assert t.program_reference and t.program_reference[0].name == "exec"
        assert t.split == ("bench" if t.family in held[:2] else "train")
    for t, back in zip(res.tasks, table_to_tasks(tasks_to_table(res.tasks))):
        assert back.program_reference == t.program_reference and back.source["composition"]

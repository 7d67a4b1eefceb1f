"""Composed families (clawgym.synth.compose): tasks built from shared atomic operations, the held-out-composition
split, the per-task composed program, per-part credit, and the gates (oracle 1.0, no-op 0, no exploit above it)."""

from __future__ import annotations

import json

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
    with pytest.raises(KeyError, match="not a valid composition"):
        compose.parse("ops_csv_feq_rename_gsum_tojson")  # a rename a mapping result would not show
    with pytest.raises(KeyError, match="unknown task family"):
        get_family("no_such_family")


def test_a_task_is_deterministic_and_its_program_follows_seed_order_and_parameters():
    name = "ops_csv_feq_rename_select_tojson"
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
    assert 0.0 < parts["values"] < 1.0
    # nothing written: 0
    assert _score(task, None, factory)[0] == 0.0


def test_records_result_credits_columns_ids_values_and_order(factory):
    task = get_family("ops_csv_fmin_rename_topk_tojson").generate(2)
    prog = _program(task)
    assert _score(task, prog, factory)[0] == 1.0
    # the right top k, written lowest first: every record right, the order wrong (a support part)
    import re

    wrong_order = re.sub(r"^(rows = sorted\(.*\n)", r"\1rows = rows[::-1]\n", prog, count=1, flags=re.M)
    assert wrong_order != prog
    s, parts = _score(task, wrong_order, factory)
    assert parts["ids"] == 1.0 and parts["values"] == 1.0 and parts["order"] == 0.0 and 0.0 < s < 1.0, parts


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


# ---- what the instruction and the fixed vocabulary give away earns nothing -------------------------------------
def _host_score(task, outputs: dict[str, str], tmp_path) -> float:
    """The task's grade() on the host over its workspace plus `outputs` (the real grade code, no sandbox)."""
    import uuid

    ws = tmp_path / f"ws-{uuid.uuid4().hex}"
    for f in task.files:
        (ws / f.path).parent.mkdir(parents=True, exist_ok=True)
        (ws / f.path).write_bytes(f.content)
    for p, c in outputs.items():
        (ws / p).parent.mkdir(parents=True, exist_ok=True)
        (ws / p).write_text(c)
    ns: dict = {}
    exec(compile(task.verifier.code, "<grade>", "exec"), ns)  # noqa: S102 - our own generated grade code
    res = ns["grade"]([], str(ws))
    return sum(float(v) for v in res.values()) / len(res)


def _vocabulary(dom) -> list[str]:
    words = {v for vals in dom.cats.values() for v in vals} | set(dom.lookup[3])
    return sorted(words)


def _guesses(task) -> list[dict[str, str]]:
    """Answers made from the instruction and the domain vocabulary alone: every possible key with a constant
    value, the asked columns over junk rows or over every vocabulary word, the instruction echoed as data."""
    import re

    out = task.source["outputs"][0]
    text = task.instruction
    dom = next(d for d in compose.DOMAINS if f" {d.noun} " in text)
    vocab = _vocabulary(dom)
    cols = re.search(r"with the columns ([\w, ]+?)(?:, one row| sorted|\.)", text)
    fields = re.search(r"(?:with the fields|Keep only the fields) ([\w, ]+?)\.", text)
    guesses = []
    if fields or (cols and "one row per" not in text):
        names = [x.strip() for x in (fields or cols).group(1).split(",")]
        junk = [{n: (f"{dom.id_prefix}-{10000 + i}" if n == dom.id_field else w) for n in names}
                for i, w in enumerate(vocab)]
        rows = [junk[:1], junk]
        for rs in rows:
            if out.endswith(".json"):
                guesses.append({out: json.dumps(rs)})
            else:
                guesses.append({out: ",".join(names) + "\n" + "".join(",".join(r[n] for n in names) + "\n"
                                                                     for r in rs)})
    else:
        for c in (0, 1, 2, 3, 4):
            m = {w: c for w in vocab}
            if out.endswith(".json"):
                guesses.append({out: json.dumps(m)})
            else:
                head = cols.group(1).split(", ")
                guesses.append({out: ",".join(head) + "\n" + "".join(f"{w},{c}\n" for w in vocab)})
    return guesses


def test_the_instruction_and_the_vocabulary_alone_earn_nothing(tmp_path):
    names = [c.name for c in compose.all_compositions()][::7]
    hacked = []
    for n in names:
        for seed in (1, 2):
            t = get_family(n).generate(seed)
            for g in _guesses(t):
                s = _host_score(t, g, tmp_path)
                if s > 0:
                    hacked.append((t.task_id, round(s, 3), str(g)[:120]))
    assert not hacked, hacked[:5]


def _host_run_score(task, program: str, tmp_path) -> float:
    """Run `program` in a copy of the task's workspace on the host (our own generated program), then grade."""
    import subprocess
    import sys
    import uuid

    ws = tmp_path / f"run-{uuid.uuid4().hex}"  # a fresh copy each time: no output of an earlier run is left
    for f in task.files:
        (ws / f.path).parent.mkdir(parents=True, exist_ok=True)
        (ws / f.path).write_bytes(f.content)
    subprocess.run([sys.executable, "-c", program], cwd=ws, capture_output=True, timeout=60)
    ns: dict = {}
    exec(compile(task.verifier.code, "<grade>", "exec"), ns)  # noqa: S102 - our own generated grade code
    res = ns["grade"]([], str(ws))
    return sum(float(v) for v in res.values()) / len(res)


def test_every_step_shows_a_program_without_one_loses(tmp_path):
    """Leave one transform out of the teacher's program: the result is wrong somewhere, so it scores below 1 (a
    step whose absence nothing shows would be a step no check verifies: the generator redraws such seeds)."""
    import re

    cut = {"dedupe": r"^seen, kept = set\(\), \[\]\n(?:.*\n){4}rows = kept\n",
           "filter_eq": r"^rows = \[r for r in rows if str\(.*\n",
           "filter_min": r"^rows = \[r for r in rows if float\(.*\n",
           "rename": r"^for r in rows:\n    r\[\"\w+\"\] = r\.pop\(.*\n",
           "derive": r"^for r in rows:\n    r\[\"\w+\"\] = round\(float.*\n"}
    checked = 0
    for c in compose.all_compositions()[::5]:
        for op in c.transforms:
            if op not in cut:
                continue
            t = get_family(c.name).generate(checked % 4)
            prog = _program(t)
            assert _host_run_score(t, prog, tmp_path) == 1.0, t.task_id
            without = re.sub(cut[op], "", prog, count=1, flags=re.M)
            assert without != prog, (t.task_id, op)
            assert _host_run_score(t, without, tmp_path) < 1.0, (t.task_id, op)
            checked += 1
    assert checked > 50


def test_without_named_held_out_families_compositions_split_by_the_composer_rule():
    from clawgym.synth.pipeline import synthesize

    train, held = compose.split_compositions()
    fams = ["backup_retention", "glossary_rename", *train[:4], *held[:3]]
    res = synthesize(len(fams), families=fams, validate=False)
    split = {t.family: t.split for t in res.tasks}
    assert all(split[f] == "train" for f in train[:4]) and all(split[f] == "bench" for f in held[:3])


def _input_records(task) -> list[dict]:
    """The records of the task's main input file, parsed as any reader would (the attacker's cheap read)."""
    import csv
    import io

    import yaml

    f = next(f for f in task.files if f.path.startswith("input/") and f.path.rsplit("/", 1)[-1].split(".")[0]
             not in {d.lookup[0] for d in compose.DOMAINS})
    text = f.content.decode()
    ext = f.path.rsplit(".", 1)[-1]
    if ext == "csv":
        return list(csv.DictReader(io.StringIO(text)))
    if ext == "json":
        return json.loads(text)
    if ext == "jsonl":
        return [json.loads(x) for x in text.splitlines() if x.strip()]
    if ext == "yaml":
        return yaml.safe_load(text)
    return [dict(kv.split("=", 1) for kv in ln.split()[2:]) for ln in text.splitlines()
            if ln.split()[1:2] == ["record"]]


def _write(out: str, rows_or_map, head: list[str] | None = None) -> dict[str, str]:
    if out.endswith(".json"):
        return {out: json.dumps(rows_or_map)}
    if isinstance(rows_or_map, dict):
        return {out: ",".join(head) + "\n" + "".join(f"{k},{v}\n" for k, v in rows_or_map.items())}
    return {out: ",".join(head) + "\n" + "".join(",".join(str(r.get(h, "")) for h in head) + "\n"
                                                for r in rows_or_map)}


def test_shallow_answers_that_read_the_file_but_skip_the_steps_earn_nothing(tmp_path):
    """Counts split evenly over the vocabulary (the total taken from the file: its records, or its distinct ids),
    and every input id listed with the asked columns (blank, or the raw values): an answer that reads the file but
    does none of the filtering, grouping or joining scores 0."""
    import re

    hacked = []
    for c in compose.all_compositions()[::3]:
        t = get_family(c.name).generate(1)
        out, text = t.source["outputs"][0], t.instruction
        recs = _input_records(t)
        idf = next(d.id_field for d in compose.DOMAINS if d.id_field in recs[0])
        uniq = list({str(r[idf]): r for r in recs}.values())
        fields = re.search(r"(?:with the fields|Keep only the fields) ([\w, ]+?)\.", text)
        cols = re.search(r"with the columns ([\w, ]+?)(?:, one row| sorted|\.)", text)
        guesses = []
        if c.reduce in ("top_k", "select"):
            names = [x.strip() for x in (fields or cols).group(1).split(",")]
            guesses += [_write(out, [{n: (r[idf] if n == idf else "") for n in names} for r in uniq], names),
                        _write(out, [{n: r.get(n, "") for n in names} for r in uniq], names)]
        else:
            dom = next(d for d in compose.DOMAINS if d.id_field == idf)
            vocab = sorted({v for vals in dom.cats.values() for v in vals} | set(dom.lookup[3]))
            head = [x.strip() for x in cols.group(1).split(",")] if cols else None
            for total in (len(recs), len(uniq)):
                per = total // len(vocab)
                guesses.append(_write(out, {w: per for w in vocab}, head))
                group = re.search(r"per (\w+)\.", text).group(1)
                keys = sorted({str(r[group]) for r in uniq if group in r}) or vocab
                guesses.append(_write(out, {k: round(total / len(keys)) for k in keys}, head))
        for g in guesses:
            s = _host_score(t, g, tmp_path)
            if s > 0:
                hacked.append((t.task_id, round(s, 3)))
    assert not hacked, hacked[:8]


def test_a_skipped_join_or_derive_loses_its_own_part_and_unrounded_products_are_wrong(tmp_path):
    import re

    for name in ("ops_csv_join_topk_tojson", "ops_json_derive_feq_select_tocsv"):
        t = get_family(name).generate(0)
        prog = _program(t)
        assert _host_run_score(t, prog, tmp_path) == 1.0
        ns: dict = {}
        exec(compile(t.verifier.code, "<grade>", "exec"), ns)  # noqa: S102 - our own generated grade code
        field_parts = [k for k in ns["grade"]([], "/nonexistent") if k.startswith("field_")]
        assert field_parts, name  # the joined / derived column is a part of its own
        # the step's column written blank: its part and the records' values are lost
        blank = re.sub(r"^(\s+r\[\"(\w+)\"\] = ).*$", r'\1""', prog, count=1, flags=re.M)
        assert blank != prog
        assert _host_run_score(t, blank, tmp_path) <= 1.0 - 2 / (len(field_parts) + 4)
    t = get_family("ops_json_derive_feq_select_tocsv").generate(0)
    unrounded = re.sub(r"round\((float\(r\[.*?\]\) \* float\(r\[.*?\]\)), 2\)", r"\1", _program(t), count=1)
    assert unrounded != _program(t) and _host_run_score(t, unrounded, tmp_path) < 1.0


def test_a_mapping_csv_in_another_order_than_asked_loses_the_order_part(tmp_path):
    t = get_family("ops_csv_feq_gsum_tocsv").generate(0)
    prog = _program(t)
    assert _host_run_score(t, prog, tmp_path) == 1.0
    reverse = prog.replace("for k in sorted(out):", "for k in sorted(out, reverse=True):")
    assert reverse != prog and 0.0 < _host_run_score(t, reverse, tmp_path) < 1.0

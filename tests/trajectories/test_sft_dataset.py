"""sft_dataset: cleaning, contamination, stats, GX gate, exports and assistant-only masking on real
oracle trajectories (the agent's builtin loop with the oracle policy in a local sandbox)."""

from __future__ import annotations

import copy
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from clawgym.trajectories.sft import (  # noqa: E402
    SFTCleanConfig,
    build_sft_dataset,
    check_sft_rows,
    contaminated_tasks,
    save_hf_dataset,
    write_sft_parquet,
)


@pytest.fixture(scope="module")
def tok():
    from clawgym.train.base_model import load_base_tokenizer

    return load_base_tokenizer()


@pytest.fixture(scope="module")
def world():
    """Three procedural training tasks with real oracle rollouts; bench = one of them verbatim plus a
    reworded copy of another (same family)."""
    from clawgym.agent.rollout import run_rollout
    from clawgym.sandbox import get_factory
    from clawgym.synth.families import generate_procedural

    tasks = generate_procedural(3, seed=1)
    a, b, c = tasks
    bench_same = b.model_copy(update={"split": "bench", "suite": "bench"})
    reworded = c.instruction.replace("Write ", "Please write ", 1).rstrip(".") + ", thanks."
    assert reworded != c.instruction
    bench_near = c.model_copy(update={"task_id": c.task_id + "-bench", "split": "bench", "suite": "bench",
                                      "instruction": reworded})
    factory = get_factory("local")
    rows = {}
    for t in tasks:
        ro = run_rollout(t, "oracle", factory)
        assert ro.failure_class == "ok" and ro.score == 1.0, (t.task_id, ro.error)
        rows[t.task_id] = ro.to_row()
    return {"tasks": tasks, "bench": [bench_same, bench_near], "rows": rows, "a": a, "b": b, "c": c}


def _with_noise(row: dict) -> dict:
    msgs = json.loads(row["messages_json"])
    i = next(k for k, m in enumerate(msgs) if m["role"] == "user") + 1
    noise = [
        {"role": "user", "content": "Read HEARTBEAT.md if it exists (workspace context). "
                                    "If nothing needs attention, reply HEARTBEAT_OK."},
        {"role": "assistant", "content": "HEARTBEAT_OK"},
        {"role": "user", "content": "[cron:daily-digest] Post the daily digest to #general."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "cx", "type": "function",
             "function": {"name": "exec", "arguments": "{\"command\": \"echo digest\"}"}}]},
        {"role": "tool", "tool_call_id": "cx", "content": "digest"},
        {"role": "assistant", "content": "Digest posted."},
        {"role": "user", "content": "<internal-context>memory flush: summarise the session so far</internal-context>"},
        {"role": "assistant", "content": "Summary: working on notes."},
    ]
    out = dict(row)
    out["messages_json"] = json.dumps(msgs[:i] + noise + msgs[i:])
    return out


def test_cleaning_filters_and_contamination(world, tok):
    a, b, c = world["a"], world["b"], world["c"]
    ra = world["rows"][a.task_id]
    noisy = _with_noise(ra)
    failed = {**ra, "rollout_id": "f1", "failure_class": "agent_error", "score": 0.0}
    limit = {**ra, "rollout_id": "f2", "failure_class": "limit", "score": 1.0}
    low = {**ra, "rollout_id": "low", "score": 0.75}
    dup = {**noisy, "rollout_id": "dup"}
    rows = [noisy, failed, limit, low, dup, world["rows"][b.task_id], world["rows"][c.task_id]]
    res = build_sft_dataset(rows, world["tasks"], world["bench"], SFTCleanConfig(max_tokens=16384), tokenizer=tok)

    reasons = {(r["rollout_id"], r["reason"]) for r in res.rejected}
    assert ("f1", "failed") in reasons and ("f2", "failed") in reasons
    assert ("low", "low_score") in reasons
    assert ("dup", "duplicate") in reasons
    contaminated = {r["task_id"]: r["detail"] for r in res.rejected if r["reason"] == "contaminated"}
    assert set(contaminated) == {b.task_id, c.task_id}
    assert "near-duplicate" in contaminated[c.task_id] and "cosine" in contaminated[c.task_id]

    assert len(res.rows) == 1
    row = res.rows[0]
    assert row["task_id"] == a.task_id
    texts = [m["content"] for m in row["messages"]]
    assert not any("HEARTBEAT" in t or "cron:" in t or "internal-context" in t or "Digest posted" in t
                   or "Summary: working" in t for t in texts)
    assert not any(tc["function"]["arguments"].get("command") == "echo digest"
                   for m in row["messages"] for tc in m.get("tool_calls") or [])
    # the cleaned conversation is exactly the original oracle one (in HF form)
    orig = json.loads(ra["messages_json"])
    assert [m["role"] for m in row["messages"]] == [m["role"] for m in orig]
    assert all(isinstance(tc["function"]["arguments"], dict)
               for m in row["messages"] for tc in m.get("tool_calls") or [])
    assert {t["function"]["name"] for t in row["tools"]} >= {"read", "write", "exec"}
    st = res.stats
    assert st["rows"] == 1 and st["n_input"] == 7
    assert st["dropped_turns"]["heartbeat"] == 2 and st["dropped_turns"]["cron"] == 2
    assert st["dropped_turns"]["internal"] == 2
    assert st["tool_calls_total"] == row["n_tool_calls"] > 0
    assert st["tokens_total"] == row["n_tokens"] > 100
    assert set(st["tool_types"]) == set(row["tool_types"])
    assert st["rejected"] == {"failed": 2, "low_score": 1, "duplicate": 1, "contaminated": 2}


def test_min_score_length_cap_and_scope(world, tok):
    a = world["a"]
    ra = world["rows"][a.task_id]
    half = {**ra, "rollout_id": "half", "score": 0.5}
    res = build_sft_dataset([half], world["tasks"], [], SFTCleanConfig(min_score=0.5), tokenizer=tok)
    assert len(res.rows) == 1
    n = res.rows[0]["n_tokens"]
    res2 = build_sft_dataset([ra], world["tasks"], [], SFTCleanConfig(max_tokens=n - 1), tokenizer=tok)
    assert not res2.rows and res2.rejected[0]["reason"] == "too_long"
    # a reworded bench task of ANOTHER family is not contamination under the default (family) scope
    other = world["c"].model_copy(update={"task_id": "x-bench", "family": "some_other_family", "split": "bench",
                                          "instruction": world["c"].instruction + " Thanks."})
    assert contaminated_tasks([world["c"]], [other]) == {}
    assert world["c"].task_id in contaminated_tasks([world["c"]], [other], scope="all")


def test_a_rollout_whose_proxy_record_diverged_is_not_training_data(world, tok):
    # the recording proxy lists what a client sent that it never answered (forged turns, fake / ambiguous /
    # duplicate results, rewritten history): the rebuild fails closed on each, and the row is not trained on
    ra = world["rows"][world["a"].task_id]
    div = {**ra, "rollout_id": "div", "meta_json": json.dumps({"divergence": [
        {"seq": 2, "kind": "ambiguous_tool_result", "detail": "x"}, {"seq": 3, "kind": "forged_assistant"},
        {"seq": 3, "kind": "forged_assistant"}], "side_requests": 0})}
    clean = {**ra, "meta_json": json.dumps({"divergence": [], "side_requests": 1})}
    res = build_sft_dataset([div, clean], world["tasks"], [], SFTCleanConfig(), tokenizer=tok)
    assert [r["rollout_id"] for r in res.rows] == [ra["rollout_id"]]
    assert [(x["rollout_id"], x["reason"], x["detail"]) for x in res.rejected] == [
        ("div", "proxy_divergence", "ambiguous_tool_result x1, forged_assistant x2")]


def test_gx_gate_and_exports(world, tok, tmp_path):
    ra = world["rows"][world["a"].task_id]
    res = build_sft_dataset([ra], world["tasks"], [], SFTCleanConfig(), tokenizer=tok)
    ok, details = check_sft_rows(res.rows, max_tokens=8192)
    assert ok, details
    bad = copy.deepcopy(res.rows[0])
    bad["sample_id"] = "bad"
    bad["messages"][-1]["content"] = "  "
    bad["messages"][-1].pop("tool_calls", None)
    bad["tools"] = []
    ok2, d2 = check_sft_rows(res.rows + [bad], max_tokens=8192)
    assert not ok2
    failed = {e["column"] for e in d2["expectations"] if not e["success"]}
    assert failed == {"min_assistant_chars", "n_tools"}
    ok3, d3 = check_sft_rows(res.rows, max_tokens=res.rows[0]["n_tokens"] - 1)
    assert not ok3

    # Parquet in the lake + a folder datasets.load_from_disk reads
    import datasets
    import pyarrow.parquet as pq

    p = write_sft_parquet(res.rows, root=tmp_path / "lake")
    t = pq.read_table(p).to_pylist()
    assert t[0]["sample_id"] == res.rows[0]["sample_id"]
    assert json.loads(t[0]["messages_json"]) == res.rows[0]["messages"]
    assert check_sft_rows(t, max_tokens=8192)[0]  # the gate also runs on the lake's rows
    d = save_hf_dataset(res.rows, tmp_path / "hf", stats=res.stats)
    ds = datasets.load_from_disk(str(d))
    assert ds[0]["messages"] == res.rows[0]["messages"] and ds[0]["tools"] == res.rows[0]["tools"]
    assert json.loads((d / "clawgym_stats.json").read_text())["rows"] == 1


def test_assistant_only_masking_on_real_trajectory(world, tok, tmp_path):
    """Through TRL's own SFT preprocessing + collator: assistant tokens carry labels; system, user and
    tool tokens are masked (-100)."""
    from trl import SFTConfig, SFTTrainer

    from clawgym.train.base_model import make_tiny_model
    from clawgym.trajectories.sft import to_hf_dataset

    ra = world["rows"][world["a"].task_id]
    res = build_sft_dataset([ra], world["tasks"], [], SFTCleanConfig(), tokenizer=tok)
    row = res.rows[0]
    model_dir = make_tiny_model(tmp_path / "tiny")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    mtok = AutoTokenizer.from_pretrained(str(model_dir))
    args = SFTConfig(output_dir=str(tmp_path / "o"), assistant_only_loss=True, max_length=16384, report_to=[],
                     use_cpu=True, disable_tqdm=True, max_steps=1)
    tr = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(str(model_dir)), args=args,
                    train_dataset=to_hf_dataset([row]).select_columns(["messages", "tools"]), processing_class=mtok)
    ex = tr.train_dataset[0]
    batch = tr.data_collator([ex])
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()
    assert len(ids) == row["n_tokens"]
    trained = mtok.decode([i for i, l in zip(ids, labels) if l != -100])
    masked = mtok.decode([i for i, l in zip(ids, labels) if l == -100])

    msgs = row["messages"]
    for m in msgs:
        if m["role"] == "assistant":
            for tc in m.get("tool_calls") or []:
                assert f'"name": "{tc["function"]["name"]}"' in trained
            if m["content"]:
                assert m["content"] in trained
        elif m["content"].strip():  # system, user and tool text never trained
            snippet = m["content"].strip()[:60]
            assert snippet not in trained, (m["role"], snippet)
            assert snippet in masked
    assert "<tools>" in masked and "<tools>" not in trained
    assert trained.count("<|im_end|>") == sum(1 for m in msgs if m["role"] == "assistant")  # learns to stop
    assert "<|im_start|>user" not in trained and "<tool_response>" not in trained

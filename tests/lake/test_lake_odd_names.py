"""Lake writes never lose a batch to odd names or content: non-UTF-8 file names (lone surrogates from
surrogateescape), NUL, lone surrogates, emoji, the escape character itself and very long strings are stored
escaped (clawgym.lake.codec), read back through DuckDB, and decoded to exactly what was written."""

import json
import os

import pytest

from clawgym import lake
from clawgym.lake import codec

ODD_NAME = os.fsdecode(b"caf\xe9-\xff\xfe.txt")  # 'caf\udce9-\udcff\udcfe.txt'
ODD = [ODD_NAME, "nul\x00byte", "lone \ud800 high", "lone \udfff low", "emoji 😀🦀", "esc \u241b sign",
       "looks escaped \u241bDCFF", "backslash \\udcff text", "pair as units \ud83d\ude00", "", "plain"]
LONG = ("x" * 1_000_003) + "\udcff" + ("é" * 500_000)


@pytest.fixture()
def root(tmp_path, monkeypatch):
    # the library's default data root (it never reads $CLAWGYM_DATA: entry points and resources pass it)
    monkeypatch.setattr(lake.io, "DEFAULT_DATA_DIR", tmp_path / "data")
    return tmp_path / "data"


def test_codec_round_trips_every_string():
    for s in ODD + [LONG]:
        enc = codec.encode_text(s)
        enc.encode("utf-8")  # storable
        assert codec.decode_text(enc) == s
    assert codec.encode_text("\udcff.txt") == "\u241bDCFF.txt"
    assert codec.text_bytes(codec.decode_text(codec.encode_text(ODD_NAME))) == b"caf\xe9-\xff\xfe.txt"
    obj = {"k\udcff": ODD, "b": [1, None, 2.5]}
    stored = codec.dumps(obj)
    stored.encode("utf-8")
    assert codec.loads(stored) == obj
    # JSON made elsewhere with ASCII escapes of lone surrogates is normalised (DuckDB rejects those escapes)
    ascii_json = json.dumps({"p": ODD_NAME, "e": "\u241b"})
    assert "\\udce9" in ascii_json
    enc = codec.encode_json_text(ascii_json)
    assert "\\udc" not in enc and codec.loads(enc) == {"p": ODD_NAME, "e": "\u241b"}
    # raw (non-JSON) text in a *_json column is kept exactly too
    raw = '{"command": "cat \udcff'
    assert codec.decode_text(codec.encode_json_text(raw)) == raw
    assert (codec.dumps({"bytes": b"\xff\x00a"})
            and codec.text_bytes(codec.loads(codec.dumps(b"\xff\x00a"))) == b"\xff\x00a")


def _odd_rollout():
    from clawgym.agent.rollout import Rollout

    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "rename " + ODD_NAME},
            {"role": "assistant", "content": "ok \x00 " + ODD[2], "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "exec", "arguments": json.dumps(
                    {"command": f"ls {ODD_NAME}"}, ensure_ascii=False)}},
                {"id": "c2", "type": "function", "function": {"name": "write", "arguments": '{"path": "\udcff'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "\n".join(ODD)},
            {"role": "tool", "tool_call_id": "c2", "content": LONG},
            {"role": "assistant", "content": "done 😀"}]
    return Rollout(task_id="odd-task", policy="oracle", messages=msgs, score=1.0, failure_class="ok",
                   error="trace: " + ODD_NAME + " \x00",
                   workspace_diff=[{"path": p, "change": "added", "size": 1} for p in ODD],
                   verification={"task_id": "odd-task", "score": 1.0, "details": {ODD_NAME: ODD, "long": LONG}})


def test_odd_rollout_written_read_through_duckdb_and_decoded(root):
    ro = _odd_rollout()
    part = {"policy": "oracle", "shard": 0}
    row = ro.to_row(shard=0, run_id="r")
    lake.append_rows("trajectories", [row], part)  # used to raise UnicodeEncodeError and lose the batch
    lake.append_rows("trajectories", [{**row, "rollout_id": "again"}], part)  # a rerun writes too
    lake.append_rows("steps", ro.steps(shard=0), part)

    db = lake.refresh_catalog(root / "c.duckdb")
    cols, rows = lake.query("SELECT rollout_id, task_id, error, messages_json, diff_json, verification_json "
                            "FROM trajectories ORDER BY rollout_id = 'again'", db)
    assert len(rows) == 2
    got = dict(zip(cols, rows[0]))
    assert got["rollout_id"] == ro.rollout_id and "\u241bDCFF" in got["diff_json"]
    assert codec.decode_text(got["error"]) == ro.error
    assert codec.loads(got["messages_json"]) == ro.messages
    assert codec.loads(got["diff_json"]) == ro.workspace_diff
    # the record as written (a key that is no VerificationResult field, here "details", kept flat as it was)
    assert codec.loads(got["verification_json"]) == ro.verification.to_dict()
    assert codec.loads(got["verification_json"])["details"] == {ODD_NAME: ODD, "long": LONG}
    paths = [d["path"] for d in codec.loads(got["diff_json"])]
    assert codec.text_bytes(paths[0]) == b"caf\xe9-\xff\xfe.txt"  # the original bytes of the file name

    # DuckDB's JSON functions work on every row (no lone-surrogate escapes in the stored JSON)
    _, rows = lake.query("SELECT json_extract_string(diff_json, '$[0].path'), "
                         "json_array_length(messages_json) FROM trajectories", db)
    assert rows[0] == (codec.encode_text(ODD_NAME), len(ro.messages))
    _, rows = lake.query("SELECT count(*) FROM trajectories WHERE diff_json LIKE '%\u241bDCFF%'", db)
    assert rows == [(2,)]

    # steps: contents, raw tool arguments (not even JSON) and the long result survive
    _, srows = lake.query("SELECT step, content, tool_args_json, tool_result FROM steps ORDER BY step", db)
    want = ro.steps(shard=0)
    assert [codec.decode_text(r[1]) for r in srows] == [s["content"] for s in want]
    assert [codec.decode_text(r[2]) for r in srows] == [s["tool_args_json"] for s in want]
    assert [codec.decode_text(r[3]) for r in srows] == [s["tool_result"] for s in want]
    assert codec.decode_text(srows[1][3]) == LONG

    # the Python reader decodes too, and rewriting decoded rows does not double-encode
    back = [r for r in lake.read_rows("trajectories", part) if r["rollout_id"] == ro.rollout_id][0]
    assert back["error"] == ro.error and json.loads(back["messages_json"]) == ro.messages
    lake.write_table("trajectories", [back], {"policy": "oracle", "shard": 1})
    again = lake.read_rows("trajectories", {"policy": "oracle", "shard": 1})[0]
    assert again["error"] == ro.error and json.loads(again["diff_json"]) == ro.workspace_diff


def test_steps_asset_and_bench_results_with_odd_content(root):
    from clawgym.bench.runner import result_row

    ro = _odd_rollout()
    lake.write_table("bench_results", [result_row(ro, model="m", suite="s", repeat=0)], {"model": "m", "suite": "s"})
    r = lake.read_rows("bench_results")[0]
    assert json.loads(r["messages_json"]) == ro.messages
    assert json.loads(r["verification_json"]) == ro.verification.to_dict()
    lake.write_table("tasks", [{"task_id": ODD_NAME, "skill_ids": ODD, "instruction": "\x00"}], {"source": "imported"})
    t = lake.read_rows("tasks")[0]
    assert t["task_id"] == ODD_NAME and t["skill_ids"] == ODD and t["instruction"] == "\x00"

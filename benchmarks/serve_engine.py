"""The serving engine's numbers, interleaved in one run: per arm (engine mode × serving dtype) the time from starting
the server to the first streamed token, greedy decode tokens/s at 1 and at N concurrent streams, an agent-shaped
workload (8 conversations × 4 turns with the agent's tool schemas, the context growing as an agent's does) and the
server's resident memory, rounds alternating the arms' order (ABBA) so the shared box's noise hits every arm.

    python benchmarks/serve_engine.py [--engines vllm,vllm-eager] [--model data/models/smollm2-135m-instruct]
        [--streams 16] [--max-tokens 64] [--rounds 2] [--dtypes float32,bfloat16] [--no-check]
        [--agent-conversations 8] [--agent-turns 4]

Engines: `vllm` is the embedded engine as shipped (`clawgym.serve.ModelServer`: vLLM in data/vllm-venv, its
compiled graph cached under data/vllm-cache: the first start of a model is cold, later ones warm); `vllm-eager`
the same with --enforce-eager (no graph compilation).

On each arm's first round a cheap correctness check runs: a `response_format` json_schema answer parses and has the
schema's keys, and a streamed greedy request with `return_token_ids` carries prompt and completion ids equal to the
non-streamed ones.

Prints one JSON line per (round, arm) and summary lines: medians, bf16 / fp32 per engine, N streams / 1 stream,
start-up per engine, the checks, and the load average before and after. On a CPU without native bfloat16 (no
AVX512-BF16 / AMX in /proc/cpuinfo) bf16 is emulated and the ratio says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PERSON_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                 "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"}}}
ENGINES = ("vllm", "vllm-eager")


def _post(srv, body: dict) -> dict:
    import httpx

    r = httpx.post(srv.base_url + "/chat/completions", json={"model": srv.model_name, **body}, timeout=600,
                   headers={"Authorization": f"Bearer {srv.token}"})
    r.raise_for_status()
    return r.json()


def _sse_chunks(srv, body: dict, on_chunk=None) -> list[dict]:
    """The parsed `data:` chunks of a streamed chat completion (`on_chunk(chunk)` called as each arrives)."""
    import httpx

    out = []
    with httpx.stream("POST", srv.base_url + "/chat/completions", json={"model": srv.model_name, **body},
                      timeout=1200, headers={"Authorization": f"Bearer {srv.token}"}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                c = json.loads(line[len("data: "):])
                if on_chunk:
                    on_chunk(c)
                out.append(c)
    return out


def _has_text(chunk: dict) -> bool:
    return any((ch.get("delta") or {}).get("content") for ch in chunk.get("choices") or [])


def _stream_one(srv, i: int, max_tokens: int, t_start: float | None = None) -> tuple[int, float | None]:
    """One greedy streamed story: (completion tokens, seconds from `t_start` to the first non-empty text chunk)."""
    body = {"temperature": 0, "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Write a long story about the number {i}."}]}
    first: list[float] = []

    def mark(c: dict) -> None:
        if not first and t_start is not None and _has_text(c):
            first.append(time.time() - t_start)

    chunks = _sse_chunks(srv, body, mark)
    usage = [c["usage"] for c in chunks if c.get("usage")]
    n = usage[-1]["completion_tokens"] if usage else sum(_has_text(c) for c in chunks)
    return n, (first[0] if first else None)


def stream_ids(chunks: list[dict]) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) carried by a stream with `return_token_ids` (vLLM's layout: `prompt_token_ids`
    on a chunk or its choice, `token_ids` per choice chunk)."""
    prompt: list[int] = []
    out: list[int] = []
    for c in chunks:
        prompt = prompt or list(c.get("prompt_token_ids") or [])
        for ch in c.get("choices") or []:
            prompt = prompt or list(ch.get("prompt_token_ids") or [])
            out += list(ch.get("token_ids") or [])
    return prompt, out


def check_correctness(srv) -> dict:
    """Cheap protocol checks: a json_schema answer parses with the schema's keys; a streamed greedy answer with
    `return_token_ids` carries ids, equal to the non-streamed answer's."""
    res: dict = {}
    try:
        r = _post(srv, {"temperature": 0, "max_tokens": 48,
                        "messages": [{"role": "user", "content": "Invent a person. Answer with their name and age."}],
                        "response_format": {"type": "json_schema",
                                            "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}})
        text = r["choices"][0]["message"]["content"]
        obj = json.loads(text)
        res["json_schema_parses"] = isinstance(obj, dict) and isinstance(obj.get("name"), str) \
            and isinstance(obj.get("age"), int)
        res["json_schema_answer"] = text
    except Exception as e:  # noqa: BLE001 - reported, not raised: the check is a measured outcome
        res["json_schema_parses"] = False
        res["json_schema_error"] = f"{type(e).__name__}: {e}"[:300]
    try:
        body = {"temperature": 0, "max_tokens": 16, "return_token_ids": True,
                "messages": [{"role": "user", "content": "Count from one to ten."}]}
        prompt, ids = stream_ids(_sse_chunks(srv, {**body, "stream": True}))
        r = _post(srv, body)
        res.update(stream_prompt_ids=len(prompt), stream_token_ids=len(ids),
                   stream_ids_equal_non_stream=bool(ids) and ids == list(r["choices"][0].get("token_ids") or []),
                   prompt_ids_equal_non_stream=bool(prompt) and prompt == list(r.get("prompt_token_ids") or []))
    except Exception as e:  # noqa: BLE001
        res["stream_token_ids"] = 0
        res["stream_ids_error"] = f"{type(e).__name__}: {e}"[:300]
    return res


AGENT_TASK = ("You work in a folder of files. Read notes.txt, then write summary.txt with its three main points, "
              "then list the folder to check. Use the tools.")
AGENT_RESULT = "notes.txt:\n" + "\n".join(f"- point {k}: the quarterly figure for region {k} rose by {k * 7} percent"
                                           for k in range(1, 9))


def agent_conversation(srv, i: int, turns: int = 4, max_tokens: int = 128) -> int:
    """One agent-shaped conversation: the agent's tool schemas, a task, then `turns` greedy requests, each reply
    answered by a tool result (or a user nudge when the model wrote text), the context growing as an agent's
    does. Returns the completion tokens."""
    from clawgym.agent.tools import TOOL_SCHEMAS

    msgs = [{"role": "system", "content": f"You are agent {i}. Work step by step."},
            {"role": "user", "content": AGENT_TASK}]
    n = 0
    for t in range(turns):
        r = _post(srv, {"temperature": 0, "max_tokens": max_tokens, "messages": msgs, "tools": TOOL_SCHEMAS})
        n += int((r.get("usage") or {}).get("completion_tokens") or 0)
        m = r["choices"][0]["message"]
        calls = m.get("tool_calls") or []
        msgs.append({"role": "assistant", "content": m.get("content") or "",
                     **({"tool_calls": calls} if calls else {})})
        if calls:
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": AGENT_RESULT})
        else:
            msgs.append({"role": "user", "content": f"Turn {t}: go on, use a tool."})
    return n


def agent_workload(srv, conversations: int = 8, turns: int = 4) -> dict:
    """`conversations` agent conversations at once, `turns` each: the wall time and completion tokens."""
    t = time.time()
    with ThreadPoolExecutor(conversations) as ex:
        toks = sum(ex.map(lambda i: agent_conversation(srv, i, turns), range(conversations)))
    return {"agent_wall_s": round(time.time() - t, 1), "agent_tokens": toks}


def group_rss_mb(pid: int | None) -> float | None:
    """The resident memory of the server: its process and every descendant (vLLM's engine core and worker)."""
    if not pid:
        return None
    kids: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            st = (d / "stat").read_text().rsplit(")", 1)[1].split()
            kids.setdefault(int(st[1]), []).append(int(d.name))
            rss[int(d.name)] = int(st[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    todo, total = [pid], 0
    while todo:
        q = todo.pop()
        total += rss.get(q, 0)
        todo += kids.get(q, [])
    return round(total / 2**20, 1)


def start_server(engine: str, model: str, dtype: str):
    from clawgym.serve import ModelServer

    return ModelServer(model, device="cpu", dtype=dtype, startup_timeout_s=900, compile=engine == "vllm")


def measure(engine: str, model: str, dtype: str, streams: int, max_tokens: int, check: bool = False,
            agent_conversations: int = 8, agent_turns: int = 4) -> dict:
    t0 = time.time()
    with start_server(engine, model, dtype) as srv:
        healthy = time.time() - t0
        _, first = _stream_one(srv, 0, 4, t_start=t0)  # start -> first token (includes lazy init / warm-up)
        out = {"engine": engine, "dtype": dtype, "start_to_healthy_s": round(healthy, 1),
               "start_to_first_token_s": round(first, 1) if first is not None else None}
        out.update(agent_workload(srv, agent_conversations, agent_turns) if agent_conversations else {})
        out["rss_mb"] = group_rss_mb(srv.pid)
        for n in (1, streams):
            t = time.time()
            with ThreadPoolExecutor(n) as ex:
                toks = sum(k for k, _ in ex.map(lambda i: _stream_one(srv, i, max_tokens), range(n)))
            out[f"tok_s_{n}"] = round(toks / (time.time() - t), 2)
            out[f"tokens_{n}"] = toks
        if check:
            out["check"] = check_correctness(srv)
    return out


def arm_order(arms: list[tuple[str, str]], r: int) -> list[tuple[str, str]]:
    """ABBA: even rounds in order, odd rounds reversed."""
    return list(arms) if r % 2 == 0 else list(arms)[::-1]


def summarize(runs: dict[tuple[str, str], list[dict]], streams: int) -> list[dict]:
    """The summary lines: medians per arm, bf16/fp32 per engine, ours/vllm per dtype, start-up per engine."""
    keys = ("start_to_healthy_s", "start_to_first_token_s", "tok_s_1", f"tok_s_{streams}", "agent_wall_s", "rss_mb")
    med = {a: {k: statistics.median(v) if (v := [m[k] for m in ms if m.get(k) is not None]) else None
               for k in keys} for a, ms in runs.items() if ms}

    def ratio(a, b, k):
        x, y = med.get(a, {}).get(k), med.get(b, {}).get(k)
        return round(x / y, 2) if x and y else None

    tok_keys = ("tok_s_1", f"tok_s_{streams}", "agent_wall_s")
    lines = [{"summary": "median", "arm": f"{e}/{d}", **v} for (e, d), v in med.items()]
    engines = sorted({e for e, _ in med}, key=list(ENGINES).index)
    for e in engines:
        if (e, "float32") in med and (e, "bfloat16") in med:
            lines.append({"summary": "bf16_over_fp32", "engine": e,
                          **{k: ratio((e, "bfloat16"), (e, "float32"), k) for k in tok_keys}})
    for (e, d), v in med.items():
        if v.get("tok_s_1") and v.get(f"tok_s_{streams}"):
            lines.append({"summary": f"{streams}_streams_over_1", "arm": f"{e}/{d}",
                          "ratio": round(v[f"tok_s_{streams}"] / v["tok_s_1"], 2)})
    for e in engines:
        lines.append({"summary": "startup", "engine": e,
                      **{f"{d}_{k}": med[(e2, d)][k] for (e2, d) in med if e2 == e
                         for k in ("start_to_healthy_s", "start_to_first_token_s")},
                      "per_round_start_to_first_token_s": {f"{e2}/{d}": [m["start_to_first_token_s"] for m in ms]
                                                           for (e2, d), ms in runs.items() if e2 == e}})
    for (e, d), ms in runs.items():
        for m in ms:
            if "check" in m:
                lines.append({"summary": "check", "arm": f"{e}/{d}", **m["check"]})
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--engines", default="vllm", help="comma list of " + ", ".join(ENGINES))
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--agent-conversations", type=int, default=8, help="agent-shaped workload: conversations at once")
    ap.add_argument("--agent-turns", type=int, default=4, help="agent-shaped workload: turns per conversation")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    a = ap.parse_args()
    engines = [e for e in a.engines.split(",") if e]
    bad = [e for e in engines if e not in ENGINES]
    if bad:
        ap.error(f"unknown engine(s) {bad}: use {', '.join(ENGINES)}")
    if a.model == "data/models/smollm2-135m-instruct":
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(a.model)
    from clawgym.serve.launcher import cpu_has_bf16

    load_before = os.getloadavg()
    arms = [(e, d) for e in engines for d in a.dtypes.split(",") if d]
    runs: dict[tuple[str, str], list[dict]] = {arm: [] for arm in arms}
    for r in range(a.rounds):
        for e, d in arm_order(arms, r):
            m = measure(e, a.model, d, a.streams, a.max_tokens, check=(r == 0 and not a.no_check),
                        agent_conversations=a.agent_conversations, agent_turns=a.agent_turns)
            runs[(e, d)].append(m)
            print(json.dumps({"round": r, **m}), flush=True)
    for line in summarize(runs, a.streams):
        print(json.dumps(line), flush=True)
    print(json.dumps({"summary": "machine", "cpu_native_bf16": cpu_has_bf16(), "cores": os.cpu_count(),
                      "loadavg_before": [round(x, 2) for x in load_before],
                      "loadavg_after": [round(x, 2) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()

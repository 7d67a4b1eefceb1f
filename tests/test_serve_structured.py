"""Structured output of the embedded server (clawgym.serve.structured): response_format json_object /
json_schema and tool_choice required / a named function, constrained by xgrammar inside the continuous-batching
loop, streamed and not; plus the request validation and the masks on their own (no server)."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema
import pytest

from clawgym.serve import structured
from clawgym.serve.compat import UnsupportedLibraryVersion, require_transformers
from clawgym.serve.structured import StructuredRequestError, request_spec

MODEL = Path(os.environ.get("CLAWGYM_BASE_MODEL_DIR",
                            Path(__file__).resolve().parents[1] / "data" / "models" / "smollm2-135m-instruct"))

SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 24},
    "difficulty": {"enum": ["easy", "medium", "hard"]},
    "steps": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["title", "difficulty", "steps"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string", "maxLength": 20}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a file.", "parameters": {
        "type": "object", "properties": {"path": {"type": "string", "maxLength": 20},
                                         "content": {"type": "string", "maxLength": 20}},
        "required": ["path", "content"]}}}]


# ---- no server ---------------------------------------------------------------------------------------------------

def test_request_spec_validates_and_names_the_field():
    assert request_spec({}) is None and request_spec({"response_format": {"type": "text"}}) is None
    assert request_spec({"tool_choice": "auto", "tools": TOOLS}) is None
    assert request_spec({"response_format": {"type": "json_object"}}) == ("json_object", "")
    kind, payload = request_spec({"response_format": {"type": "json_schema", "json_schema": {"name": "t",
                                                                                             "schema": SCHEMA}}})
    assert kind == "json_schema" and json.loads(payload) == SCHEMA
    kind, payload = request_spec({"tool_choice": "required", "tools": TOOLS})
    assert kind == "tool_call" and [f["name"] for f in json.loads(payload)] == ["read_file", "write_file"]
    kind, payload = request_spec({"tool_choice": {"type": "function", "function": {"name": "write_file"}},
                                  "tools": TOOLS})
    assert [f["name"] for f in json.loads(payload)] == ["write_file"]
    for body, field in [({"response_format": {"type": "yaml"}}, "response_format.type"),
                        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
                        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
                         "response_format.json_schema.schema"),
                        ({"tool_choice": "required"}, "tools"),
                        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": TOOLS},
                         "tool_choice.function.name"),
                        ({"tool_choice": "sometimes", "tools": TOOLS}, "tool_choice"),
                        ({"tool_choice": "required", "tools": [{"type": "function", "function": {}}]},
                         "tools[0].function.name")]:
        with pytest.raises(StructuredRequestError) as e:
            request_spec(body)
        assert e.value.field == field, (body, str(e.value))
    with pytest.raises(StructuredRequestError, match="response_format.json_schema.schema: cannot be compiled"):
        structured.build_grammar("json_schema", json.dumps({"type": "object", "properties": {"a": {"type": 7}}}))


def test_version_guard_refuses_another_transformers():
    require_transformers("clawgym.serve.x", "5.24.0", found="5.24.0")
    with pytest.raises(UnsupportedLibraryVersion, match=r"clawgym.serve.x patches private code of transformers "
                                                        r"5.24.0, but transformers 5.25.0 is installed"):
        require_transformers("clawgym.serve.x", "5.24.0", found="5.25.0")


@pytest.fixture(scope="module")
def tokenizer():
    if not (MODEL / "config.json").exists():
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(MODEL)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MODEL))


def test_masks_only_allow_the_grammar(tokenizer):
    """Greedy decoding of random logits under the mask: every row's output is valid, unconstrained rows are
    untouched, and once the grammar is complete only the end-of-turn token is left."""
    import torch

    vocab = 49152
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    cg = structured.compiled_grammar(request_spec({"tool_choice": "required", "tools": TOOLS}), tokenizer, vocab,
                                     [eos])
    c = structured.Constraint(cg, vocab)
    g = torch.Generator().manual_seed(0)
    out: list[int] = []
    for _ in range(200):
        scores = torch.randn(3, vocab, generator=g)
        free = scores[0].clone()
        c.sync(out)
        structured.mask_rows(scores, [(1, c)])
        assert torch.equal(scores[0], free)  # the unconstrained request of the step
        tok = int(scores[1].argmax())
        if tok == eos:
            break
        out.append(tok)
    text = tokenizer.decode(out)
    assert text.startswith("<tool_call>\n{") and text.endswith("}\n</tool_call>"), text
    call = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
    fn = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call["name"]]
    jsonschema.validate(call["arguments"], fn)


# ---- the server --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tokenizer):
    from clawgym.serve import ModelServer

    # float32: the streamed-vs-not comparison below is of code paths, exact to 1e-4 only without bfloat16's noise
    # (bf16 logits have ~0.1 resolution at this scale; a prefix-cache hit or another batch shape moves a logprob
    # by up to ~0.07 while the greedy ids agree). bf16 serving is exercised by the other server tests.
    with ModelServer(MODEL, device="cpu", dtype="float32", startup_timeout_s=300) as srv:
        yield srv


def _post(srv, body: dict) -> httpx.Response:
    return httpx.post(srv.base_url + "/chat/completions", timeout=600, headers={"Authorization": f"Bearer {srv.token}"},
                      json={"model": srv.model_name, "temperature": 0, "max_tokens": 60, **body})


def _stream(srv, body: dict) -> list[dict]:
    with httpx.stream("POST", srv.base_url + "/chat/completions", timeout=600,
                      headers={"Authorization": f"Bearer {srv.token}"},
                      json={"model": srv.model_name, "temperature": 0, "max_tokens": 60, "stream": True,
                            **body}) as r:
        assert r.status_code == 200, r.read()
        text = "".join(r.iter_text())
    return [json.loads(e[len("data: "):]) for e in text.split("\n\n")
            if e.startswith("data: ") and e.strip() != "data: [DONE]"]


def _merged(chunks: list[dict]) -> tuple[str, list[dict], str]:
    from clawgym.agent.proxy import merge_stream

    m = merge_stream(chunks)
    msg = m["choices"][0]["message"]
    return msg.get("content") or "", msg.get("tool_calls") or [], m["choices"][0]["finish_reason"]


@pytest.mark.model
@pytest.mark.slow
def test_response_formats_and_required_tools_valid_by_construction(server):
    """Each kind, non-streamed and streamed at once (one CB batch): the reply is valid under its constraint. The
    prompts invite prose; the base model answers in prose without a constraint (checked on the free request)."""
    ask = [{"role": "user", "content": "Tell me about your day in two sentences."}]
    schema_rf = {"type": "json_schema", "json_schema": {"name": "task", "schema": SCHEMA}}
    named = {"type": "function", "function": {"name": "write_file"}}
    jobs = {
        "free": lambda: _post(server, {"messages": ask}),
        "schema": lambda: _post(server, {"messages": ask, "response_format": schema_rf}),
        "schema_stream": lambda: _stream(server, {"messages": ask, "response_format": schema_rf}),
        "object": lambda: _post(server, {"messages": ask, "response_format": {"type": "json_object"}}),
        "object_stream": lambda: _stream(server, {"messages": ask, "response_format": {"type": "json_object"}}),
        "required": lambda: _post(server, {"messages": ask, "tools": TOOLS, "tool_choice": "required"}),
        "required_stream": lambda: _stream(server, {"messages": ask, "tools": TOOLS, "tool_choice": "required"}),
        "named": lambda: _post(server, {"messages": ask, "tools": TOOLS, "tool_choice": named}),
        "named_stream": lambda: _stream(server, {"messages": ask, "tools": TOOLS, "tool_choice": named}),
    }
    with ThreadPoolExecutor(len(jobs)) as ex:
        futs = {k: ex.submit(f) for k, f in jobs.items()}
        got = {k: f.result() for k, f in futs.items()}
    replies = {}
    for k, v in got.items():
        if isinstance(v, list):
            replies[k] = _merged(v)
        else:
            assert v.status_code == 200, (k, v.text)
            ch = v.json()["choices"][0]
            replies[k] = (ch["message"].get("content") or "", ch["message"].get("tool_calls") or [],
                          ch["finish_reason"])
    free = replies.pop("free")[0]
    with pytest.raises(ValueError):
        json.loads(free)  # unconstrained, the model writes prose
    for k in ("schema", "schema_stream"):
        content, calls, finish = replies[k]
        assert finish == "stop" and not calls, (k, replies[k])
        jsonschema.validate(json.loads(content), SCHEMA)
    for k in ("object", "object_stream"):
        content, calls, finish = replies[k]
        assert finish == "stop" and isinstance(json.loads(content), dict), (k, replies[k])
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for k in ("required", "required_stream", "named", "named_stream"):
        content, calls, finish = replies[k]
        assert finish == "tool_calls" and len(calls) == 1 and not content.strip(), (k, replies[k])
        name = calls[0]["function"]["name"]
        assert name in params and (name == "write_file" or not k.startswith("named")), (k, calls)
        jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), params[name])
    assert "Traceback" not in server.log_tail(50000)


@pytest.mark.model
@pytest.mark.slow
def test_bad_structured_requests_are_400_naming_the_field(server):
    ask = [{"role": "user", "content": "hi"}]
    r = _post(server, {"messages": ask, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})
    assert r.status_code == 400 and "response_format.json_schema.schema" in r.text, r.text
    r = _post(server, {"messages": ask, "tool_choice": "required"})
    assert r.status_code == 400 and "tools" in r.text, r.text
    assert _post(server, {"messages": ask, "max_tokens": 2}).status_code == 200  # the server is fine after them


@pytest.mark.model
@pytest.mark.slow
def test_streamed_token_ids_and_logprobs_equal_the_non_streamed(server, tokenizer):
    """A streamed greedy request with return_token_ids / logprobs: prompt_token_ids on the first chunk, the
    choices' token_ids concatenated = the non-streamed token_ids, logprobs likewise (tool-call and plain)."""
    for extra in ({}, {"tools": TOOLS, "tool_choice": "required"}):
        body = {"messages": [{"role": "user", "content": "List three fruits."}], "max_tokens": 24,
                "return_token_ids": True, "logprobs": True, **extra}
        with ThreadPoolExecutor(2) as ex:  # concurrently: streamed and not share continuous-batching steps
            fs, fn = ex.submit(_stream, server, body), ex.submit(_post, server, body)
            chunks, plain = fs.result(), fn.result()
        assert plain.status_code == 200, plain.text
        want = plain.json()
        want_ids = want["choices"][0]["token_ids"]
        want_lp = [e["logprob"] for e in want["choices"][0]["logprobs"]["content"]]
        assert chunks[0]["prompt_token_ids"] == want["prompt_token_ids"]
        ids = [i for c in chunks for ch in c["choices"] for i in ch.get("token_ids") or []]
        lps = [e["logprob"] for c in chunks for ch in c["choices"]
               for e in ((ch.get("logprobs") or {}).get("content") or [])]
        assert ids == want_ids and len(ids) == want["usage"]["completion_tokens"], (ids, want_ids)
        assert lps == pytest.approx(want_lp, abs=1e-4)
        if not extra:
            # the streamed text is the ids' own decode; transformers' non-streamed parse (parse_response with the
            # model's response template) drops trailing whitespace of the content, so it is compared without it
            streamed = _merged(chunks)[0]
            assert streamed == tokenizer.decode(ids, skip_special_tokens=True)
            assert streamed.rstrip() == want["choices"][0]["message"]["content"].rstrip()


def test_serving_dtype_bf16_only_where_the_cpu_has_it():
    from clawgym.serve.launcher import DTYPE_ENV, serving_dtype

    assert serving_dtype("auto", "cpu", cpuinfo="flags\t: sse avx2 avx512_bf16\n", env={}) == "bfloat16"
    assert serving_dtype("auto", "cpu", cpuinfo="flags\t: sse avx2 amx_bf16\n", env={}) == "bfloat16"
    assert serving_dtype("auto", "cpu", cpuinfo="flags\t: sse avx2\n", env={}) == "float32"  # emulated: slower
    assert serving_dtype("auto", "cpu", cpuinfo="flags\t: avx2\n", env={DTYPE_ENV: "bfloat16"}) == "bfloat16"
    assert serving_dtype("float32", "cpu", cpuinfo="flags\t: avx512_bf16\n", env={}) == "float32"  # as asked
    assert serving_dtype("auto", "cuda", env={}) == "auto"  # a GPU: the checkpoint's own dtype

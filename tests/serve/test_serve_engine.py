"""The embedded engine's conformance suite (clawgym.serve: vLLM behind ModelServer), one server for the module:
structured output (response_format json_schema / json_object, structured_outputs regex / choice, tool_choice
required / named: valid by construction, streamed and not), bad requests answered 400 naming the field, token ids
and logprobs streamed = not streamed, a badly written tool call answered as text, a request over the context
window refused at once as the client's typed "limit", the prompt's token ids forwarded by the caller, and the
bearer token on every route. Plus the launcher's command and environment (no engine needed)."""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema
import pytest

MODEL = Path(os.environ.get("CLAWGYM_BASE_MODEL_DIR",
                            Path(__file__).resolve().parents[2] / "data" / "models" / "smollm2-135m-instruct"))

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
# OpenAI's `strict`: the engine pins a forced call's arguments to its schema where the tool asks for it
STRICT_TOOLS = [{**t, "function": {**t["function"], "strict": True,
                                   "parameters": {**t["function"]["parameters"], "additionalProperties": False}}}
                for t in TOOLS]
DATE_RE = r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"
CHOICES = ["approve", "reject", "escalate"]


@pytest.fixture(scope="module")
def tokenizer():
    if not (MODEL / "config.json").exists():
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(MODEL)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MODEL))


# ---- the server --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tokenizer):
    from clawgym.serve import ModelServer

    # float32: the streamed-vs-not comparison below is of code paths, exact to 1e-4 only without bfloat16's noise
    # (bf16 logits have ~0.1 resolution at this scale; a prefix-cache hit or another batch shape moves a logprob
    # while the greedy ids agree). bf16 serving is exercised by the other server tests.
    with ModelServer(MODEL, device="cpu", dtype="float32", startup_timeout_s=600) as srv:
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
        "required": lambda: _post(server, {"messages": ask, "tools": STRICT_TOOLS, "tool_choice": "required"}),
        "required_stream": lambda: _stream(server, {"messages": ask, "tools": STRICT_TOOLS, "tool_choice": "required"}),
        "named": lambda: _post(server, {"messages": ask, "tools": STRICT_TOOLS, "tool_choice": named}),
        "named_stream": lambda: _stream(server, {"messages": ask, "tools": STRICT_TOOLS, "tool_choice": named}),
        "regex": lambda: _post(server, {"messages": ask, "structured_outputs": {"regex": DATE_RE}}),
        "regex_stream": lambda: _stream(server, {"messages": ask, "structured_outputs": {"regex": DATE_RE}}),
        "choice": lambda: _post(server, {"messages": ask, "structured_outputs": {"choice": CHOICES}}),
        "choice_stream": lambda: _stream(server, {"messages": ask, "structured_outputs": {"choice": CHOICES}}),
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
    for k in ("regex", "regex_stream"):
        assert re.fullmatch(DATE_RE, replies[k][0]), (k, replies[k])
    for k in ("choice", "choice_stream"):
        assert replies[k][0] in CHOICES, (k, replies[k])
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for k in ("required", "required_stream", "named", "named_stream"):
        content, calls, finish = replies[k]
        # a named call ends "stop" (OpenAI's finish reason for a forced function), a required one "tool_calls"
        assert finish == ("stop" if k.startswith("named") else "tool_calls"), (k, replies[k])
        assert len(calls) == 1 and not content.strip(), (k, replies[k])
        name = calls[0]["function"]["name"]
        assert name in params and (name == "write_file" or not k.startswith("named")), (k, calls)
        jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), params[name])
    assert "Traceback" not in server.log_tail(50000)


@pytest.mark.model
@pytest.mark.slow
def test_bad_structured_requests_are_400_naming_the_field(server):
    ask = [{"role": "user", "content": "hi"}]
    r = _post(server, {"messages": ask, "response_format": {"type": "yaml"}})
    assert r.status_code == 400 and "response_format" in r.text, r.text
    r = _post(server, {"messages": ask, "tool_choice": "required"})
    assert r.status_code == 400 and "tools" in r.text, r.text
    r = _post(server, {"messages": ask, "tools": TOOLS,
                       "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice", r.text
    r = _post(server, {"messages": ask, "kv_transfer_params": {"prompt_token_ids": [-1, 3]}})
    assert r.status_code == 400 and "kv_transfer_params.prompt_token_ids" in r.text, r.text
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
            streamed = _merged(chunks)[0]
            assert streamed == tokenizer.decode(ids, skip_special_tokens=True)
            assert streamed == want["choices"][0]["message"]["content"]


def test_serving_dtype_bf16_only_where_the_cpu_has_it():
    from clawgym.serve.launcher import DTYPE_ENV, serving_dtype

    assert serving_dtype("auto", "cpu", cpuinfo="flags\t: sse avx2 avx512_bf16\n", env={}) == "bfloat16"
    assert serving_dtype("auto", "cpu", cpuinfo="flags\t: sse avx2 amx_bf16\n", env={}) == "bfloat16"
    assert serving_dtype("auto", "cpu", cpuinfo="flags\t: sse avx2\n", env={}) == "float32"  # emulated: slower
    assert serving_dtype("auto", "cpu", cpuinfo="flags\t: avx2\n", env={DTYPE_ENV: "bfloat16"}) == "bfloat16"
    assert serving_dtype("float32", "cpu", cpuinfo="flags\t: avx512_bf16\n", env={}) == "float32"  # as asked
    assert serving_dtype("auto", "cuda", env={}) == "auto"  # a GPU: the checkpoint's own dtype


@pytest.mark.model
@pytest.mark.slow
def test_every_route_but_health_wants_the_token(server):
    """vLLM's own --api-key guards /v1 only; the engine's middleware guards /tokenize, /metrics, /version too."""
    root = server.root_url
    assert httpx.get(root + "/health", timeout=30).status_code == 200
    bad = {"Authorization": "Bearer wrong"}
    for method, path, body in [("GET", "/v1/models", None), ("GET", "/metrics", None), ("GET", "/version", None),
                               ("POST", "/tokenize", {"model": server.model_name, "prompt": "x"}),
                               ("POST", "/v1/chat/completions", {"model": server.model_name, "messages": []})]:
        for headers in ({}, bad):
            r = httpx.request(method, root + path, json=body, headers=headers, timeout=30)
            assert r.status_code == 401 and "bearer" in r.text, (path, headers, r.status_code, r.text[:200])
    ok = httpx.post(root + "/tokenize", json={"model": server.model_name, "prompt": "x"}, timeout=30,
                    headers={"Authorization": f"Bearer {server.token}"})
    assert ok.status_code == 200 and ok.json()["tokens"], ok.text
    # a client that takes only a URL (TRL's vLLM client) sends the token as URL credentials: Basic auth
    import requests

    creds = server.credentials_url()
    assert requests.get(creds + "/v1/models", timeout=30).status_code == 200
    assert requests.get(creds.replace(server.token, "wrong-token-value") + "/v1/models", timeout=30).status_code == 401
    assert server.token not in " ".join(server.command())  # never on the command line
    assert server.token not in server.log_tail(10**6)  # nor in its log


@pytest.mark.model
@pytest.mark.slow
def test_over_the_window_is_refused_at_once_as_a_limit(server, tokenizer):
    """A prompt past the model's 8,192 positions: 400 at once, the message naming the window; the agent's client
    classes it as its typed "limit" (the model's transcript outgrew the endpoint), not as the endpoint's fault."""
    import time

    from clawgym.agent.policies import AgentRequestError, ChatClient, Endpoint

    long = [{"role": "user", "content": "word " * 9000}]
    t = time.monotonic()
    r = _post(server, {"messages": long, "max_tokens": 8})
    assert r.status_code == 400 and "maximum context length is 8192" in r.text, r.text
    assert time.monotonic() - t < 30
    ep = Endpoint(base_url=server.base_url, model=server.model_name, kind="local")
    client = ChatClient(ep)
    with pytest.raises(AgentRequestError) as e:
        client.complete(messages=long, max_tokens=8)
    assert e.value.failure_class == "limit" and "context" in str(e.value)
    assert server.token not in str(e.value)


@pytest.mark.model
@pytest.mark.slow
def test_forwarded_prompt_ids_are_what_the_model_reads(server, tokenizer):
    """`kv_transfer_params.prompt_token_ids`: the engine generates from the caller's ids (and reports them), not
    from its own rendering of the messages; the messages still drive tool parsing."""
    msgs = [{"role": "user", "content": "Name a colour."}]
    plain = _post(server, {"messages": msgs, "return_token_ids": True, "max_tokens": 8}).json()
    ids = plain["prompt_token_ids"]
    other = tokenizer.apply_chat_template([{"role": "user", "content": "Name a fruit."}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False)
    other = list(other["input_ids"] if isinstance(other, dict) else other)
    assert other != ids
    r = _post(server, {"messages": msgs, "return_token_ids": True, "max_tokens": 8,
                       "kv_transfer_params": {"prompt_token_ids": other}}).json()
    assert r["prompt_token_ids"] == other
    same = _post(server, {"messages": msgs, "return_token_ids": True, "max_tokens": 8,
                          "kv_transfer_params": {"prompt_token_ids": ids}}).json()
    assert same["choices"][0]["token_ids"] == plain["choices"][0]["token_ids"]  # greedy: the same reply


def test_launcher_command_and_environment(tmp_path, monkeypatch):
    """The engine's command names its venv's Python, the hermes tool parser, the middleware and never the token;
    its environment drops this project's Python paths and keeps the compile cache under data/."""
    from clawgym.serve import launcher

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    py = tmp_path / "venv" / "bin" / "python"
    with pytest.raises(launcher.EngineNotInstalled, match=r"venv/bin/python is missing: run scripts/install_vllm"):
        launcher.engine_python({launcher.ENGINE_VENV_ENV: str(tmp_path / "venv")})
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    env = {launcher.ENGINE_VENV_ENV: str(tmp_path / "venv"), "PYTHONPATH": "/elsewhere", "CLAWGYM_SERVER_TOKEN": "t"}
    srv = launcher.ModelServer(model, port=1, device="cpu", dtype="float32", env=env, token="s3cret-token-value")
    cmd = srv.command()
    assert cmd[:3] == [str(py), "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in cmd
    assert cmd[cmd.index("--middleware") + 1] == "clawgym_engine_auth.EngineAuth"
    assert "s3cret-token-value" not in " ".join(cmd) and "--enforce-eager" not in cmd
    assert "--enforce-eager" in launcher.ModelServer(model, port=1, device="cpu", env=env, compile=False).command()
    assert "--middleware" not in launcher.ModelServer(model, port=1, device="cpu", env=env, token="").command()
    e = srv.environment()
    assert e["PYTHONPATH"] == str(launcher.ENGINE_EXT) and "CLAWGYM_SERVER_TOKEN" not in e
    assert e["VLLM_CACHE_ROOT"].endswith("data/vllm-cache") and e["VLLM_USE_AOT_COMPILE"] == "0"
    assert e["VLLM_CPU_KVCACHE_SPACE"] == str(launcher.KV_GIB) and e["HF_HUB_OFFLINE"] == "1"
    assert "--weight-transfer-config" not in cmd and "VLLM_SERVER_DEV_MODE" not in e
    with pytest.raises(FileNotFoundError, match="not an HF model folder"):
        launcher.ModelServer(tmp_path)
    # a trainer's engine (TRL's server mode): vLLM's weight transfer, its routes, TRL's log-probability flags
    wt = launcher.ModelServer(model, port=7, device="cpu", env=env, token="s3cret-token-value", weight_transfer="nccl")
    wcmd = wt.command()
    assert json.loads(wcmd[wcmd.index("--weight-transfer-config") + 1]) == {"backend": "nccl"}
    assert wcmd[wcmd.index("--logprobs-mode") + 1] == "processed_logprobs" and "--middleware" in wcmd
    assert wt.environment()["VLLM_SERVER_DEV_MODE"] == "1"
    assert wt.credentials_url() == "http://clawgym:s3cret-token-value@127.0.0.1:7"
    assert launcher.ModelServer(model, port=7, env=env, token="").credentials_url() == "http://127.0.0.1:7"


def test_engine_middleware_refuses_without_the_token(monkeypatch):
    """The middleware the engine loads, run here as the engine runs it (its module by path, the token from the
    environment, then gone from it)."""
    import asyncio
    import importlib.util

    from clawgym.serve import launcher

    monkeypatch.setenv("CLAWGYM_SERVER_TOKEN", "tok-" + "x" * 20)
    spec = importlib.util.spec_from_file_location("eng_auth", launcher.ENGINE_EXT / "clawgym_engine_auth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert "CLAWGYM_SERVER_TOKEN" not in os.environ
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    mw = mod.EngineAuth(app)

    def call(path, auth=None):
        out = []

        async def send(m):
            out.append(m)

        headers = [(b"authorization", auth.encode())] if auth else []
        asyncio.run(mw({"type": "http", "path": path, "headers": headers}, None, send))
        return out[0]["status"]

    assert call("/health") == 200 and call("/tokenize") == 401 and call("/metrics", "Bearer nope") == 401
    assert call("/tokenize", "Bearer tok-" + "x" * 20) == 200 and seen == ["/health", "/tokenize"]
    import base64

    def basic(user_pw: str) -> str:
        return "Basic " + base64.b64encode(user_pw.encode()).decode()

    # URL credentials (user:token as Basic auth): the password must be the token; the user is not a secret
    assert call("/v1/models", basic("clawgym:tok-" + "x" * 20)) == 200
    assert call("/v1/models", basic("tok-" + "x" * 20 + ":")) == 401  # the token as the user name is not it
    assert call("/v1/models", basic("clawgym:nope")) == 401 and call("/v1/models", "Basic !!not-base64") == 401
    monkeypatch.delenv("CLAWGYM_SERVER_TOKEN", raising=False)
    mod2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod2)
    with pytest.raises(ValueError, match="non-empty token"):
        mod2.EngineAuth(app)

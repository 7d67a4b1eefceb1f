"""OpenClaw's config for an endpoint (clawgym.agent.openclaw.openclaw_config): the model's real context window, the
lean config for a small one, extra request fields; and how a refused request ends the rollout. No OpenClaw needed."""

import json

from clawgym.agent.openclaw import (
    DEFAULT_CONTEXT_WINDOW,
    DENY_TOOLS,
    LEAN_BELOW,
    LEAN_TOOLS,
    _refusal,
    model_context_window,
    openclaw_config,
)
from clawgym.agent.policies import Endpoint


def test_context_window_of_a_local_model_is_its_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    assert model_context_window(Endpoint(base_url="http://x/v1", model=str(tmp_path), kind="local")) == 8192
    vlm = tmp_path / "vlm"
    vlm.mkdir()
    (vlm / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 4096}}))
    assert model_context_window(Endpoint(base_url="http://x/v1", model=str(vlm), kind="local")) == 4096
    # unknown: another kind, or no readable config
    assert model_context_window(Endpoint(base_url="http://x/v1", model=str(tmp_path), kind="openai")) is None
    assert model_context_window(Endpoint(base_url="http://x/v1", model=str(tmp_path / "none"), kind="local")) is None


def test_small_window_gets_the_lean_config():
    big = openclaw_config("http://p/v1", "m", "/ws")
    model = big["models"]["providers"]["clawgym"]["models"][0]
    assert model["contextWindow"] == DEFAULT_CONTEXT_WINDOW
    assert big["tools"] == {"profile": "coding", "deny": DENY_TOOLS}
    assert "skills" not in big["agents"]["defaults"] and "contextInjection" not in big["agents"]["defaults"]

    small = openclaw_config("http://p/v1", "m", "/ws", context_window=8192, max_tokens=256)
    model = small["models"]["providers"]["clawgym"]["models"][0]
    assert model["contextWindow"] == 8192 and model["maxTokens"] == 256
    d = small["agents"]["defaults"]
    assert d["skills"] == [] and d["contextInjection"] == "never" and d["skipBootstrap"] is True
    assert small["tools"]["allow"] == LEAN_TOOLS and small["tools"]["toolSearch"] is False
    assert "apply_patch" in small["tools"]["deny"] and set(DENY_TOOLS) <= set(small["tools"]["deny"])
    assert openclaw_config("u", "m", "/w", context_window=LEAN_BELOW)["tools"].get("allow") is None
    assert openclaw_config("u", "m", "/w", lean=True)["tools"]["allow"] == LEAN_TOOLS  # forced either way
    assert "allow" not in openclaw_config("u", "m", "/w", context_window=8192, lean=False)["tools"]


def test_request_params_ride_on_every_request():
    cfg = openclaw_config("u", "m", "/w", request_params={"tool_choice": "required"})
    assert cfg["agents"]["defaults"]["models"] == {"clawgym/m": {"params": {"extra_body": {"tool_choice": "required"}}}}
    assert "models" not in openclaw_config("u", "m", "/w")["agents"]["defaults"]


def test_refused_requests_name_the_model_and_its_window():
    body = json.dumps({"error": {"message": "model smol: the prompt is 9161 tokens, but the model's context window "
                                            "is 8192 tokens", "code": "context_length_exceeded"}})
    cls, err = _refusal([{"status": 400, "error": body}], 0, "smol", 8192, 2048)
    assert cls == "infra" and "first request over the context window" in err
    assert "smol" in err and "8192" in err and "9161" in err and "2048" in err
    cls, err = _refusal([{"status": 200}, {"status": 200}, {"status": 400, "error": body}], 2, "smol", 8192, 256)
    assert cls == "limit" and "after 2 answered requests" in err and "9161" in err
    cls, err = _refusal([{"status": 413, "error": "too large"}], 0, "m", 4096, 64)  # not JSON: the text itself
    assert cls == "infra" and "refused" in err and "too large" in err

"""The recording proxy's upstream key is a constructor parameter (issue 35): the proxy reads no environment; the
OpenClaw runtime reads the key by its variable's name (Endpoint.api_key) and hands it over."""

from __future__ import annotations

from starlette.requests import Request

from clawgym.agent.loop import Limits
from clawgym.agent.openclaw import _rollout_proxy
from clawgym.agent.policies import Endpoint
from clawgym.agent.proxy import RecordingProxy, read_log


def _request() -> Request:
    return Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "query_string": b"",
                    "headers": [(b"authorization", b"Bearer client-token"), (b"x-clawgym-task", b"forged"),
                                (b"x-other", b"kept")]})


def test_the_given_key_is_the_upstream_bearer_and_the_clients_is_not_forwarded(tmp_path):
    px = RecordingProxy("http://127.0.0.1:9/v1", str(tmp_path / "p.jsonl"), api_key="sk-given-" + "ab" * 12)
    px.register_session("s", task_id="t1", policy="oracle")
    h = px._headers(_request(), "s")
    assert h["authorization"] == "Bearer sk-given-" + "ab" * 12
    assert h["x-other"] == "kept" and h["x-clawgym-session"] == "s"
    assert h["x-clawgym-task"] == "t1" and h["x-clawgym-policy"] == "oracle"  # the proxy's, not the client's


def test_the_proxy_reads_no_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_T_PX_KEY", "sk-env-" + "cd" * 12)
    px = RecordingProxy("http://127.0.0.1:9/v1", str(tmp_path / "p.jsonl"), api_key_env="CLAWGYM_T_PX_KEY")
    assert px._headers(_request(), "s")["authorization"] == "Bearer clawgym"  # no key given: the placeholder


def test_the_given_key_is_redacted_from_the_log(tmp_path):
    key = "upstream-key-" + "ef" * 12  # not shaped like a known secret: only the proxy knows it is one
    log = tmp_path / "p.jsonl"
    px = RecordingProxy("http://127.0.0.1:9/v1", str(log), api_key=key)
    px._write({"kind": "note", "text": f"the model says {key}"})
    assert key not in log.read_text() and read_log(str(log))[0]["text"] == "the model says [REDACTED]"


def test_openclaw_hands_the_endpoints_key_to_its_proxy(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_T_OC_KEY", "sk-endpoint-" + "12" * 12)
    ep = Endpoint(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="CLAWGYM_T_OC_KEY")
    px = _rollout_proxy(ep, str(tmp_path / "a.jsonl"), None, Limits(), 60.0, "client-token")
    assert px._headers(_request(), "s")["authorization"] == "Bearer sk-endpoint-" + "12" * 12
    assert px.api_key_env == "CLAWGYM_T_OC_KEY"  # its value is still redacted by name
    keyless = Endpoint(base_url="http://127.0.0.1:9/v1", model="m")
    px = _rollout_proxy(keyless, str(tmp_path / "b.jsonl"), None, Limits(), 60.0, "client-token")
    assert px._headers(_request(), "s")["authorization"] == "Bearer clawgym"  # as before: no key, the placeholder

"""Builtin runtime rollouts: oracle/noop policies in docker, bwrap and local sandboxes; infra retries;
secret redaction; Rollout rows."""

import json

import pytest

from clawgym.agent.demo import demo_tasks
from clawgym.agent.loop import Limits
from clawgym.agent.policies import PolicySpec, RetryPolicy, get_policy, policy_registry
from clawgym.agent.rollout import Rollout, RolloutSettings, run_rollout, workspace_diff
from clawgym.agent.servers import shared_policy_server
from clawgym.sandbox import get_factory
from clawgym.tasks.model import ToolCall

FAST_RETRY = RetryPolicy(attempts=3, backoff_s=0.05, max_backoff_s=0.1, timeout_s=30)


def _backend_ok(name):
    if name == "local":
        return True, ""
    if name == "bwrap":
        from clawgym.sandbox.bwrap.backend import available
        return available()
    from clawgym.sandbox.docker.backend import available
    return available()


@pytest.fixture(scope="module", params=["local", "bwrap", "docker"])
def factory(request):
    ok, why = _backend_ok(request.param)
    if not ok:
        pytest.skip(f"{request.param} sandbox unavailable: {why}")
    f = get_factory(request.param)
    yield f
    f.close()


def test_oracle_scores_one_everywhere(factory):
    for task in demo_tasks():
        ro = run_rollout(task, "oracle", factory, settings=RolloutSettings(retry=FAST_RETRY))
        assert ro.failure_class == "ok", ro.error
        assert ro.score == 1.0, (task.task_id, ro.verification)
        assert ro.turns == len(task.reference) + 1
        assert ro.tool_calls == len(task.reference)
        assert ro.tool_types == list(dict.fromkeys(tc.name for tc in task.reference))
        assert ro.messages[0]["role"] == "system" and ro.messages[1]["content"] == task.instruction
        assert [m["role"] for m in ro.messages].count("tool") == len(task.reference)
        assert ro.workspace_diff, "the oracle must change the workspace"
        assert ro.verification.score == 1.0


def test_noop_does_not_solve(factory):
    task = demo_tasks()[0]
    ro = run_rollout(task, "noop", factory, settings=RolloutSettings(retry=FAST_RETRY))
    assert ro.failure_class == "ok" and ro.score == 0.0 and ro.tool_calls == 0 and ro.workspace_diff == []


def test_rollout_rows_and_steps():
    f = get_factory("local")
    task = demo_tasks()[2]
    ro = run_rollout(task, "oracle", f)
    row = ro.to_row(shard=3, run_id="r1")
    from clawgym.lake.schemas import SCHEMAS
    assert set(row) == set(SCHEMAS["trajectories"].names)
    assert json.loads(row["messages_json"]) == ro.messages and row["shard"] == 3
    assert json.loads(row["diff_json"]) == [{"path": "output/attendees_sorted.txt", "change": "added", "size": 53}]
    steps = ro.steps(shard=3)
    assert set(steps[0]) == set(SCHEMAS["steps"].names)
    assert [s["tool_name"] for s in steps] == ["ls", "exec", "write"]
    assert "Grace Hopper" in steps[1]["tool_result"]
    assert all(isinstance(s["duration_s"], float) for s in steps)
    assert Rollout.model_validate_json(ro.model_dump_json()).score == 1.0
    f.close()


def test_verification_is_typed_and_stored_as_its_record():
    """Rollout.verification is the VerificationResult itself; the lake gets its record (the same keys as always:
    DuckDB's json_extract, bench and CLI readers), and a record read back is validated into the type, keys that
    are no field kept in `extra` and written back flat."""

    from pydantic import ValidationError

    from clawgym.verify.result import VerificationResult

    f = get_factory("local")
    ro = run_rollout(demo_tasks()[2], "oracle", f)
    f.close()
    v = ro.verification
    assert isinstance(v, VerificationResult) and v.task_id == ro.task_id and v.score == 1.0 and v.export
    text = ro.to_row()["verification_json"]
    rec = json.loads(text)
    assert list(rec) == [name for name in VerificationResult.model_fields if name != "extra"]
    assert text == json.dumps(v.to_dict(), ensure_ascii=False, default=str)
    assert rec["weights"] == list(v.weights) and rec["export"] == v.export and rec["subscores"] == v.subscores
    back = Rollout.model_validate_json(ro.model_dump_json())
    assert back.verification == v and back.verification_json() == text
    old = {**rec, "score": 1, "details": {"k": [1, 2]}}  # an older writer's record: an int score, a key of its own
    r2 = Rollout(task_id="t", policy="p", verification=old)
    assert type(r2.verification.score) is float and type(r2.verification.weights) is tuple
    assert r2.verification.extra == {"details": {"k": [1, 2]}}
    assert json.loads(r2.verification_json()) == {**rec, "details": {"k": [1, 2]}}
    assert Rollout(task_id="t", policy="p").verification_json() is None
    with pytest.raises(ValidationError):
        Rollout(task_id="t", policy="p", verification={"task_id": "t", "score": "high"})


def test_workspace_diff():
    d = workspace_diff({"a": b"1", "b": b"2"}, {"a": b"1", "b": b"3", "c": b"44"})
    assert d == [{"path": "b", "change": "modified", "size": 1}, {"path": "c", "change": "added", "size": 2}]
    assert workspace_diff({"a": b"1"}, {}) == [{"path": "a", "change": "deleted", "size": 0}]


def test_a_record_with_raw_bytes_is_written_not_a_crash():
    from clawgym.agent.rollout import _fsdecode

    # bytes and bytearray values (a path as the OS gave it) are written as text, undecodable bytes as surrogates
    assert _fsdecode(b"a\xff") == _fsdecode(bytearray(b"a\xff")) == "a\udcff"
    assert json.dumps({"p": bytearray(b"x")}, default=_fsdecode) == '{"p": "x"}'


def test_turn_limit_is_limit_and_scored():
    f = get_factory("local")
    task = demo_tasks()[2]
    ro = run_rollout(task, "oracle", f, settings=RolloutSettings(limits=Limits(max_turns=2)))
    assert ro.failure_class == "limit" and ro.turns == 2
    assert ro.score is not None and ro.score < 1.0  # a limit is the agent's result: scored
    f.close()


def test_500_then_recovery_is_retried_and_never_scored_zero():
    f = get_factory("local")
    srv = shared_policy_server()
    task = demo_tasks()[1]
    # 1) two 500s: the client retries within the request and the rollout succeeds
    srv.inject_failures(2, 500)
    ro = run_rollout(task, "oracle", f, settings=RolloutSettings(retry=FAST_RETRY))
    assert ro.failure_class == "ok" and ro.score == 1.0 and ro.attempt == 1
    # 2) more 500s than the client's tries: attempt 1 is infra, the rollout-level retry succeeds
    srv.inject_failures(3, 503)
    ro = run_rollout(task, "oracle", f, settings=RolloutSettings(attempts=3, retry_wait_s=0.01, retry=FAST_RETRY))
    assert ro.attempt == 2 and ro.failure_class == "ok" and ro.score == 1.0
    assert len(ro.infra_errors) == 1 and "503" in ro.infra_errors[0]
    # 3) an endpoint that stays down: infra, score None (never 0), every attempt used
    srv.inject_failures(100, 500)
    try:
        ro = run_rollout(task, "oracle", f, settings=RolloutSettings(attempts=2, retry_wait_s=0.01, retry=FAST_RETRY))
    finally:
        srv.fail_next.clear()
    assert ro.failure_class == "infra" and ro.score is None and ro.verification is None
    assert ro.attempt == 2 and ro.to_row()["score"] is None
    # 4) an endpoint nobody listens on: infra too
    dead = PolicySpec(name="dead", kind="openai", base_url="http://127.0.0.1:9/v1", model="x")
    ro = run_rollout(task, dead, f,
                     settings=RolloutSettings(attempts=1, retry=RetryPolicy(attempts=2, backoff_s=0.01, timeout_s=5)))
    assert ro.failure_class == "infra" and ro.score is None
    f.close()


def test_api_key_never_stored(monkeypatch):
    srv = shared_policy_server()
    secret = srv.token  # the oracle server's own bearer token, as an "openai" policy's key: it must never be stored
    monkeypatch.setenv("CLAWGYM_TEST_API_KEY", secret)
    spec = PolicySpec(name="keyed", kind="openai", base_url=srv.base_url, model="oracle",
                      api_key_env="CLAWGYM_TEST_API_KEY")
    task = demo_tasks()[1].model_copy(update={
        "task_id": "leaky", "instruction": "Change the port in config/app.ini to 8443.",
        "reference": [ToolCall(name="exec", arguments={"command": f"echo key={secret}; env | grep -c . "}),
                      ToolCall(name="write", arguments={"path": "notes.txt", "content": f"token {secret}"}),
                      *demo_tasks()[1].reference]})
    srv.register(task)  # an "openai" policy that happens to be the oracle server
    f = get_factory("local")
    ro = run_rollout(task, spec, f, settings=RolloutSettings(retry=FAST_RETRY))
    f.close()
    assert ro.failure_class == "ok" and ro.score == 1.0, ro.error
    dumped = ro.model_dump_json() + json.dumps(ro.to_row(), default=str) + json.dumps(ro.steps())
    assert secret not in dumped
    assert "[REDACTED]" in dumped  # it really passed through the agent's tool results


def test_policy_registry_from_endpoints_json(monkeypatch):
    eps = json.dumps([{"name": "vllm", "base_url": "http://h:8000/v1", "model": "m", "api_key_env": "K"}])
    reg = policy_registry(eps)
    assert {"oracle", "noop", "vllm"} <= set(reg)
    assert get_policy("vllm", eps).kind == "openai" and get_policy("vllm", eps).api_key_env == "K"
    with pytest.raises(ValueError, match="api_key_env"):
        policy_registry(json.dumps({"bad": {"base_url": "x", "api_key": "sk-live"}}))
    # the library never reads $CLAWGYM_ENDPOINTS itself: the ModelEndpointsResource / entry points pass it
    monkeypatch.setenv("CLAWGYM_ENDPOINTS", eps)
    assert "vllm" not in policy_registry()
    with pytest.raises(KeyError):
        get_policy("nope")
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource

    assert ModelEndpointsResource(lake=LakeResource(), endpoints_json=eps).policy("vllm").api_key_env == "K"


def _procedural_sample():
    """One synthetic procedural task per bench category (clawgym.synth), with its reference solution."""
    fam_mod = pytest.importorskip("clawgym.synth.families", reason="clawgym.synth families not available")
    by_cat = {}
    for fam in fam_mod.all_families():
        by_cat.setdefault(fam.category, fam)
    return [f.generate(7) for f in by_cat.values()]


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_oracle_scores_one_on_procedural_tasks(backend):
    ok, why = _backend_ok(backend)
    if not ok:
        pytest.skip(f"{backend} sandbox unavailable: {why}")
    factory = get_factory(backend)
    tasks = _procedural_sample()
    assert len(tasks) >= 5
    for i, task in enumerate(tasks):
        assert task.reference, task.task_id
        ro = run_rollout(task, "oracle", factory, settings=RolloutSettings(retry=FAST_RETRY))
        assert ro.failure_class == "ok", (task.task_id, ro.error)
        assert ro.score == 1.0, (task.task_id, ro.verification)
        assert ro.tool_calls == len(task.reference)
        if i < 2:
            nro = run_rollout(task, "noop", factory, settings=RolloutSettings(retry=FAST_RETRY))
            assert nro.score is not None and nro.score < 1.0, task.task_id
    factory.close()


def test_run_rollouts_concurrently_keeps_order():
    from clawgym.agent.rollout import run_rollouts
    f = get_factory("local")
    tasks = demo_tasks() * 2
    ros = run_rollouts(tasks, "oracle", f, workers=3, settings=RolloutSettings(retry=FAST_RETRY))
    f.close()
    assert [r.task_id for r in ros] == [t.task_id for t in tasks]
    assert all(r.score == 1.0 and r.policy == "oracle" for r in ros)
    assert len({r.rollout_id for r in ros}) == len(ros)


def test_sandbox_dying_before_verification_is_infra_not_zero():
    from clawgym.sandbox.base import SandboxError, SandboxFactory

    class DyingFactory(SandboxFactory):
        """Sandboxes whose exec fails (the container died): the task below only needs read/edit, so
        the agent finishes and the verifier is the first to notice."""
        inner = get_factory("local")

        def open(self, files=()):
            sb = self.inner.open(files)

            def dead(*a, **k):
                raise SandboxError("container died")
            sb.exec = dead
            return sb

    f = DyingFactory()
    ro = run_rollout(demo_tasks()[1], "oracle", f,
                     settings=RolloutSettings(attempts=2, retry_wait_s=0.01, retry=FAST_RETRY))
    f.inner.close()
    assert ro.failure_class == "infra" and ro.score is None and ro.attempt == 2
    assert "container died" in ro.error

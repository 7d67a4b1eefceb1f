"""Agent runtimes behind one protocol (clawgym.agent.runtimes): the registry, the built-in runtimes, a runtime
registered by decorator running through run_rollout / run_rollouts with the local sandbox and the oracle, and who
owns (closes) a runtime's instance."""

import subprocess
import sys

import pytest

from clawgym.agent.demo import demo_tasks
from clawgym.agent.loop import run_builtin
from clawgym.agent.policies import RetryPolicy
from clawgym.agent.rollout import RolloutSettings, run_rollout, run_rollouts
from clawgym.agent.runtimes import (
    AgentRuntime,
    BaseRuntime,
    BuiltinRuntime,
    OpenClawRuntime,
    _registry,
    agent_runtime,
    get_runtime,
    runtime_names,
)
from clawgym.agent.tools import TOOL_SCHEMAS
from clawgym.sandbox import get_factory
from clawgym.sandbox.base import SandboxConfig, SandboxError

FAST = RetryPolicy(attempts=1, backoff_s=0.01, timeout_s=30)


def test_unknown_runtime_error_names_it_and_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown agent runtime 'claude': registered runtimes are builtin, openclaw"):
        get_runtime("claude")
    with pytest.raises(ValueError, match=r"'claude' is not one of builtin, openclaw"):
        RolloutSettings(runtime="claude")


def test_builtin_and_openclaw_are_registered():
    from clawgym.agent.settings import RUNTIMES

    assert runtime_names()[:2] == ("builtin", "openclaw") and RUNTIMES[:2] == ("builtin", "openclaw")
    b, o = get_runtime("builtin"), get_runtime("openclaw")
    assert isinstance(b, BuiltinRuntime) and isinstance(o, OpenClawRuntime)
    assert isinstance(b, AgentRuntime) and isinstance(o, AgentRuntime)
    assert (b.name, o.name) == ("builtin", "openclaw")
    assert get_runtime("openclaw") is not o  # a new instance per call: each owns its own sibling factories
    local = get_factory("local")
    assert b.prepare(local, None) is local and o.prepare(local, None) is local  # local runs OpenClaw as it is


def test_builtin_rollout_does_not_import_openclaw():
    code = ("import sys\n"
            "from clawgym.agent.demo import demo_tasks\n"
            "from clawgym.agent.rollout import run_rollout\n"
            "from clawgym.sandbox import get_factory\n"
            "ro = run_rollout(demo_tasks()[0], 'oracle', get_factory('local'))\n"
            "assert ro.score == 1.0 and ro.runtime == 'builtin', (ro.failure_class, ro.error)\n"
            "print('openclaw' if 'clawgym.agent.openclaw' in sys.modules else 'clean')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "clean"


class _CountingFactory:
    """What a runtime's prepare() hands back: counts the agent-phase sandboxes opened in it."""

    def __init__(self, inner):
        self.inner, self.opened, self.closed = inner, 0, 0

    def open(self, files=()):
        self.opened += 1
        return self.inner.open(files)

    def close(self):
        self.closed += 1


@pytest.fixture
def recording_runtime():
    """A runtime registered by decorator: the builtin loop with a one-tool list, recording its instances."""
    instances = []

    @agent_runtime("recording-test")
    class Recording(BaseRuntime):
        def __init__(self):
            self.prepared, self.runs, self.closes, self.made = [], 0, 0, None
            instances.append(self)

        def prepare(self, factory, options):
            self.prepared.append((factory, options))
            if self.made is None:
                self.made = _CountingFactory(factory)
            return self.made

        def run(self, task, endpoint, sandbox, limits, settings):
            self.runs += 1
            return run_builtin(task, endpoint, sandbox, limits, retry=settings.retry), TOOL_SCHEMAS[:1]

        def close(self):
            self.closes += 1

    yield Recording, instances
    _registry.pop("recording-test", None)


def test_custom_runtime_runs_through_run_rollout_and_is_closed_by_its_owner(recording_runtime):
    cls, instances = recording_runtime
    assert "recording-test" in runtime_names() and cls.name == "recording-test"
    f = get_factory("local")
    settings = RolloutSettings(runtime="recording-test", runtime_options={"k": 1}, retry=FAST)
    task = demo_tasks()[0]
    ro = run_rollout(task, "oracle", f, settings)
    assert ro.failure_class == "ok" and ro.score == 1.0, ro.error
    assert ro.runtime == "recording-test" and ro.tools == TOOL_SCHEMAS[:1]
    assert ro.tool_calls == len(task.reference)
    (rt,) = instances  # run_rollout made one, ran it once, closed it
    assert rt.runs == 1 and rt.closes == 1 and rt.prepared == [(f, {"k": 1})] and rt.made.opened == 1

    # run_rollouts: one instance for every rollout, closed once at the end
    tasks = demo_tasks()[:3]
    ros = run_rollouts(tasks, "oracle", f, workers=2, settings=settings)
    assert [r.task_id for r in ros] == [t.task_id for t in tasks]
    assert all(r.score == 1.0 and r.runtime == "recording-test" for r in ros), [r.error for r in ros]
    assert len(instances) == 2
    rt = instances[1]
    assert rt.runs == 3 and rt.closes == 1 and rt.made.opened == 3

    # a caller's instance is the caller's: run_rollout uses it and leaves it open
    with get_runtime("recording-test") as mine:
        run_rollout(task, "oracle", f, settings, runtime=mine)
        assert mine.runs == 1 and mine.closes == 0
        with pytest.raises(ValueError, match="recording-test"):
            run_rollout(task, "oracle", f, RolloutSettings(), runtime=mine)
    assert mine.closes == 1 and len(instances) == 3


def test_custom_runtime_sandbox_error_is_infra_and_retried(recording_runtime):
    @agent_runtime("failing-test")
    class Failing(BaseRuntime):
        closes = 0

        def run(self, task, endpoint, sandbox, limits, settings):
            raise SandboxError("the runtime's sandbox died")

        def close(self):
            type(self).closes += 1

    try:
        ro = run_rollout(demo_tasks()[0], "oracle", get_factory("local"),
                         RolloutSettings(runtime="failing-test", attempts=2, retry_wait_s=0.0, retry=FAST))
    finally:
        _registry.pop("failing-test", None)
    assert ro.failure_class == "infra" and ro.score is None and ro.runtime == "failing-test"
    assert ro.attempt == 2 and ro.infra_errors == ["sandbox: the runtime's sandbox died"]
    assert ro.error == "sandbox: the runtime's sandbox died" and Failing.closes == 1


class _FakeFactory:
    def __init__(self, name, config):
        self.name, self.config, self.closed = name, config, 0

    def close(self):
        self.closed += 1


def test_openclaw_runtime_owns_its_sibling_factories(monkeypatch, tmp_path):
    import clawgym.sandbox as sandbox_pkg
    from clawgym.agent.openclaw import SANDBOX_OPENCLAW_DIR, SANDBOX_SOCK_DIR, has_openclaw_binds

    made = []

    def fake_get_factory(name, config=None, **kw):
        made.append(_FakeFactory(name, config))
        return made[-1]

    monkeypatch.setattr(sandbox_pkg, "get_factory", fake_get_factory)
    plain_a, plain_b = _FakeFactory("bwrap", SandboxConfig()), _FakeFactory("docker", SandboxConfig())
    opts = {"sock_dir": str(tmp_path / "socks")}
    with get_runtime("openclaw") as rt:
        sib = rt.prepare(plain_a, opts)
        assert sib is rt.prepare(plain_a, opts) and sib is not plain_a  # once per factory
        assert sib.name == "bwrap" and has_openclaw_binds(sib.config)
        assert {b[1] for b in sib.config.extra_ro_binds} >= {SANDBOX_OPENCLAW_DIR, SANDBOX_SOCK_DIR}
        other = rt.prepare(plain_b, opts)
        assert other.name == "docker" and len(made) == 2
        assert rt.prepare(sib, opts) is sib  # a factory with the binds is used as it is
        assert get_runtime("openclaw").prepare(plain_a, opts) is not sib  # another instance: its own siblings
        assert sib.closed == 0
    assert [m.closed for m in made] == [1, 1, 0]  # closed with the runtime that made them, once
    assert plain_a.closed == plain_b.closed == 0  # the caller's factories are the caller's
    rt.close()
    assert [m.closed for m in made] == [1, 1, 0]

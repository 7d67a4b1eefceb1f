"""The real OpenClaw (openclaw@2026.9.6) inside bwrap and docker sandboxes, driven by the oracle policy
behind the recording proxy. Needs scripts/install_openclaw.sh (CI runs it)."""

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from clawgym.agent.demo import demo_tasks
from clawgym.agent.loop import Limits
from clawgym.agent.openclaw import openclaw_installed, openclaw_sandbox_config
from clawgym.agent.proxy import read_log, rebuild_sessions
from clawgym.agent.rollout import RolloutSettings, run_rollout
from clawgym.agent.servers import text_of
from clawgym.sandbox import get_factory

pytestmark = pytest.mark.openclaw

_ok, _why = openclaw_installed()
if not _ok:
    pytest.skip(f"OpenClaw is not installed: {_why}", allow_module_level=True)


def _available(name):
    if name == "bwrap":
        from clawgym.sandbox.bwrap.backend import available
    else:
        from clawgym.sandbox.docker.backend import available
    return available()


def test_openclaw_oracle_scores_one_and_trajectories_rebuild(tmp_path):
    jobs = []  # (backend, task): two tasks in bwrap, one in docker, run concurrently
    factories = {}
    for backend, tasks in (("bwrap", demo_tasks()[:2]), ("docker", demo_tasks()[1:2])):
        ok, why = _available(backend)
        if not ok:
            continue
        # bwrap: a plain factory (run_rollout derives one with the OpenClaw binds); docker: configured up front
        factories[backend] = get_factory(backend) if backend == "bwrap" else \
            get_factory(backend, openclaw_sandbox_config())
        jobs += [(backend, t) for t in tasks]
    if not jobs:
        pytest.skip("neither bwrap nor docker sandboxes are available")
    try:
        with ThreadPoolExecutor(len(jobs)) as ex:
            futs = [ex.submit(run_rollout, t, "oracle", factories[b], RolloutSettings(
                        limits=Limits(max_wall_s=400), runtime="openclaw", attempts=2, retry_wait_s=2.0,
                        runtime_options={"log_dir": str(tmp_path / b), "tools_dir": str(tmp_path / "no-install")}))
                    for b, t in jobs]
            results = [f.result() for f in futs]
    finally:
        for f in factories.values():
            f.close()
    for (backend, task), ro in zip(jobs, results):
        assert ro.runtime == "openclaw"
        assert ro.failure_class == "ok", (backend, task.task_id, ro.error)
        assert ro.score == 1.0, (backend, task.task_id, ro.verification)
        # the trajectory comes from the proxy log: OpenClaw's own system prompt and tools, our tool calls
        assert ro.proxy_log and os.path.exists(ro.proxy_log)
        entries = read_log(ro.proxy_log)
        assert entries and all(e["status"] == 200 for e in entries)
        session = rebuild_sessions(entries)
        assert len(session) == 1
        (traj,) = session.values()
        assert traj["messages"] == ro.messages
        # OpenClaw's own requests extend the answered chain (its rewritten call ids and arguments included)
        assert traj["divergence"] == [] and traj["side_requests"] == 0 and traj["refused"] == 0
        assert not any(e.get("kind") == "refused" for e in read_log(ro.proxy_log))
        calls = [tc["id"] for m in ro.messages for tc in m.get("tool_calls") or []]
        assert [m["tool_call_id"] for m in ro.messages if m["role"] == "tool"] == calls  # the proxy's own ids
        roles = [m["role"] for m in ro.messages]
        assert roles[0] == "system" and "OpenClaw" in ro.messages[0]["content"]
        assert roles[-1] == "assistant" and ro.messages[-1]["content"]
        first_user = next(m for m in ro.messages if m["role"] == "user")
        assert task.instruction in text_of(first_user["content"])
        assert ro.tool_calls == len(task.reference) and roles.count("tool") == len(task.reference)
        assert ro.turns == len(task.reference) + 1
        assert not any("OPENCLAW_INTERNAL_CONTEXT" in json.dumps(m) for m in ro.messages[1:])
        names = {t["function"]["name"] for t in ro.tools}
        assert {"read", "write", "edit", "exec"} <= names and "web_search" not in names
        edits = [tc for m in ro.messages for tc in m.get("tool_calls") or [] if tc["function"]["name"] == "edit"]
        for tc in edits:  # the oracle adapted our edit{oldText,newText} to OpenClaw's edit{edits:[…]}
            assert "edits" in json.loads(tc["function"]["arguments"])
        assert ro.workspace_diff and all(not d["path"].startswith(".openclaw") for d in ro.workspace_diff)


def test_openclaw_factory_derivation():
    from clawgym.agent.openclaw import SANDBOX_OPENCLAW_DIR, SANDBOX_SOCK_DIR, has_openclaw_binds, openclaw_dir
    from clawgym.agent.runtimes import get_runtime

    ok, why = _available("bwrap")
    if not ok:
        pytest.skip(f"bwrap unavailable: {why}")
    plain = get_factory("bwrap")
    assert not has_openclaw_binds(plain.config)
    rt = get_runtime("openclaw")
    _openclaw_factory = rt.prepare
    sib = _openclaw_factory(plain, {"tools_dir": "/nonexistent"})
    assert sib is not plain and sib is _openclaw_factory(plain, None)
    binds = dict((inside, host) for host, inside in sib.config.extra_ro_binds)
    assert binds[SANDBOX_OPENCLAW_DIR] == openclaw_dir() and SANDBOX_SOCK_DIR in binds
    assert sib.config.memory_mb >= 3072
    from clawgym.agent.openclaw import proxy_sock_dir

    assert os.stat(proxy_sock_dir()).st_mode & 0o777 == 0o311  # sandboxes cannot list the rollouts' sockets
    configured = get_factory("bwrap", openclaw_sandbox_config())
    assert _openclaw_factory(configured, None) is configured
    assert _openclaw_factory(get_factory("local"), None).name == "local"
    rt.close()  # the runtime owns its sibling factories

"""Agent runtimes: what runs the agent phase of a rollout, behind one small protocol (compare Harbor's agents and
inspect_ai's solvers), registered by name like the sandbox backends (clawgym.sandbox.registry).

    @agent_runtime("mine")
    class MyRuntime(BaseRuntime):
        def run(self, task, endpoint, sandbox, limits, settings):
            return run_builtin(task, endpoint, sandbox, limits), TOOL_SCHEMAS

    with get_runtime("mine") as rt:          # one instance per suite: it owns what prepare() made
        run_rollout(task, "oracle", factory, RolloutSettings(runtime="mine"), runtime=rt)

A runtime instance:
- ``prepare(factory, options)``: the sandbox factory its agent phase runs in (builtin: `factory` itself; openclaw:
  a sibling factory of the same backend with the OpenClaw binds, made once per factory and kept by the instance);
- ``run(task, endpoint, sandbox, limits, settings)``: the agent phase -> (LoopResult, the tool schemas offered);
- ``close()``: releases what it made (openclaw: closes its sibling factories). Instances are context managers.

Built in: ``builtin`` (clawgym.agent.loop.run_builtin, the OpenAI tool loop) and ``openclaw``
(clawgym.agent.openclaw.run_openclaw behind the recording proxy; its module is imported only when it runs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

from clawgym.agent.loop import Limits, LoopResult, run_builtin
from clawgym.agent.policies import Endpoint
from clawgym.agent.tools import TOOL_SCHEMAS
from clawgym.sandbox.base import Sandbox, SandboxFactory
from clawgym.tasks.model import Task

if TYPE_CHECKING:  # clawgym.agent.settings imports this module (runtime_names)
    from clawgym.agent.settings import RolloutSettings


@runtime_checkable
class AgentRuntime(Protocol):
    """What runs the agent phase of a rollout (see the module's docstring)."""

    name: str

    def prepare(self, factory: SandboxFactory, options: dict[str, Any] | None) -> SandboxFactory:
        """The sandbox factory the agent phase runs in, given the rollout's `factory` and the runtime's `options`
        (``RolloutSettings.runtime_options``): `factory` itself, or one the instance made (and closes)."""
        ...

    def run(self, task: Task, endpoint: Endpoint, sandbox: Sandbox, limits: Limits,
            settings: RolloutSettings) -> tuple[LoopResult, list[dict[str, Any]]]:
        """The agent phase of `task` in `sandbox` (opened from prepare()'s factory with the task's files) against
        the live policy `endpoint`, within `limits` (= ``settings.limits``); `settings` are the whole rollout's
        (its ``retry`` policy and ``runtime_options`` among them). Returns (the LoopResult: transcript, usage,
        failure class, the tool schemas the agent was offered). Infra and agent failures are in the LoopResult;
        a SandboxError may propagate (the rollout classes it as infra)."""
        ...

    def close(self) -> None:
        """Release what prepare() made (idempotent)."""
        ...

    def __enter__(self) -> AgentRuntime:
        """The runtime itself: ``with get_runtime(name) as rt`` closes it at the end."""
        ...

    def __exit__(self, *exc: object) -> None:
        """close()."""
        ...


_B = TypeVar("_B", bound="BaseRuntime")


class BaseRuntime:
    """Defaults of the protocol: the agent phase runs in `factory` itself, nothing to close."""

    name: str = ""

    def prepare(self, factory: SandboxFactory, options: dict[str, Any] | None) -> SandboxFactory:
        return factory

    def run(self, task: Task, endpoint: Endpoint, sandbox: Sandbox, limits: Limits,
            settings: RolloutSettings) -> tuple[LoopResult, list[dict[str, Any]]]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self: _B) -> _B:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_registry: dict[str, type] = {}
_lock = threading.Lock()

R = TypeVar("R", bound=type)


def agent_runtime(name: str) -> Callable[[R], R]:
    """Class decorator: register an AgentRuntime class as runtime `name` (get_runtime(name) makes an instance)."""

    def deco(cls: R) -> R:
        methods = ("prepare", "run", "close", "__enter__", "__exit__")
        if not isinstance(cls, type) or not all(callable(getattr(cls, m, None)) for m in methods):
            raise TypeError(f"agent runtime {name!r}: {cls!r} is not a class with prepare, run, close and the context "
                            "manager methods (BaseRuntime has them)")
        cast(Any, cls).name = name
        with _lock:
            _registry[name] = cls
        return cls

    return deco


def runtime_names() -> tuple[str, ...]:
    """The registered runtimes' names, in registration order (the built-in ones first)."""
    return tuple(_registry)


def get_runtime(name: str) -> AgentRuntime:
    """A new instance of the runtime registered as `name` (the caller closes it: ``with get_runtime(name) as rt``);
    ValueError naming `name` and the registered runtimes otherwise."""
    cls = _registry.get(name)
    if cls is None:
        raise ValueError(f"unknown agent runtime {name!r}: registered runtimes are {', '.join(_registry)}")
    return cls()


@agent_runtime("builtin")
class BuiltinRuntime(BaseRuntime):
    """The OpenAI tool loop (clawgym.agent.loop.run_builtin) with our tool surface, in `factory`'s sandboxes."""

    def run(self, task: Task, endpoint: Endpoint, sandbox: Sandbox, limits: Limits,
            settings: RolloutSettings) -> tuple[LoopResult, list[dict[str, Any]]]:
        return run_builtin(task, endpoint, sandbox, limits, retry=settings.retry), TOOL_SCHEMAS


@agent_runtime("openclaw")
class OpenClawRuntime(BaseRuntime):
    """OpenClaw behind the recording proxy (clawgym.agent.openclaw.run_openclaw, keywords from
    ``settings.runtime_options``). Its sandboxes need the OpenClaw binds: a factory without them gets a sibling
    factory (same backend, config plus the binds), made once per factory and closed by close()."""

    def __init__(self) -> None:
        self._siblings: dict[int, tuple[SandboxFactory, SandboxFactory]] = {}
        self._lock = threading.Lock()

    def prepare(self, factory: SandboxFactory, options: dict[str, Any] | None) -> SandboxFactory:
        from clawgym.agent.openclaw import has_openclaw_binds, openclaw_sandbox_config

        if getattr(factory, "name", "") == "local" or has_openclaw_binds(factory.config):
            return factory
        with self._lock:
            hit = self._siblings.get(id(factory))
            if hit is not None and hit[0] is factory:
                return hit[1]
            from clawgym.sandbox import get_factory

            o = options or {}
            cfg = openclaw_sandbox_config(factory.config, o.get("install_dir") or o.get("tools_dir"),
                                          o.get("sock_dir"))
            sib = get_factory(factory.name, cfg)
            self._siblings[id(factory)] = (factory, sib)
            return sib

    def run(self, task: Task, endpoint: Endpoint, sandbox: Sandbox, limits: Limits,
            settings: RolloutSettings) -> tuple[LoopResult, list[dict[str, Any]]]:
        from clawgym.agent.openclaw import run_openclaw

        lr, tools = run_openclaw(task, endpoint, sandbox, limits, **(settings.runtime_options or {}))
        return lr, tools or []

    def close(self) -> None:
        with self._lock:
            sibs = [sib for _, sib in self._siblings.values()]
            self._siblings.clear()
        for sib in sibs:
            try:
                sib.close()
            except Exception:
                pass


if TYPE_CHECKING:  # mypy checks that the registered runtimes keep the protocol's signatures
    _builtin: AgentRuntime = BuiltinRuntime()
    _openclaw: AgentRuntime = OpenClawRuntime()


__all__ = ["AgentRuntime", "BaseRuntime", "BuiltinRuntime", "OpenClawRuntime", "agent_runtime", "get_runtime",
           "runtime_names"]

"""One rollout settings object (TRL-config style): everything that decides how a rollout runs, besides the
task, the policy, the sandboxes and the judge.

    settings = RolloutSettings(limits=Limits(max_turns=10), attempts=2, runtime="openclaw",
                               runtime_options={"install_dir": "/opt/openclaw"})
    run_rollout(task, "oracle", factory, settings, judge=judge)
    run_suite(tasks, "oracle", factory, model="oracle", suite="procedural", settings=settings)

`TrajectoriesConfig` and `BenchScoresConfig` (clawgym_assets) build it from the fields they share
(`clawgym_assets.defs.rollouts.config.RolloutConfig`, declared once); the CLI, benchmarks and tests pass it as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from clawgym.agent.loop import Limits
from clawgym.agent.policies import RetryPolicy
from clawgym.agent.runtimes import runtime_names

Runtime = str  # the name of a registered agent runtime (clawgym.agent.runtimes: builtin, openclaw, ...)


def __getattr__(name: str) -> Any:
    if name == "RUNTIMES":  # the registered runtimes' names, as they are now (runtime_names())
        return runtime_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class RolloutSettings:
    """How one rollout runs. Defaults are run_rollout's historical defaults (Limits(), 3 tries, builtin)."""

    limits: Limits = field(default_factory=Limits, metadata={
        "help": "budgets of one rollout: turns, tokens, wall time, record sizes (clawgym.agent.loop.Limits)"})
    attempts: int = field(default=3, metadata={
        "help": "rollout-level tries of an infra failure (a persisting one is stored with score None)"})
    retry_wait_s: float = field(default=2.0, metadata={"help": "wait before rollout-level try i+1: retry_wait_s * i"})
    retry: RetryPolicy | None = field(default=None, metadata={
        "help": "per-request retries of the chat client (None = the endpoint kind's default, RetryPolicy.for_kind)"})
    runtime: Runtime = field(default="builtin", metadata={
        "help": "a registered agent runtime (clawgym.agent.runtimes): builtin (the OpenAI tool loop) | openclaw "
                "(OpenClaw behind the recording proxy) | one registered with @agent_runtime"})
    runtime_options: dict[str, Any] | None = field(default=None, metadata={
        "help": "options of the runtime: openclaw's install_dir, timeout_s, sock_dir, log_dir "
                "(clawgym.agent.openclaw.run_openclaw keywords)"})

    def __post_init__(self) -> None:
        if self.limits is None:  # "no limits given" = the defaults, as run_rollout always read it
            object.__setattr__(self, "limits", Limits())
        if self.runtime not in runtime_names():
            raise ValueError(f"RolloutSettings.runtime: {self.runtime!r} is not one of {', '.join(runtime_names())}")

    def replace(self, **changes: Any) -> RolloutSettings:
        """A copy with `changes` (dataclasses.replace)."""
        return replace(self, **changes)


__all__ = ["RolloutSettings", "Runtime", "RUNTIMES"]  # noqa: F822 (RUNTIMES: module __getattr__)

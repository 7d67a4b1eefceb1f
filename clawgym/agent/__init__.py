"""clawgym.agent: the OpenClaw tool surface, policies, the builtin loop, the recording proxy and the
OpenClaw runtime (agent runtimes are registered by name: clawgym.agent.runtimes).

    from clawgym.agent import run_rollout, Limits, RolloutSettings
    ro = run_rollout(task, "oracle", get_factory("bwrap"))              # builtin loop
    ro = run_rollout(task, "oracle", get_factory("bwrap", openclaw_sandbox_config()),
                     RolloutSettings(runtime="openclaw", limits=Limits(max_turns=10)))
"""

from clawgym.agent.loop import Limits, LoopResult, run_builtin  # noqa: F401
from clawgym.agent.policies import (  # noqa: F401
    AgentRequestError,
    ChatClient,
    Endpoint,
    InfraError,
    PolicySpec,
    RetryPolicy,
    get_policy,
    open_endpoint,
    policy_registry,
)
from clawgym.agent.rollout import Rollout, run_rollout, run_rollouts, workspace_diff  # noqa: F401
from clawgym.agent.runtimes import AgentRuntime, BaseRuntime, agent_runtime, get_runtime, runtime_names  # noqa: F401
from clawgym.agent.secrets import redact, redact_obj  # noqa: F401
from clawgym.agent.settings import RolloutSettings  # noqa: F401
from clawgym.agent.tools import TOOL_SCHEMAS, ToolResult, apply_reference, execute_tool  # noqa: F401


def openclaw_sandbox_config(config=None):
    """SandboxConfig for runtime="openclaw" (see clawgym.agent.openclaw)."""
    from clawgym.agent.openclaw import openclaw_sandbox_config as _f

    return _f(config)

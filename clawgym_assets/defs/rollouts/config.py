"""The rollout settings users can change on a run, declared once: `trajectories` and `bench_scores` configs
inherit them (the run config stays flat: `config: {max_turns: 10, attempts: 1}`) and hand the library one
`clawgym.agent.settings.RolloutSettings` built from them and the OpenClaw resource."""

import dagster as dg

from clawgym_assets.defs.rollouts.resources import OpenClawResource


class RolloutConfig(dg.Config):
    """How each rollout of the run goes: limits and retries (the runtime comes from the openclaw resource)."""

    max_turns: int = 30
    max_wall_s: float = 600.0
    max_completion_tokens: int = 1024  # per model request
    attempts: int = 3  # rollout-level tries of an infra failure within this run
    retry_wait_s: float = 2.0  # wait before rollout-level try i+1: retry_wait_s * i
    request_attempts: int = 0  # tries per model request (0 = the endpoint kind's default RetryPolicy)
    request_backoff_s: float = 1.0

    def rollout_settings(self, openclaw: OpenClawResource):
        """The library's RolloutSettings: these fields, the runtime and its options from `openclaw`."""
        from clawgym.agent.loop import Limits
        from clawgym.agent.policies import RetryPolicy
        from clawgym.agent.settings import RolloutSettings

        return RolloutSettings(
            limits=Limits(max_turns=self.max_turns, max_wall_s=self.max_wall_s,
                          max_completion_tokens=self.max_completion_tokens),
            attempts=self.attempts, retry_wait_s=self.retry_wait_s,
            retry=RetryPolicy(attempts=self.request_attempts, backoff_s=self.request_backoff_s)
            if self.request_attempts > 0 else None,
            runtime=openclaw.runtime(), runtime_options=openclaw.opts())

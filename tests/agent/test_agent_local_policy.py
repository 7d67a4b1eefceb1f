"""The embedded model as a policy: kind="local" starts the engine (vLLM, clawgym.serve.ModelServer)
around the rollout, health-checks it and stops it. Needs the prepared base model folder."""

import os
from pathlib import Path

import pytest

from clawgym.agent import Limits, PolicySpec, RolloutSettings, run_rollout
from clawgym.agent.demo import demo_tasks
from clawgym.sandbox import get_factory

pytestmark = [pytest.mark.model, pytest.mark.slow]

MODEL = Path(os.environ.get("CLAWGYM_BASE_MODEL_DIR",
                            Path(__file__).resolve().parents[2] / "data" / "models" / "smollm2-135m-instruct"))


def test_local_model_policy_rollout():
    if not (MODEL / "config.json").exists():  # the real embedded model, prepared once (idempotent, ~1 min)
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(MODEL)
    spec = PolicySpec(name="smollm2-base", kind="local", model=str(MODEL),
                      extra={"model_path": str(MODEL)})
    f = get_factory("local")
    ro = run_rollout(demo_tasks()[1], spec, f,
                     settings=RolloutSettings(limits=Limits(max_turns=1, max_completion_tokens=16), attempts=1))
    f.close()
    # the base model answers in prose: a real, scored result (not infra), cut by our limits
    assert ro.failure_class in ("ok", "limit", "agent_error"), ro.error
    assert ro.score is not None and ro.turns == 1 and ro.completion_tokens > 0
    assert ro.messages[-1]["role"] == "assistant"

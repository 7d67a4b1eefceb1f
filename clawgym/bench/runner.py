"""Running a suite for one model: policy resolution, rollouts with repeats, per-task result rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

_FORBIDDEN = ("/",)


def resolve_policy(name: str, *, endpoints_json: str | None = None, checkpoints_dir: str | Path | None = None,
                   base_model_dir: str | Path | None = None, base_policy_name: str = "smollm2-base",
                   extra: dict | None = None):
    """A PolicySpec for a model name: a registry entry (oracle, noop, $CLAWGYM_ENDPOINTS / endpoints_json),
    the embedded base model (`base_policy_name`), or a checkpoint folder <checkpoints_dir>/<name>."""
    from clawgym.agent.policies import PolicySpec, policy_registry

    reg = policy_registry(endpoints_json)
    if name in reg:
        return reg[name]
    extra = dict(extra or {})
    if name == base_policy_name and base_model_dir:
        return PolicySpec(name=name, kind="local", model=str(base_model_dir),
                          extra={"model_path": str(base_model_dir), **extra})
    if checkpoints_dir:
        p = Path(checkpoints_dir) / name
        if p.is_dir():
            return PolicySpec(name=name, kind="local", model=str(p), extra={"model_path": str(p), **extra})
    raise KeyError(f"unknown model/policy {name!r}: not in the endpoint registry ({sorted(reg)}), not "
                   f"{base_policy_name!r}, and no folder {checkpoints_dir}/{name}")


def result_row(ro, *, model: str, suite: str, repeat: int, pass_threshold: float = 1.0, run_id: str = "") -> dict:
    """One bench_results row from a Rollout, traced to its trajectory (rollout_id, messages) and verification."""
    score = ro.score
    return {
        "model": model, "suite": suite, "task_id": ro.task_id, "category": ro.category, "repeat": repeat,
        "score": None if score is None else float(score),
        "passed": score is not None and score >= pass_threshold - 1e-9,
        "failure_class": ro.failure_class, "rollout_id": ro.rollout_id,
        "verification_json": ro.verification_json(),
        "messages_json": json.dumps(ro.messages, default=str, ensure_ascii=False), "run_id": run_id,
    }


def run_suite(tasks: Iterable, policy, factory, *, model: str, suite: str, settings=None, judge=None,
              repeats: int = 1, run_id: str = "", pass_threshold: float = 1.0,
              log: Callable[[str], Any] | None = None, workers: int = 1) -> list[dict]:
    """Roll out every task `repeats` times with one live endpoint, each as `settings` say
    (clawgym.agent.settings.RolloutSettings: limits, runtime, retries); returns bench_results rows (in task, repeat
    order). Infra failures (score None after `settings.attempts` rollout-level tries) keep score None and
    failure_class="infra"; "unjudged" rollouts keep score None too: neither is ever scored as 0.
    `workers`: rollouts in flight at once (a local model server batches their requests: continuous batching)."""
    from concurrent.futures import ThreadPoolExecutor

    from clawgym.agent.policies import get_policy, open_endpoint
    from clawgym.agent.rollout import RolloutSettings, run_rollout
    from clawgym.agent.runtimes import get_runtime

    tasks = list(tasks)
    spec = get_policy(policy)
    jobs = [(t, r) for t in tasks for r in range(repeats)]
    settings = settings or RolloutSettings()
    with open_endpoint(spec, tasks) as ep, \
            get_runtime(settings.runtime) as rt:  # one for the suite
        def one(job):
            t, r = job
            ro = run_rollout(t, ep, factory, settings, judge=judge, runtime=rt)
            ro.policy = model
            row = result_row(ro, model=model, suite=suite, repeat=r, pass_threshold=pass_threshold, run_id=run_id)
            if log:
                log(f"{model} {suite} {t.task_id} r{r}: score={ro.score} {ro.failure_class}"
                    + (f" ({ro.error[:200]})" if ro.error and ro.failure_class != "ok" else ""))
            return row

        if workers <= 1:
            return [one(j) for j in jobs]
        with ThreadPoolExecutor(workers) as ex:
            return list(ex.map(one, jobs))

"""The LLM route's plan from a run's config: which endpoints play generator / reviewer / auditor (a local model is
served for the run), the taxonomy, skills and caches -> clawgym.synth.pipeline.LLMPlan.

    with contextlib.ExitStack() as servers:
        plan = llm_plan(config, endpoints.policy, personas, skills, cache_dir=..., gate_cache_dir=..., stack=servers)

`config` is anything with the LLM route's fields (clawgym_assets.defs.synthesis.assets.LLMRouteConfig: generator,
reviewer, auditor, n_llm, skill_fraction, categories, max_repairs, llm_workers, max_in_flight, llm_hacker, max_tokens);
`lookup(name)` gives the PolicySpec registered as `name` (KeyError otherwise). A bad value raises
:class:`PlanError` whose message names the field: ``<asset>.config.<field>: ...``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class PlanError(ValueError):
    """A bad value in the LLM route's config; the message names it (``<asset>.config.<field>: ...``)."""


def client_config(lookup: Callable[[str], Any], name: str, role: str, asset: str = "synthetic_tasks",
                  stack=None, max_tokens: int = 0) -> dict:
    """llm_route.ClientConfig fields of the endpoint registered as `name` (PlanError naming it otherwise). A local
    model or checkpoint (kind "local") is served for the run: its server is entered on `stack` (one per model,
    shared by the roles, stopped when the stack closes, also on failure: clawgym.agent.servers.shared_endpoint)."""
    try:
        spec = lookup(name)
    except KeyError as e:
        raise PlanError(f"{asset}.config.{role}: {e.args[0] if e.args else e}") from None
    if spec.kind == "local":
        from clawgym.agent.servers import shared_endpoint

        if stack is None:
            raise PlanError(f"{asset}.config.{role}: endpoint {name!r} is a local model (kind 'local'): it is "
                            "served only inside a run")
        from clawgym.synth.llm_route import TASK_SCHEMA, bounded_schema

        try:
            bounded_schema(TASK_SCHEMA, max_tokens or spec.max_tokens, "task_spec")
        except ValueError as e:
            raise PlanError(f"{asset}.config.max_tokens: {e}") from None
        ep = stack.enter_context(shared_endpoint(spec))
        # a local server on a starved CPU can take minutes per request: wait long, never re-send (RetryPolicy)
        # a small local model gets the gate's schema bounded to its budget (llm_route.bounded_schema): a reply the
        # constrained decoder can always finish within max_tokens
        return {"base_url": ep.base_url, "model": ep.model, "api_key_env": ep.api_key_env, "timeout_s": 3600.0,
                "max_retries": 0, "max_tokens": max_tokens or spec.max_tokens, "temperature": spec.temperature,
                "bounded_schema": True}
    if spec.kind != "openai" or not spec.base_url:
        raise PlanError(f"{asset}.config.{role}: endpoint {name!r} is not an OpenAI-compatible endpoint "
                        f"with a base_url, nor a local model (kind {spec.kind!r})")
    cfg = {"base_url": spec.base_url, "model": spec.model or name, "extra": dict(spec.extra or {})}
    if max_tokens:
        cfg["max_tokens"] = max_tokens
    if spec.api_key_env:
        cfg["api_key_env"] = spec.api_key_env
    return cfg


def llm_plan(config, lookup: Callable[[str], Any], personas: list, skills: Iterable[dict], *, cache_dir: str,
             gate_cache_dir: str, asset: str = "synthetic_tasks", stack=None):
    """The pipeline's LLMPlan for `config` (PlanError naming the bad field); local model endpoints are served on
    `stack` (an ExitStack the caller closes after synthesis). `skills`: skill dicts (the skills table's
    skill_json); those not usable offline are left out."""
    from clawgym.synth.pipeline import LLMPlan
    from clawgym.synth.taxonomy import SUBCATEGORIES

    unknown = sorted(set(config.categories) - set(SUBCATEGORIES))
    if unknown:
        raise PlanError(f"{asset}.config.categories: unknown {unknown}; known: {sorted(SUBCATEGORIES)}")
    if config.max_tokens < 0:
        raise PlanError(f"{asset}.config.max_tokens: must be 0 (the endpoint's default) or positive, got "
                        f"{config.max_tokens}")

    def client(name: str, role: str) -> dict:
        return {**client_config(lookup, name, role, asset, stack, config.max_tokens),
                "max_in_flight": config.max_in_flight}

    gen = client(config.generator, "generator")
    rev = client(config.reviewer, "reviewer") if config.reviewer else None
    aud = client(config.auditor, "auditor") if config.auditor else rev
    sks = [s for s in skills if s.get("usable_offline", True)]
    return LLMPlan(generator=gen, reviewer=rev, auditor=aud, n=config.n_llm, personas=personas, skills=sks,
                   skill_fraction=config.skill_fraction, max_repairs=config.max_repairs,
                   taxonomy={c: SUBCATEGORIES[c] for c in (config.categories or SUBCATEGORIES)},
                   workers=config.llm_workers or None, cache_dir=cache_dir,
                   hacker=config.llm_hacker, gate_cache_dir=gate_cache_dir)


__all__ = ["PlanError", "client_config", "llm_plan"]

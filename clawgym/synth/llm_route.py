"""LLM route of task synthesis (ClawGym-SynData): persona-driven (top-down) or skill-grounded (bottom-up)
generation through any OpenAI-compatible endpoint, with JSON-schema structured output, then the gates:

1. ``schema``   - the reply parses and builds a valid `Task`;
2. ``compile``  - the verifier code compiles and defines ``grade(transcript, workspace_path)`` (host side);
3. the sandbox gates every procedural task meets too (clawgym.synth.gates, batched across concurrent candidates
   by clawgym.synth.llm_gates.GateBatcher): ``noop`` (untouched workspace scores exactly 0), ``scaffold``
   (placeholder outputs score 0), ``oracle`` (the spec's reference outputs, when given, score 1.0),
   ``determinism`` (twice), ``mutation`` (corrupted reference outputs lose score), ``keys`` (same sub-checks)
   and ``hacker`` (placeholder / echo / copied inputs / empty outputs score below the bound);
4. ``review``   - an LLM reviewer returns {pass, coverage_pass, issues, missing_task_requirements,
                  weak_or_incorrect_checks, repair_guidance};
   gates 1-4 failing trigger up to ``max_repairs`` repair rounds (the generator sees the failure);
5. ``audit``    - a deterministic answer-leak check (a reference output appears verbatim in the
                  instruction or workspace) plus an LLM audit for factual errors / leaks. No repair.
A sandbox failure in the gates is ``infra`` (not repaired, not cached: a re-run tries again).

Public API: ``generate_llm_tasks(personas, skills, taxonomy, client_cfg, n, route, max_repairs, factory, ...)``.
Generator, reviewer and auditor may be different endpoints; requests to one server overlap at most
``max_in_flight`` (default 32); the openai client retries 429 / 5xx / connection errors ``max_retries`` times with
exponential backoff. With a ``cache_dir`` every response is stored content-addressed (clawgym.synth.llm_cache)
and every gate verdict too: a re-run makes no request and re-gates nothing it did before.
``return_stats=True`` adds a stats dict (requests, cache hits/misses, tokens and cost per accepted task).
Secrets: the API key is read from the env var named by ``client_cfg["api_key_env"]`` (never logged).

The parts: clawgym.synth.llm_prompts (reply schemas, bounded schemas, prompts), clawgym.synth.llm_client
(endpoints, runtime, the structured chat request), clawgym.synth.llm_spec (reply -> Task, compile gate, scaffold,
leak check); their public names are importable from here too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections.abc import Iterable
from typing import Any, cast

from clawgym.synth.llm_cache import ResponseCache
from clawgym.synth.llm_client import ClientConfig, LLMReplyError, _chat_json, _Runtime
from clawgym.synth.llm_prompts import (  # noqa: F401  (re-exported: the route's public names stay importable here)
    AUDIT_SCHEMA,
    BOUNDS,
    REVIEW_SCHEMA,
    RUBRIC_KEYS,
    SYSTEM_AUDIT,
    SYSTEM_GEN,
    SYSTEM_REVIEW,
    TASK_SCHEMA,
    _gen_prompt,
    _repair_prompt,
    bounded_schema,
)
from clawgym.synth.llm_spec import (  # noqa: F401
    PLACEHOLDER,
    _task_view,
    compile_gate,
    leak_check,
    scaffold_files,
    spec_to_task,
)
from clawgym.tasks.model import Route, Task

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------
# seeds: personas, skills, taxonomy
# ----------------------------------------------------------------------------------------------


def _as_dict(x: Any) -> dict[str, Any]:
    if isinstance(x, dict):
        return x
    if hasattr(x, "model_dump"):
        return x.model_dump()
    if hasattr(x, "__dataclass_fields__"):
        return {k: getattr(x, k) for k in x.__dataclass_fields__}
    return {"description": str(x)}


def _ident(d: dict[str, Any], *keys: str) -> str:
    for k in keys:
        if d.get(k):
            return str(d[k])
    return hashlib.sha1(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _taxonomy_slots(taxonomy: Any) -> list[tuple[str, str]]:
    """Accepts {category: [subcategory, ...]}, [(category, subcategory)], or [{category, subcategory}]."""
    slots: list[tuple[str, str]] = []
    if not taxonomy:
        from clawgym.synth.taxonomy import SUBCATEGORIES

        taxonomy = SUBCATEGORIES
    if isinstance(taxonomy, dict):
        for cat, subs in taxonomy.items():
            for s in (subs or [""]):
                slots.append((cat, s if isinstance(s, str) else _ident(_as_dict(s), "name", "subcategory")))
        return slots
    for item in taxonomy:
        if isinstance(item, (tuple, list)):
            slots.append((str(item[0]), str(item[1]) if len(item) > 1 else ""))
        else:
            d = _as_dict(item)
            slots.append((str(d.get("category", "")), str(d.get("subcategory", ""))))
    return slots


def _persona_text(p: dict[str, Any]) -> str:
    keep = {k: v for k, v in p.items() if k not in ("embedding",) and v not in (None, "", [], {})}
    return json.dumps(keep, ensure_ascii=False, default=str)[:2000]


def _skill_text(s: dict[str, Any]) -> str:
    name = s.get("name", "")
    desc = s.get("description", "")
    body = str(s.get("body") or s.get("content") or s.get("markdown") or "")[:2500]
    extra = {k: s[k] for k in ("tools", "operations") if s.get(k)}
    return f"name: {name}\ndescription: {desc}\n{json.dumps(extra, default=str) if extra else ''}\n{body}"


# ----------------------------------------------------------------------------------------------
# the route
# ----------------------------------------------------------------------------------------------


def _route_runtime(client_cfg: ClientConfig | dict[str, Any] | None, reviewer: ClientConfig | dict[str, Any] | None,
                   auditor: ClientConfig | dict[str, Any] | None, cache_dir: str | os.PathLike[str] | None,
                   max_in_flight: int | None) -> tuple[ClientConfig, Any, _Runtime]:
    """(the generator's config, the response cache's folder, the route's runtime): the reviewer defaults to the
    generator's endpoint, the auditor to the reviewer's, the cache folder to the generator's ``cache_dir``."""
    cfg = ClientConfig.coerce(client_cfg)
    rev = ClientConfig.coerce(reviewer) if reviewer is not None else None
    aud = ClientConfig.coerce(auditor) if auditor is not None else rev
    cdir = cache_dir if cache_dir is not None else cfg.cache_dir
    # a None role is the generator's endpoint (_Runtime reads it so; its annotation says ClientConfig only)
    roles = cast("dict[str, ClientConfig]", {"generator": cfg, "reviewer": rev, "auditor": aud})
    rt = _Runtime(roles, ResponseCache(cdir) if cdir else None, max_in_flight)
    return cfg, cdir, rt


def _route_stats(rt: _Runtime, cfg: ClientConfig, accepted: list[Task], rejected: list[dict[str, Any]],
                 n_candidates: int, gates, wall_s: float) -> dict[str, Any]:
    """The stats of a run of the route (generate_llm_tasks' `return_stats`)."""
    rt.stats.peak_in_flight = rt.peak
    pp = cfg.price_per_1k_prompt if cfg.price_per_1k_prompt is not None else cfg.price_per_1k_tokens
    pc = cfg.price_per_1k_completion if cfg.price_per_1k_completion is not None else cfg.price_per_1k_tokens
    stats = rt.stats.summary(len(accepted), n_candidates, price_per_1k_prompt=pp, price_per_1k_completion=pc,
                             wall_s=wall_s)
    stats["max_in_flight"] = rt.limiters[0].limit
    stats["servers"] = len(rt.limiters)
    stats["gates"] = dict(gates.stats)
    stats["rejected_by_reason"] = {}
    for r in rejected:
        stats["rejected_by_reason"][r["reason"]] = stats["rejected_by_reason"].get(r["reason"], 0) + 1
    return stats


def generate_llm_tasks(
    personas: Iterable[Any],
    skills: Iterable[Any],
    taxonomy: Any,
    client_cfg: ClientConfig | dict[str, Any] | None,
    n: int,
    route: str = "persona",
    max_repairs: int = 3,
    factory=None,
    *,
    seed: int = 0,
    reviewer: ClientConfig | dict[str, Any] | None = None,
    auditor: ClientConfig | dict[str, Any] | None = None,
    workers: int | None = None,
    max_in_flight: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    hacker: str = "reject",
    indices: Iterable[int] | None = None,
    gate_cache_dir: str | os.PathLike[str] | None = None,
    gate_batch: int = 64,
    gate_workers: int = 2,
    return_stats: bool = False,
) -> tuple[list[Task], list[dict[str, Any]]] | tuple[list[Task], list[dict[str, Any]], dict[str, Any]]:
    """Generate `n` candidate tasks through the LLM route and gate them.

    Returns (accepted tasks, rejected records), plus a stats dict when `return_stats`. Every rejected record
    has ``reason`` (the gate: llm_error|schema|compile|noop|scaffold|oracle|determinism|mutation|keys|hacker|
    infra|review|audit), ``detail``, ``index``, ``rounds``.
    `client_cfg` is the generator's endpoint; `reviewer` (default: the generator's, with its `review_model`)
    and `auditor` (default: the reviewer's) may be other endpoints. Requests to one server (base_url) overlap
    at most `max_in_flight` (default: that endpoint's ``max_in_flight``, 32); the openai client retries
    429 / 5xx / connection errors with exponential backoff.
    `factory` is the SandboxFactory the gates run in (default: clawgym.sandbox.get_factory("auto")); the gates
    of concurrent candidates are batched (clawgym.synth.llm_gates.GateBatcher: `gate_batch`, `gate_workers`),
    `hacker` is the hacker gate's mode ("reject": a hackable verifier goes back to the generator for repair).
    Candidates run in `workers` threads (default: twice the requests all servers may have in flight).
    `cache_dir` (default ``client_cfg.cache_dir``) holds the content-addressed response cache and
    `gate_cache_dir` (default ``<cache_dir>/gates``) the gate verdicts: a re-run makes no request it made before
    and re-gates nothing.
    Stats: requests, cache_hits/misses, prompt/completion tokens (total and per accepted task), cost and
    cost per accepted task when a price per 1K tokens is configured, peak_in_flight (per server), wall_s,
    candidates_per_s, gates (gated, batches, cache_hits).
    Results are in candidate order and deterministic in `seed` for a deterministic endpoint. `indices` (default
    range(n)) are the candidates to make: candidate i is the same request whichever run makes it, so shards of one
    plan (indices i % k == shard) fill the same caches a whole run reads.
    """
    import time

    from clawgym.synth.gates import _check_hacker
    from clawgym.synth.llm_gates import GateBatcher

    if route not in ("persona", "skill"):
        raise ValueError(f"route must be 'persona' or 'skill', got {route!r}")
    _check_hacker(hacker)
    cfg, cdir, rt = _route_runtime(client_cfg, reviewer, auditor, cache_dir, max_in_flight)
    if workers is None:
        workers = min(256, 2 * rt.capacity)
    own_factory = None
    if factory is None:
        from clawgym.sandbox import get_factory

        factory = own_factory = get_factory("auto")
    t0 = time.perf_counter()
    try:
        gcache = gate_cache_dir or (os.path.join(cdir, "gates") if cdir else None)  # a PathLike: GateCache takes it
        with GateBatcher(factory, hacker=hacker, max_batch=gate_batch, gate_workers=gate_workers,
                         cache_dir=cast("str | None", gcache)) as gates:
            idx = list(range(n)) if indices is None else [int(i) for i in indices]
            accepted, rejected = _generate(personas, skills, taxonomy, rt, idx, route, max_repairs, gates, seed,
                                           workers)
    finally:
        if own_factory is not None:
            own_factory.close()
    if not return_stats:
        return accepted, rejected
    return accepted, rejected, _route_stats(rt, cfg, accepted, rejected, len(idx), gates,
                                            time.perf_counter() - t0)


def _generate(personas, skills, taxonomy, rt: _Runtime, indices: list[int], route: str, max_repairs: int,
              gates, seed: int, workers: int = 1) -> tuple[list[Task], list[dict[str, Any]]]:
    seeds = [_as_dict(p) for p in (personas if route == "persona" else skills)]
    if not seeds:
        raise ValueError(f"route {route!r} needs at least one {'persona' if route == 'persona' else 'skill'}")
    slots = _taxonomy_slots(taxonomy)

    def one(i: int) -> tuple[Task | None, dict[str, Any] | None]:
        return _one_task(i, seeds[i % len(seeds)], slots, rt, route, max_repairs, gates, seed)

    workers = max(1, min(int(workers), len(indices)))
    if workers <= 1:
        results = [one(i) for i in indices]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers, thread_name_prefix="llm-cand") as ex:
            results = list(ex.map(one, indices))  # map keeps candidate order
    accepted = [t for t, _ in results if t is not None]
    rejected = [r for _, r in results if r is not None]
    return accepted, rejected


def _code_gates(task: Task, gates) -> tuple[str | None, str, dict[str, float]]:
    """Compile check on the host, then the batched sandbox gates. (failed gate or None, problem, scores)."""
    from clawgym.synth.llm_gates import llm_gate_of

    problem = compile_gate(task.verifier.code or "")
    if problem:
        return "compile", problem, {}
    v = gates.check(task)
    scores = {k: s for k, s in (("noop", v.noop_score), ("scaffold", v.scaffold_score),
                                ("oracle", v.oracle_score)) if s is not None}
    if v.passed:
        return None, "", scores
    gate = llm_gate_of(v, has_reference=bool(task.reference))
    outs = task.source.get("llm", {}).get("output_paths")
    detail = {
        "noop": f"the untouched workspace scores {v.noop_score}; it must score exactly 0",
        "scaffold": f"a scaffold (inputs + placeholder files at {outs}) scores {v.scaffold_score}; it must score "
                    "exactly 0",
        "oracle": f"the reference outputs score only {v.oracle_score}; they must score 1.0",
        "determinism": f"grading the reference outputs twice gave {v.oracle_score} and {v.oracle_score_2}",
        "mutation": "corrupted reference outputs do not lose score: " + v.reason,
        "keys": "grade() must return the same sub-check names whatever the workspace holds",
        "hacker": "cheap exploits score above the untouched workspace (0): " + ", ".join(
            f"{x} scores {v.exploit_scores.get(x)}" for x in v.hackable)
                  + " (placeholder / instruction echo / inputs copied to outputs / empty outputs must score ~0)",
    }.get(gate, v.reason)
    if v.errors and gate not in ("hacker",):
        detail += f" [first error: {v.errors[0][:200]}]"
    return gate, detail, scores


def _seed_of(src: dict[str, Any], route: str) -> tuple[str, str, str | None, list[str]]:
    """(seed id, seed text for the prompt, persona_id, skill_ids) of a candidate's persona or skill `src`."""
    if route == "persona":
        seed_id, seed_text = _ident(src, "persona_id", "id", "name"), _persona_text(src)
        return seed_id, seed_text, seed_id, []
    seed_id, seed_text = _ident(src, "skill_id", "id", "name"), _skill_text(src)
    return seed_id, seed_text, None, [seed_id]


def _review(rt: _Runtime, task: Task, scores: dict[str, float], usage: dict[str, int]
            ) -> tuple[str, str, str] | None:
    """The reviewer's verdict on a task that passed the code gates: None when it passes (the review and the gate
    scores kept in its source), else ("review", problem, repair guidance)."""
    review = _chat_json(rt, "reviewer", SYSTEM_REVIEW, _task_view(task, with_reference=True),
                        REVIEW_SCHEMA, "task_review", usage=usage)
    if review.get("pass") and review.get("coverage_pass"):
        task.source["llm"]["review"] = review
        task.source["llm"]["gate_scores"] = scores
        return None
    problem = "; ".join(str(x) for x in (review.get("issues") or [])
                        + (review.get("missing_task_requirements") or [])
                        + (review.get("weak_or_incorrect_checks") or [])) or "reviewer rejected"
    return "review", problem, str(review.get("repair_guidance") or problem)


def _audit(rt: _Runtime, task: Task, usage: dict[str, int]) -> tuple[str, str] | None:
    """The leak check, then the auditor's verdict on a reviewed task: None when it passes (the audit kept in its
    source), else (gate, detail)."""
    leaked = leak_check(task)
    if leaked:
        return "audit", f"answer leak: {leaked!r}"
    try:
        audit = _chat_json(rt, "auditor", SYSTEM_AUDIT, _task_view(task, with_reference=True), AUDIT_SCHEMA,
                           "task_audit", usage=usage)
    except LLMReplyError as e:
        return e.gate, _err(e)
    except Exception as e:
        return "llm_error", _err(e)
    if not audit.get("pass") or audit.get("answer_leak") or audit.get("factual_errors"):
        what = ([f"answer leak: {audit.get('leaked_text', '')!r}"] if audit.get("answer_leak") else []) + \
            [f"factual error: {x}" for x in audit.get("factual_errors") or []]
        return "audit", "; ".join(what) or "audit failed"
    task.source["llm"]["audit"] = audit
    return None


def _one_task(i: int, src: dict[str, Any], slots: list[tuple[str, str]], rt: _Runtime, route: str,
              max_repairs: int, gates, seed: int) -> tuple[Task | None, dict[str, Any] | None]:
    """Generate, gate, repair and audit candidate `i`. Returns (task, None) or (None, rejection record)."""
    cfg = rt.cfg
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}
    rnd = random.Random(f"{seed}:{i}")
    category, subcategory = slots[(i + rnd.randrange(len(slots))) % len(slots)] if slots else ("", "")
    seed_id, seed_text, persona_id, skill_ids = _seed_of(src, route)
    base = {"index": i, "route": route, "persona_id": persona_id, "skill_ids": skill_ids,
            "category": category, "subcategory": subcategory}
    task_id = (f"llm-{route}-{seed}-{i:05d}-"
               + hashlib.sha1(f"{seed_id}|{category}|{subcategory}".encode()).hexdigest()[:8])
    meta = {"model": cfg.model, "seed_id": seed_id}
    history: list[dict[str, Any]] = []

    def reject(reason: str, detail: str) -> tuple[None, dict[str, Any]]:
        return None, {**base, "reason": reason, "detail": detail[:1000], "rounds": len(history), "history": history,
                      "usage": {k: usage[k] for k in ("prompt_tokens", "completion_tokens")}}

    try:
        spec = _chat_json(rt, "generator", SYSTEM_GEN, _gen_prompt(route, seed_text, category, subcategory, rnd),
                          TASK_SCHEMA, "task_spec", usage=usage)
    except LLMReplyError as e:
        return reject(e.gate, _err(e))
    except Exception as e:
        return reject("llm_error", _err(e))

    task: Task | None = None
    verdict: tuple[str, str] | None = None
    for rnd_no in range(max_repairs + 1):
        try:
            task = spec_to_task(spec, task_id=task_id, category=category, route=cast(Route, route),  # persona|skill
                                persona_id=persona_id,
                                skill_ids=skill_ids, seed=seed, meta={**meta, "repairs": rnd_no})
            gate, problem, scores = _code_gates(task, gates)
            guidance = problem
            if gate == "infra":  # the sandbox failed, not the spec: no repair, not blamed on the generator
                verdict = (gate, problem)
                break
            if gate is None:
                refused = _review(rt, task, scores, usage)
                if refused is None:
                    verdict = None
                    break
                gate, problem, guidance = refused
        except LLMReplyError as e:
            verdict = (e.gate, _err(e))
            break
        except Exception as e:  # bad spec (pydantic / KeyError / TypeError) or the endpoint failed
            if "openai" in type(e).__module__:
                verdict = ("llm_error", _err(e))
                break
            gate, problem, guidance = "schema", _err(e), f"the spec is invalid: {_err(e)}"
        history.append({"round": rnd_no, "gate": gate, "problem": problem[:500]})
        verdict = (gate, problem)
        if rnd_no == max_repairs:
            break
        try:
            spec = _chat_json(rt, "generator", SYSTEM_GEN, _repair_prompt(spec, problem, guidance), TASK_SCHEMA,
                              "task_spec", usage=usage)
        except LLMReplyError as e:
            verdict = (e.gate, _err(e))
            break
        except Exception as e:
            verdict = ("llm_error", _err(e))
            break

    if verdict is not None or task is None:
        return reject(*(verdict or ("schema", "no task")))
    refused_by = _audit(rt, task, usage)
    if refused_by is not None:
        return reject(*refused_by)
    task.source["llm"]["repair_rounds"] = len(history)
    task.source["llm"]["usage"] = {k: usage[k] for k in ("prompt_tokens", "completion_tokens")}
    return task, None


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:1000]


__all__ = [
    "AUDIT_SCHEMA", "BOUNDS", "ClientConfig", "LLMReplyError", "REVIEW_SCHEMA", "TASK_SCHEMA", "bounded_schema",
    "compile_gate", "generate_llm_tasks", "leak_check", "scaffold_files", "spec_to_task",
]

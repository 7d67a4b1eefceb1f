"""LLM route of task synthesis (DESIGN §2 `synthetic_tasks`, formats.md "Synthesis gates").

Persona-driven (top-down) or skill-grounded (bottom-up) generation through any OpenAI-compatible
endpoint, with JSON-schema structured output, then the ClawGym gates:

1. ``schema``   - the reply parses and builds a valid `Task`;
2. ``compile``  - the verifier code compiles and defines ``grade(transcript, workspace_path)``;
3. ``noop``     - the untouched workspace scores exactly 0;
4. ``scaffold`` - the workspace plus placeholder outputs (same paths) scores exactly 0;
5. ``oracle``   - when the model supplied reference outputs, they score 1.0;
6. ``review``   - an LLM reviewer returns {pass, coverage_pass, issues, missing_task_requirements,
                  weak_or_incorrect_checks, repair_guidance};
   gates 2-6 failing trigger up to ``max_repairs`` repair rounds (the generator sees the failure);
7. ``audit``    - a deterministic answer-leak check (a reference output appears verbatim in the
                  instruction or workspace) plus an LLM audit for factual errors / leaks. No repair.

Public API: ``generate_llm_tasks(personas, skills, taxonomy, client_cfg, n, route, max_repairs, factory)``.
Candidates run concurrently with at most ``max_in_flight`` (default 32) chat requests overlapping; the openai
client retries 429 / 5xx / connection errors ``max_retries`` times with exponential backoff. With a ``cache_dir``
every response is stored content-addressed (clawgym.synth.llm_cache) and a re-run makes no request.
``return_stats=True`` adds a stats dict (requests, cache hits/misses, tokens and cost per accepted task).
Secrets: the API key is read from the env var named by ``client_cfg["api_key_env"]`` (never logged).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from clawgym.synth.llm_cache import InFlightLimiter, LLMStats, ResponseCache, request_key
from clawgym.tasks.model import File, RubricRule, Task, ToolCall, Verifier

log = logging.getLogger(__name__)

PLACEHOLDER = "TODO\n"
RUBRIC_KEYS = ("0", "0.25", "0.5", "0.75", "1")

# ----------------------------------------------------------------------------------------------
# JSON schemas (strict structured output: every property required, no extras)
# ----------------------------------------------------------------------------------------------


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


_STR = {"type": "string"}
_STRS = {"type": "array", "items": _STR}
_FILE = _obj({"path": _STR, "content": _STR})

TASK_SCHEMA: dict[str, Any] = _obj({
    "instruction": _STR,
    "subcategory": _STR,
    "difficulty": {"type": "integer", "minimum": 1, "maximum": 5},
    "workspace_files": {"type": "array", "items": _FILE},
    "output_paths": _STRS,
    "verifier_code": _STR,
    "rubric": {"type": "array", "items": _obj({
        "name": _STR, "file_path": _STR, "scores": _obj({k: _STR for k in RUBRIC_KEYS})})},
    "reference_outputs": {"type": "array", "items": _FILE},
})

REVIEW_SCHEMA: dict[str, Any] = _obj({
    "pass": {"type": "boolean"},
    "coverage_pass": {"type": "boolean"},
    "issues": _STRS,
    "missing_task_requirements": _STRS,
    "weak_or_incorrect_checks": _STRS,
    "repair_guidance": _STR,
})

AUDIT_SCHEMA: dict[str, Any] = _obj({
    "pass": {"type": "boolean"},
    "factual_errors": _STRS,
    "answer_leak": {"type": "boolean"},
    "leaked_text": _STR,
})

SYSTEM_GEN = """You design realistic, verifiable tasks for a personal AI agent ("Claw") that works inside a \
file workspace (tools: read, write, edit, exec; python3, pytest, git, make and node are installed; there is NO \
network). Reply with one JSON object matching the schema:
- instruction: what the user says, in the persona's own voice, naming every input and output path (relative to the \
workspace). Outputs go under output/.
- workspace_files: realistic inputs (csv, json, jsonl, yaml, md, logs, configs, small scripts) including a \
distractor file and some dirty data. Never include the expected answers.
- output_paths: every file the agent must create.
- verifier_code: python (stdlib + yaml only) defining grade(transcript, workspace_path) -> dict of named sub-checks, \
each a float in [0,1]; it must give 0 to every check when outputs are missing or are placeholders; check paths, \
schema, numbers with tolerance, filter rules and cross-file consistency; never use the network.
- rubric: rules only for what code cannot check (tone, clarity, faithfulness); may be empty.
- reference_outputs: the correct content of each output file (used to prove the verifier; never shown to the agent).
- difficulty: 1 (trivial) .. 5 (hard multi-step)."""

SYSTEM_REVIEW = """You review a synthetic agent task and its verifier. Reply with JSON: pass (the verifier is \
correct and fair), coverage_pass (every requirement of the instruction is checked), issues, \
missing_task_requirements, weak_or_incorrect_checks, repair_guidance (concrete edits)."""

SYSTEM_AUDIT = """You audit a synthetic agent task before release. Reply with JSON: pass, factual_errors (claims in \
the instruction or files that are factually wrong), answer_leak (true if the instruction or the workspace files \
already contain the expected output), leaked_text (the leaked passage, or "")."""


# ----------------------------------------------------------------------------------------------
# client config
# ----------------------------------------------------------------------------------------------


@dataclass
class ClientConfig:
    """The OpenAI-compatible endpoint the LLM route talks to (the key is read from env `api_key_env`)."""

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.7
    max_tokens: int | None = 6000
    timeout_s: float = 120.0
    max_retries: int = 2  # transport-level retries done by the openai client (5xx, 429, timeouts)
    review_model: str | None = None  # reviewer/auditor model; defaults to `model`
    extra: dict[str, Any] = field(default_factory=dict)
    max_in_flight: int = 32  # chat requests overlapping at most
    cache_dir: str | None = None  # content-addressed response cache (None: no cache)
    price_per_1k_tokens: float | None = None  # one price for prompt and completion tokens
    price_per_1k_prompt: float | None = None  # overrides price_per_1k_tokens for prompt tokens
    price_per_1k_completion: float | None = None  # overrides price_per_1k_tokens for completion tokens

    @classmethod
    def coerce(cls, cfg: "ClientConfig | dict[str, Any] | None") -> "ClientConfig":
        """A ClientConfig from a ClientConfig, a dict (unknown keys ignored) or None (defaults)."""
        if cfg is None:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        if isinstance(cfg, dict):
            known = {k: v for k, v in cfg.items() if k in cls.__dataclass_fields__}
            return cls(**known)
        raise TypeError(f"client_cfg must be a ClientConfig or dict, got {type(cfg).__name__}")

    def make_client(self):
        """The openai client for this endpoint (its own retries: `max_retries`, exponential backoff)."""
        import openai

        key = os.environ.get(self.api_key_env) or "EMPTY"  # local servers accept any key
        return openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout_s,
                             max_retries=self.max_retries)


class LLMReplyError(RuntimeError):
    """The endpoint answered, but not with a JSON object matching the schema."""


class _Runtime:
    """What every chat call of one run shares: client, config, response cache, in-flight limiter, stats."""

    def __init__(self, client, cfg: ClientConfig, cache: ResponseCache | None, limit: int):
        self.client, self.cfg, self.cache = client, cfg, cache
        self.limiter = InFlightLimiter(limit)
        self.stats = LLMStats()

    def complete(self, kwargs: dict[str, Any], usage: dict[str, int] | None) -> str:
        """The reply text of one chat request: from the cache, or from the endpoint (then cached when it
        parses as a JSON object)."""
        key = request_key(kwargs)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                u = hit.get("usage") or {}
                pt, ct = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
                self.stats.add(cache_hits=1, cached_prompt_tokens=pt, cached_completion_tokens=ct)
                if usage is not None:
                    usage["prompt_tokens"] += pt
                    usage["completion_tokens"] += ct
                return str(hit.get("content") or "")
            self.stats.add(cache_misses=1)
        try:
            with self.limiter:
                resp = self.client.chat.completions.create(**kwargs)
        except Exception:
            self.stats.add(errors=1)
            raise
        u = getattr(resp, "usage", None)
        pt = int(getattr(u, "prompt_tokens", 0) or 0)
        ct = int(getattr(u, "completion_tokens", 0) or 0)
        self.stats.add(requests=1, prompt_tokens=pt, completion_tokens=ct)
        if usage is not None:
            usage["prompt_tokens"] += pt
            usage["completion_tokens"] += ct
            usage["requests"] += 1
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        if self.cache is not None and _parse_json_obj(text) is not None:
            self.cache.put(key, {"model": kwargs.get("model"), "content": text,
                                 "usage": {"prompt_tokens": pt, "completion_tokens": ct},
                                 "id": getattr(resp, "id", None)})
        return text


def _parse_json_obj(text: str) -> dict[str, Any] | None:
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", (text or "").strip())  # tolerate fenced replies
    try:
        data = json.loads(text)
    except Exception:
        return None
    return data if isinstance(data, dict) else None


def _chat_json(rt: _Runtime, system: str, user: str, schema: dict[str, Any], name: str,
               model: str | None = None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    cfg = rt.cfg
    kwargs: dict[str, Any] = dict(
        model=model or cfg.model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        temperature=cfg.temperature,
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
    )
    if cfg.max_tokens:
        kwargs["max_tokens"] = cfg.max_tokens
    kwargs.update(cfg.extra)
    text = rt.complete(kwargs, usage)
    data = _parse_json_obj(text)
    if data is None:
        raise LLMReplyError(f"{name}: reply is not a JSON object: {text.strip()[:200]!r}")
    missing = [k for k in schema.get("required", []) if k not in data]
    if missing:
        raise LLMReplyError(f"{name}: reply lacks {missing}")
    return data


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
# spec -> Task
# ----------------------------------------------------------------------------------------------


def _clean_rel(path: str) -> str:
    p = str(path).strip().replace("\\", "/")
    for prefix in ("/root/.openclaw/workspace/", "./"):
        if p.startswith(prefix):
            p = p[len(prefix):]
    return p


def spec_to_task(spec: dict[str, Any], *, task_id: str, category: str, route: str, persona_id: str | None,
                 skill_ids: list[str], seed: int | None, meta: dict[str, Any]) -> Task:
    """Build a Task from a generator reply (raises ValueError/pydantic errors on bad specs)."""
    files = [File(path=_clean_rel(f["path"]), content=str(f["content"]).encode()) for f in spec["workspace_files"]]
    rubric = []
    for r in spec.get("rubric") or []:
        scores = {k: str(r["scores"][k]) for k in RUBRIC_KEYS}
        rubric.append(RubricRule(name=str(r["name"]), file_path=_clean_rel(r.get("file_path", "")), scores=scores))
    refs = [ToolCall(name="write", arguments={"path": _clean_rel(f["path"]), "content": str(f["content"])})
            for f in spec.get("reference_outputs") or []]
    outputs = [_clean_rel(p) for p in spec.get("output_paths") or []]
    diff = int(spec.get("difficulty") or 2)
    return Task(
        task_id=task_id, route=route, family=f"llm_{route}", category=category,
        subcategory=str(spec.get("subcategory") or ""), persona_id=persona_id, skill_ids=skill_ids,
        difficulty=max(1, min(5, diff)), seed=seed, instruction=str(spec["instruction"]).strip(), files=files,
        verifier=Verifier(kind="grade", code=str(spec["verifier_code"]), rubric=rubric or None),
        reference=refs or None,
        source={"llm": {**meta, "output_paths": outputs}},
    )


# ----------------------------------------------------------------------------------------------
# gates
# ----------------------------------------------------------------------------------------------


def compile_gate(code: str) -> str | None:
    """None when `code` compiles and defines grade(transcript, workspace_path); else the problem."""
    try:
        tree = compile(code, "<verifier>", "exec", flags=0x400, dont_inherit=True)  # PyCF_ONLY_AST
    except SyntaxError as e:
        return f"verifier does not compile: {e.msg} (line {e.lineno})"
    import ast

    for node in getattr(tree, "body", []):
        if isinstance(node, ast.FunctionDef) and node.name == "grade":
            if len(node.args.args) < 2:
                return "grade() must take (transcript, workspace_path)"
            return None
    return "verifier defines no top-level grade(transcript, workspace_path)"


def scaffold_files(task: Task) -> list[File]:
    """Inputs plus a placeholder at every declared output path (the ClawGym scaffold)."""
    outs = task.source.get("llm", {}).get("output_paths") or []
    have = {f.path for f in task.files}
    extra = []
    for p in outs:
        if p and p not in have:
            body = "{}\n" if p.endswith(".json") else PLACEHOLDER
            extra.append(File(path=p, content=body.encode()))
    return list(task.files) + extra


def reference_files(task: Task) -> list[File]:
    out = {f.path: f for f in task.files}
    for c in task.reference or []:
        if c.name == "write":
            out[c.arguments["path"]] = File(path=c.arguments["path"], content=str(c.arguments["content"]).encode())
    return list(out.values())


def _norm_ws(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().lower()


def leak_check(task: Task, min_chars: int = 24) -> str | None:
    """Deterministic answer-leak check. Returns the leaked text or None.

    - the instruction contains a whole reference output, or one of its lines that carries a number
      (a computed value) and is at least `min_chars` long (column headers and prose rules are fine);
    - an input file contains a whole reference output (copying single input rows, as filter tasks do, is fine).
    """
    instr = _norm_ws(task.instruction)
    inputs = [_norm_ws(f.text) for f in task.files]
    for c in task.reference or []:
        if c.name != "write":
            continue
        body = str(c.arguments.get("content", ""))
        whole = _norm_ws(body)
        if len(whole) >= min_chars and (whole in instr or any(whole in h for h in inputs)):
            return body.strip()[:200]
        for ln in body.splitlines():
            n = _norm_ws(ln)
            if len(n) >= min_chars and re.search(r"\d", n) and n in instr:
                return ln.strip()[:200]
    return None


ScoreFn = Callable[[Task, list[File]], float]


def make_score_fn(factory=None) -> ScoreFn:
    """Code score of `task`'s verifier on a fresh sandbox of `factory` holding `files` (clawgym.verify.verify_task:
    a crash / timeout / unparsable result scores 0.0)."""
    from clawgym.verify import verify_task

    def score(task: Task, files: list[File]) -> float:
        code_only = task.model_copy(update={"verifier": task.verifier.model_copy(update={"rubric": None})})
        res = verify_task(code_only, files=files, factory=factory)
        return float(res.code_score if res.code_score is not None else res.score)

    return score


def run_code_gates(task: Task, score: ScoreFn) -> tuple[str | None, str, dict[str, float]]:
    """Gates 2-5. Returns (failed gate or None, problem text, measured scores)."""
    problem = compile_gate(task.verifier.code or "")
    if problem:
        return "compile", problem, {}
    scores: dict[str, float] = {}
    scores["noop"] = score(task, list(task.files))
    if scores["noop"] != 0.0:
        return "noop", f"the untouched workspace scores {scores['noop']:.3f}; it must score exactly 0", scores
    scores["scaffold"] = score(task, scaffold_files(task))
    if scores["scaffold"] != 0.0:
        return ("scaffold", f"a scaffold (inputs + placeholder files at {task.source['llm'].get('output_paths')}) "
                f"scores {scores['scaffold']:.3f}; it must score exactly 0", scores)
    if task.reference:
        scores["oracle"] = score(task, reference_files(task))
        if scores["oracle"] < 0.999:
            return "oracle", f"the reference outputs score only {scores['oracle']:.3f}; they must score 1.0", scores
    return None, "", scores


def _task_view(task: Task, with_reference: bool) -> str:
    d: dict[str, Any] = {
        "instruction": task.instruction,
        "category": task.category, "subcategory": task.subcategory,
        "workspace_files": [{"path": f.path, "content": f.text[:4000]} for f in task.files],
        "output_paths": task.source.get("llm", {}).get("output_paths"),
        "verifier_code": task.verifier.code,
        "rubric": [r.model_dump(exclude={"proxy"}) for r in task.verifier.rubric or []],
    }
    if with_reference:
        d["reference_outputs"] = [{"path": c.arguments.get("path"), "content": str(c.arguments.get("content"))[:4000]}
                                  for c in task.reference or [] if c.name == "write"]
    return json.dumps(d, ensure_ascii=False, indent=1)


# ----------------------------------------------------------------------------------------------
# the route
# ----------------------------------------------------------------------------------------------


def _gen_prompt(route: str, seed_text: str, category: str, subcategory: str, rnd: random.Random) -> str:
    who = "Persona" if route == "persona" else "Skill to ground the task in"
    return (f"{who}:\n{seed_text}\n\nCategory: {category}\nSubcategory: {subcategory or '(choose one)'}\n"
            f"Variation token: {rnd.randrange(10**6)}\n"
            "Design one task that needs several steps (read, transform, compute, write, verify).")


def _repair_prompt(spec: dict[str, Any], problem: str, guidance: str) -> str:
    return ("Your previous task spec failed validation. Fix it and reply with the complete corrected spec.\n"
            f"Problem: {problem}\nRepair guidance: {guidance}\n\nPrevious spec:\n"
            + json.dumps(spec, ensure_ascii=False)[:20000])


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
    client=None,
    score_fn: ScoreFn | None = None,
    workers: int | None = None,
    max_in_flight: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    return_stats: bool = False,
) -> tuple[list[Task], list[dict[str, Any]]] | tuple[list[Task], list[dict[str, Any]], dict[str, Any]]:
    """Generate `n` candidate tasks through the LLM route and gate them.

    Returns (accepted tasks, rejected records), plus a stats dict when `return_stats`. Every rejected record
    has ``reason`` (the gate: schema|llm_error|compile|noop|scaffold|oracle|review|audit), ``detail``,
    ``index``, ``rounds``.
    `factory` is the SandboxFactory in which verifiers run (default: clawgym.sandbox.get_factory("auto")).
    Candidates run in threads (`workers`; default 2 x `max_in_flight`, so that gates of some candidates overlap
    the requests of others; 1 = sequential) while at most `max_in_flight` chat requests overlap (default:
    ``client_cfg.max_in_flight``, 32). `cache_dir` (default ``client_cfg.cache_dir``) holds the
    content-addressed response cache: a request seen before is answered from it without a call.
    Stats: requests, cache_hits/misses, prompt/completion tokens (total and per accepted task), cost and
    cost per accepted task when a price per 1K tokens is configured, peak_in_flight, wall_s, candidates_per_s.
    Results are in candidate order and deterministic in `seed` for a deterministic endpoint.
    """
    import time

    if route not in ("persona", "skill"):
        raise ValueError(f"route must be 'persona' or 'skill', got {route!r}")
    cfg = ClientConfig.coerce(client_cfg)
    client = client or cfg.make_client()
    limit = int(max_in_flight or cfg.max_in_flight or 1)
    cdir = cache_dir if cache_dir is not None else cfg.cache_dir
    rt = _Runtime(client, cfg, ResponseCache(cdir) if cdir else None, limit)
    if workers is None:
        workers = 2 * limit
    own_factory = None
    if score_fn is None and factory is None:
        from clawgym.sandbox import get_factory

        factory = own_factory = get_factory("auto")
    t0 = time.perf_counter()
    try:
        accepted, rejected = _generate(personas, skills, taxonomy, rt, n, route, max_repairs,
                                       score_fn or make_score_fn(factory), seed, workers)
    finally:
        if own_factory is not None:
            own_factory.close()
    if not return_stats:
        return accepted, rejected
    rt.stats.peak_in_flight = rt.limiter.peak
    pp = cfg.price_per_1k_prompt if cfg.price_per_1k_prompt is not None else cfg.price_per_1k_tokens
    pc = cfg.price_per_1k_completion if cfg.price_per_1k_completion is not None else cfg.price_per_1k_tokens
    stats = rt.stats.summary(len(accepted), n, price_per_1k_prompt=pp, price_per_1k_completion=pc,
                             wall_s=time.perf_counter() - t0)
    stats["max_in_flight"] = limit
    stats["rejected_by_reason"] = {}
    for r in rejected:
        stats["rejected_by_reason"][r["reason"]] = stats["rejected_by_reason"].get(r["reason"], 0) + 1
    return accepted, rejected, stats


def _generate(personas, skills, taxonomy, rt: _Runtime, n: int, route: str, max_repairs: int,
              score: ScoreFn, seed: int, workers: int = 1) -> tuple[list[Task], list[dict[str, Any]]]:
    seeds = [_as_dict(p) for p in (personas if route == "persona" else skills)]
    if not seeds:
        raise ValueError(f"route {route!r} needs at least one {'persona' if route == 'persona' else 'skill'}")
    slots = _taxonomy_slots(taxonomy)

    def one(i: int) -> tuple[Task | None, dict[str, Any] | None]:
        return _one_task(i, seeds[i % len(seeds)], slots, rt, route, max_repairs, score, seed)

    workers = max(1, min(int(workers), n))
    if workers <= 1:
        results = [one(i) for i in range(n)]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers, thread_name_prefix="llm-cand") as ex:
            results = list(ex.map(one, range(n)))  # map keeps candidate order
    accepted = [t for t, _ in results if t is not None]
    rejected = [r for _, r in results if r is not None]
    return accepted, rejected


def _one_task(i: int, src: dict[str, Any], slots: list[tuple[str, str]], rt: _Runtime, route: str,
              max_repairs: int, score: ScoreFn, seed: int) -> tuple[Task | None, dict[str, Any] | None]:
    """Generate, gate, repair and audit candidate `i`. Returns (task, None) or (None, rejection record)."""
    cfg = rt.cfg
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}
    rnd = random.Random(f"{seed}:{i}")
    category, subcategory = slots[(i + rnd.randrange(len(slots))) % len(slots)] if slots else ("", "")
    if route == "persona":
        seed_id, seed_text = _ident(src, "persona_id", "id", "name"), _persona_text(src)
        persona_id, skill_ids = seed_id, []
    else:
        seed_id, seed_text = _ident(src, "skill_id", "id", "name"), _skill_text(src)
        persona_id, skill_ids = None, [seed_id]
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
        spec = _chat_json(rt, SYSTEM_GEN, _gen_prompt(route, seed_text, category, subcategory, rnd),
                          TASK_SCHEMA, "task_spec", usage=usage)
    except Exception as e:
        return reject("llm_error", _err(e))

    task: Task | None = None
    verdict: tuple[str, str] | None = None
    for rnd_no in range(max_repairs + 1):
        try:
            task = spec_to_task(spec, task_id=task_id, category=category, route=route, persona_id=persona_id,
                                skill_ids=skill_ids, seed=seed, meta={**meta, "repairs": rnd_no})
            gate, problem, scores = run_code_gates(task, score)
            guidance = problem
            if gate is None:
                review = _chat_json(rt, SYSTEM_REVIEW, _task_view(task, with_reference=True),
                                    REVIEW_SCHEMA, "task_review", model=cfg.review_model, usage=usage)
                if review.get("pass") and review.get("coverage_pass"):
                    task.source["llm"]["review"] = review
                    task.source["llm"]["gate_scores"] = scores
                    verdict = None
                    break
                gate = "review"
                problem = "; ".join(str(x) for x in (review.get("issues") or [])
                                    + (review.get("missing_task_requirements") or [])
                                    + (review.get("weak_or_incorrect_checks") or [])) or "reviewer rejected"
                guidance = str(review.get("repair_guidance") or problem)
        except LLMReplyError as e:
            verdict = ("llm_error", _err(e))
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
            spec = _chat_json(rt, SYSTEM_GEN, _repair_prompt(spec, problem, guidance), TASK_SCHEMA,
                              "task_spec", usage=usage)
        except Exception as e:
            verdict = ("llm_error", _err(e))
            break

    if verdict is not None or task is None:
        return reject(*(verdict or ("schema", "no task")))
    leaked = leak_check(task)
    if leaked:
        return reject("audit", f"answer leak: {leaked!r}")
    try:
        audit = _chat_json(rt, SYSTEM_AUDIT, _task_view(task, with_reference=True), AUDIT_SCHEMA,
                           "task_audit", model=cfg.review_model, usage=usage)
    except Exception as e:
        return reject("llm_error", _err(e))
    if not audit.get("pass") or audit.get("answer_leak") or audit.get("factual_errors"):
        what = ([f"answer leak: {audit.get('leaked_text', '')!r}"] if audit.get("answer_leak") else []) + \
            [f"factual error: {x}" for x in audit.get("factual_errors") or []]
        return reject("audit", "; ".join(what) or "audit failed")
    task.source["llm"]["audit"] = audit
    task.source["llm"]["repair_rounds"] = len(history)
    task.source["llm"]["usage"] = {k: usage[k] for k in ("prompt_tokens", "completion_tokens")}
    return task, None


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:1000]


__all__ = [
    "AUDIT_SCHEMA", "ClientConfig", "LLMReplyError", "REVIEW_SCHEMA", "TASK_SCHEMA", "compile_gate",
    "generate_llm_tasks", "leak_check", "make_score_fn", "run_code_gates", "scaffold_files", "spec_to_task",
]

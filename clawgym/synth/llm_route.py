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
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

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

# ----------------------------------------------------------------------------------------------
# the bounded request schema: what a small completion budget can finish
# ----------------------------------------------------------------------------------------------
# A constrained decoder (xgrammar behind the embedded server) keeps every token inside the JSON schema, but a
# string it may not close before `max_tokens` is still cut off, and a cut-off reply fails the schema gate. For an
# endpoint with a small budget the route sends a BOUNDED copy of the gate's own schema (bounded_schema): the same
# properties, types and required fields, plus maxLength / maxItems sized so that a reply at every bound still fits
# `max_tokens` (at `chars_per_token`). Everything the bounded schema admits, the gate's schema admits too.
# Per schema: array path -> (minItems, maxItems), string path -> its share of the string budget (default 1).
BOUNDS: dict[str, dict[str, Any]] = {
    "task_spec": {"items": {"workspace_files": (1, 2), "output_paths": (1, 1), "rubric": (0, 0),
                            "reference_outputs": (1, 1)},
                  "weights": {"instruction": 3, "subcategory": 0.5, "workspace_files[].path": 1,
                              "workspace_files[].content": 2, "output_paths[]": 1, "verifier_code": 6,
                              "reference_outputs[].path": 1, "reference_outputs[].content": 2},
                  "min_length": ("instruction", "verifier_code")},
    "task_review": {"items": {"issues": (0, 2), "missing_task_requirements": (0, 2),
                              "weak_or_incorrect_checks": (0, 2)}},
    "task_audit": {"items": {"factual_errors": (0, 2)}},
}


def _leaves(schema: dict[str, Any], path: str, mult: int, items: dict, out: list) -> None:
    t = schema.get("type")
    if t == "object":
        for k, sub in schema.get("properties", {}).items():
            _leaves(sub, f"{path}.{k}" if path else k, mult, items, out)
    elif t == "array":
        _lo, hi = items.get(path, (0, 1))
        _leaves(schema["items"], path + "[]", mult * hi, items, out)
    elif t == "string":
        out.append((path, mult))


def _skeleton(schema: dict[str, Any], path: str, items: dict) -> Any:
    """The reply with every array at its most items and every string empty (its structure's characters)."""
    t = schema.get("type")
    if t == "object":
        return {k: _skeleton(sub, f"{path}.{k}" if path else k, items) for k, sub in schema["properties"].items()}
    if t == "array":
        return [_skeleton(schema["items"], path + "[]", items) for _ in range(items.get(path, (0, 1))[1])]
    if t == "string":
        return ""
    if t == "boolean":
        return False
    return schema.get("maximum", 0)


def bounded_schema(schema: dict[str, Any], max_tokens: int, name: str = "", *,
                   chars_per_token: float = 3.0) -> dict[str, Any]:
    """A copy of `schema` whose strings and arrays are bounded (maxLength / maxItems, BOUNDS[name]) so that a
    reply at every bound is at most `chars_per_token * max_tokens` characters: a constrained decoder can always
    finish it inside the budget. Raises ValueError when `max_tokens` cannot hold even the structure."""
    spec = BOUNDS.get(name, {})
    items, weights = spec.get("items", {}), spec.get("weights", {})
    leaves: list[tuple[str, int]] = []
    _leaves(schema, "", 1, items, leaves)
    # the structure: keys, quotes, brackets, separators (one space after each ':' and ',') and numbers
    skel = json.dumps(_skeleton(schema, "", items), separators=(", ", ": "))
    budget = int(chars_per_token * max_tokens) - len(skel)
    share = sum(weights.get(p, 1.0) * m for p, m in leaves)
    # every character of a string may cost a JSON escape (\n, \"): half the budget is held back for escapes
    lengths = {p: int(budget / 2 * weights.get(p, 1.0) / share) if share else 0 for p, _m in leaves}
    if budget <= 0 or any(lengths[p] < 1 for p, m in leaves if m):
        raise ValueError(f"max_tokens {max_tokens} cannot hold a {name or 'reply'} object "
                         f"({len(skel)} characters of structure at {chars_per_token} characters per token)")
    mins = set(spec.get("min_length", ()))

    def walk(sch: dict[str, Any], path: str) -> dict[str, Any]:
        out = dict(sch)
        t = sch.get("type")
        if t == "object":
            out["properties"] = {k: walk(sub, f"{path}.{k}" if path else k) for k, sub in sch["properties"].items()}
        elif t == "array":
            lo, hi = items.get(path, (0, 1))
            out["items"] = walk(sch["items"], path + "[]")
            out["maxItems"] = hi
            if lo:
                out["minItems"] = lo
        elif t == "string":
            out["maxLength"] = lengths[path]
            if path in mins:
                out["minLength"] = 1
        return out

    return walk(schema, "")


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
    # send bounded_schema(schema, max_tokens) instead of the gate's schema: for a small model / budget, a reply the
    # constrained decoder can always finish (the graph sets it for local model endpoints)
    bounded_schema: bool = False
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
    """The endpoint answered, but not with a JSON object matching the schema: the model's failure, rejected at
    the gate of the role that answered (generator: schema, reviewer: review, auditor: audit), never llm_error
    (which is for an endpoint that did not answer)."""

    GATE = {"task_spec": "schema", "task_review": "review", "task_audit": "audit"}

    def __init__(self, schema: str, problem: str):
        super().__init__(f"{schema}: {problem}")
        self.gate = self.GATE.get(schema, "schema")


class _Endpoint:
    """One role's endpoint: its client, config and the in-flight limiter of its server."""

    def __init__(self, client, cfg: ClientConfig, limiter: InFlightLimiter, model: str):
        self.client, self.cfg, self.limiter, self.model = client, cfg, limiter, model


class _Runtime:
    """What every chat call of one run shares: the endpoints of the generator / reviewer / auditor roles,
    the response cache and the stats. Endpoints on one server (base_url) share one in-flight limiter (the
    server's capacity); roles on different servers each have their own."""

    ROLES = ("generator", "reviewer", "auditor")

    def __init__(self, roles: dict[str, ClientConfig], cache: ResponseCache | None, limit: int | None = None):
        self.cache = cache
        self.stats = LLMStats()
        self.cfg = roles["generator"]
        limiters: dict[str, InFlightLimiter] = {}
        clients: dict[tuple, Any] = {}
        self.endpoints: dict[str, _Endpoint] = {}
        for role in self.ROLES:
            cfg = roles.get(role) or self.cfg
            lim_key = cfg.base_url or ""
            if lim_key not in limiters:
                limiters[lim_key] = InFlightLimiter(int(limit or cfg.max_in_flight or 1))
            ckey = (cfg.base_url, cfg.api_key_env, cfg.timeout_s, cfg.max_retries)
            if ckey not in clients:
                clients[ckey] = cfg.make_client()
            model = cfg.model if roles.get(role) is not None or role == "generator" else \
                (self.cfg.review_model or self.cfg.model)
            self.endpoints[role] = _Endpoint(clients[ckey], cfg, limiters[lim_key], model)
        self.limiters = list(limiters.values())

    @property
    def capacity(self) -> int:
        """Requests that may be in flight at once over all servers."""
        return sum(lim.limit for lim in self.limiters)

    @property
    def peak(self) -> int:
        """The most requests that overlapped on any one server."""
        return max((lim.peak for lim in self.limiters), default=0)

    def complete(self, role: str, kwargs: dict[str, Any], usage: dict[str, int] | None) -> str:
        """The reply text of one chat request of `role`: from the cache, or from the role's endpoint (then
        cached)."""
        ep = self.endpoints[role]
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
            with ep.limiter:
                resp = ep.client.chat.completions.create(**kwargs)
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
        if self.cache is not None:  # every answered request, parsable or not: a re-run reproduces its verdict
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


def _chat_json(rt: _Runtime, role: str, system: str, user: str, schema: dict[str, Any], name: str,
               usage: dict[str, int] | None = None) -> dict[str, Any]:
    ep = rt.endpoints[role]
    cfg = ep.cfg
    kwargs: dict[str, Any] = dict(
        model=ep.model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        temperature=cfg.temperature,
        response_format={"type": "json_schema", "json_schema": {
            "name": name, "strict": True,
            "schema": bounded_schema(schema, cfg.max_tokens, name) if cfg.bounded_schema and cfg.max_tokens
            else schema}},
    )
    if cfg.max_tokens:
        kwargs["max_tokens"] = cfg.max_tokens
    kwargs.update(cfg.extra)
    text = rt.complete(role, kwargs, usage)
    data = _parse_json_obj(text)
    if data is None:
        raise LLMReplyError(name, f"reply is not a JSON object: {text.strip()[:200]!r}")
    missing = [k for k in schema.get("required", []) if k not in data]
    if missing:
        raise LLMReplyError(name, f"reply lacks {missing}")
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
    cfg = ClientConfig.coerce(client_cfg)
    rev = ClientConfig.coerce(reviewer) if reviewer is not None else None
    aud = ClientConfig.coerce(auditor) if auditor is not None else rev
    cdir = cache_dir if cache_dir is not None else cfg.cache_dir
    rt = _Runtime({"generator": cfg, "reviewer": rev, "auditor": aud}, ResponseCache(cdir) if cdir else None,
                  max_in_flight)
    if workers is None:
        workers = min(256, 2 * rt.capacity)
    own_factory = None
    if factory is None:
        from clawgym.sandbox import get_factory

        factory = own_factory = get_factory("auto")
    t0 = time.perf_counter()
    try:
        with GateBatcher(factory, hacker=hacker, max_batch=gate_batch, gate_workers=gate_workers,
                         cache_dir=gate_cache_dir or (os.path.join(cdir, "gates") if cdir else None)) as gates:
            idx = list(range(n)) if indices is None else [int(i) for i in indices]
            accepted, rejected = _generate(personas, skills, taxonomy, rt, idx, route, max_repairs, gates, seed,
                                           workers)
    finally:
        if own_factory is not None:
            own_factory.close()
    if not return_stats:
        return accepted, rejected
    rt.stats.peak_in_flight = rt.peak
    pp = cfg.price_per_1k_prompt if cfg.price_per_1k_prompt is not None else cfg.price_per_1k_tokens
    pc = cfg.price_per_1k_completion if cfg.price_per_1k_completion is not None else cfg.price_per_1k_tokens
    stats = rt.stats.summary(len(accepted), len(idx), price_per_1k_prompt=pp, price_per_1k_completion=pc,
                             wall_s=time.perf_counter() - t0)
    stats["max_in_flight"] = rt.limiters[0].limit
    stats["servers"] = len(rt.limiters)
    stats["gates"] = dict(gates.stats)
    stats["rejected_by_reason"] = {}
    for r in rejected:
        stats["rejected_by_reason"][r["reason"]] = stats["rejected_by_reason"].get(r["reason"], 0) + 1
    return accepted, rejected, stats


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


def _one_task(i: int, src: dict[str, Any], slots: list[tuple[str, str]], rt: _Runtime, route: str,
              max_repairs: int, gates, seed: int) -> tuple[Task | None, dict[str, Any] | None]:
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
            task = spec_to_task(spec, task_id=task_id, category=category, route=route, persona_id=persona_id,
                                skill_ids=skill_ids, seed=seed, meta={**meta, "repairs": rnd_no})
            gate, problem, scores = _code_gates(task, gates)
            guidance = problem
            if gate == "infra":  # the sandbox failed, not the spec: no repair, not blamed on the generator
                verdict = (gate, problem)
                break
            if gate is None:
                review = _chat_json(rt, "reviewer", SYSTEM_REVIEW, _task_view(task, with_reference=True),
                                    REVIEW_SCHEMA, "task_review", usage=usage)
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
    leaked = leak_check(task)
    if leaked:
        return reject("audit", f"answer leak: {leaked!r}")
    try:
        audit = _chat_json(rt, "auditor", SYSTEM_AUDIT, _task_view(task, with_reference=True), AUDIT_SCHEMA,
                           "task_audit", usage=usage)
    except LLMReplyError as e:
        return reject(e.gate, _err(e))
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
    "AUDIT_SCHEMA", "BOUNDS", "ClientConfig", "LLMReplyError", "REVIEW_SCHEMA", "TASK_SCHEMA", "bounded_schema",
    "compile_gate", "generate_llm_tasks", "leak_check", "scaffold_files", "spec_to_task",
]

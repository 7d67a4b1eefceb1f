"""What the LLM route (clawgym.synth.llm_route) sends: the JSON schemas of the generator's, reviewer's and
auditor's replies (strict structured output), their bounded copies for a small completion budget
(`bounded_schema`), the system prompts and the user prompts of a candidate and of a repair round."""

from __future__ import annotations

import json
import random
from typing import Any

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
# user prompts
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


__all__ = [
    "AUDIT_SCHEMA", "BOUNDS", "REVIEW_SCHEMA", "RUBRIC_KEYS", "SYSTEM_AUDIT", "SYSTEM_GEN", "SYSTEM_REVIEW",
    "TASK_SCHEMA", "bounded_schema",
]

"""Generator replies to tasks, and the LLM route's host-side checks (clawgym.synth.llm_route): `spec_to_task`
builds a `Task` from a reply (the schema gate), `compile_gate` (the compile gate), `scaffold_files` (inputs plus
placeholder outputs), `leak_check` (the deterministic answer-leak check of the audit) and the task as the reviewer
and auditor see it."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from clawgym.synth import pyast
from clawgym.synth.llm_prompts import RUBRIC_KEYS
from clawgym.tasks.model import File, Route, RubricRule, Task, ToolCall, Verifier

PLACEHOLDER = "TODO\n"

# ----------------------------------------------------------------------------------------------
# spec -> Task
# ----------------------------------------------------------------------------------------------


def _clean_rel(path: str) -> str:
    p = str(path).strip().replace("\\", "/")
    for prefix in ("/root/.openclaw/workspace/", "./"):
        if p.startswith(prefix):
            p = p[len(prefix):]
    return p


def spec_to_task(spec: dict[str, Any], *, task_id: str, category: str, route: Route, persona_id: str | None,
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
        tree = pyast.parse(code, "<verifier>")
    except SyntaxError as e:
        return f"verifier does not compile: {e.msg} (line {e.lineno})"

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


__all__ = ["PLACEHOLDER", "compile_gate", "leak_check", "scaffold_files", "spec_to_task"]

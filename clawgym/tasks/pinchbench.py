"""PinchBench task files (pinchbench/skill tasks/*.md) <-> Task.

    ---
    id: task_01_calendar            # required
    name: Calendar Event Creation
    category: productivity
    grading_type: automated | llm_judge | hybrid
    timeout_seconds: 120
    grading_weights: {automated: 0.5, llm_judge: 0.5}     # hybrid only (default 0.5 / 0.5)
    workspace_files:                                      # inline or from an assets folder
      - {path: notes.txt, content: "..."}
      - {source: assets/sample.txt, dest: input.txt}
    rubric_rules: [...]    # clawgym extension: RubricRule dicts (name, file_path, scores, proxy)
    ---
    ## Prompt / ## Expected Behavior / ## Grading Criteria
    ## Automated Checks      (fenced python defining grade(transcript, workspace_path) -> dict)
    ## LLM Judge Rubric      (### sub-sections = rules; "**Score 0.75**: ..." lines = levels)

Byte-exact round trip: the raw file text is kept in Task.source["raw"]; export writes it back verbatim
when it still parses to the same task, otherwise the file is generated from the task.

Transcripts: PinchBench's grade() reads OpenClaw's session transcript (the agent's
~/.openclaw/agents/<id>/sessions/<session>.jsonl, one parsed JSON object per line; pinchbench/skill
scripts/lib_agent.py `_load_transcript`), not OpenAI chat messages:

    {"type": "message", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "..."},
        {"type": "toolCall", "id": "call_1", "name": "exec", "arguments": {"command": "ls"}}]}}
    {"type": "message", "message": {"role": "toolResult", "toolCallId": "call_1", "toolName": "exec",
                                    "content": [{"type": "text", "text": "..."}], "isError": false}}

(newer graders also read the run's trajectory events, `model.completed` / `trace.artifacts` with
`data.assistantTexts`). So the importer appends grade_adapter() (a stdlib-only copy of
`to_openclaw_transcript`, taken from this module's source) to the check code: it rebinds grade() so that an
OpenAI-style transcript -- what our verifier passes -- is converted first, and an OpenClaw one is passed
through unchanged. Export removes the adapter again (everything from its marker line on), so exported files
hold PinchBench's own code.
"""

from __future__ import annotations

import functools
import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

import yaml

from clawgym.tasks import reader
from clawgym.tasks._io import ImportReport, atomic_write_bytes, import_entries, make_task
from clawgym.tasks.model import CATEGORIES, File, RubricRule, Task, TaskError, Verifier
from clawgym.tasks.names import NAME_RULE, check_relpath, is_name, safe_join, to_name
from clawgym.tasks.reader import DEFAULT_LIMITS, Budget, Limits, TaskDir, load_yaml

FORMAT = "pinchbench"
SECTION_PROMPT = "Prompt"
SECTION_CHECKS = "Automated Checks"
SECTION_RUBRIC = "LLM Judge Rubric"
GRADING_TYPES = ("automated", "llm_judge", "hybrid")

CATEGORY_MAP = {
    "productivity": "productivity_collaboration", "calendar": "productivity_collaboration",
    "email": "productivity_collaboration", "communication": "productivity_collaboration",
    "coding": "software_development", "code": "software_development", "development": "software_development",
    "writing": "content_domain_support", "content": "content_domain_support",
    "research": "analysis_reasoning", "analysis": "analysis_reasoning", "data": "analysis_reasoning",
    "files": "systems_automation", "file_management": "systems_automation", "automation": "systems_automation",
    "system": "systems_automation", "planning": "planning_knowledge", "knowledge": "planning_knowledge",
    "memory": "planning_knowledge", "organization": "planning_knowledge",
}

_FENCE = re.compile(r"^\s*(```|~~~)")
# Possessive quantifiers (*+): the same matches as plain greedy ones here, in linear time -- with plain ones a
# line of 32k spaces took 88 s (an imported file is untrusted input).
_SCORE_LINE = re.compile(r"^\s*+(?:[-*]\s*+)?\**+\s*+Score\s*+:?\s*+([01](?:\.\d+)?)"
                         r"\s*+\**+\s*+[:：\-–]?\s*+\**+\s*+(.*)$", re.I)
_WEIGHT = re.compile(r"\(\s*+weight\s*+:?\s*+([0-9]++(?:\.[0-9]++)?)\s*+(%?)\s*+\)", re.I)
_PATH_HINT = re.compile(r"`([\w.\-/]+\.[A-Za-z0-9]+)`")


def split_front_matter(text: str, file: str) -> tuple[str, str]:
    """(YAML front matter text, body) of a PinchBench task file; TaskError when the '---' lines are missing."""
    if not text.startswith("---"):
        raise TaskError(file, "front matter", "missing (file must start with a '---' line)")
    lines = text.splitlines(keepends=True)
    if lines[0].strip() != "---":
        raise TaskError(file, "front matter", "first line must be exactly '---'")
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1:])
    raise TaskError(file, "front matter", "not closed by a '---' line")


def split_sections(body: str) -> tuple[str, list[tuple[str, str]]]:
    """(text before the first '## ' heading, [(heading, body)]); headings inside code fences ignored."""
    pre: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in body.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        if not in_fence and line.startswith("## "):
            sections.append((line[3:].strip(), []))
            continue
        (sections[-1][1] if sections else pre).append(line)
    return "".join(pre), [(h, "".join(b)) for h, b in sections]


def _clean(section: str) -> str:
    """Section body without the horizontal-rule separators PinchBench files use between sections."""
    lines = section.strip("\n").splitlines()
    while lines and lines[-1].strip() in ("---", "***", ""):
        lines.pop()
    return "\n".join(lines).strip()


def _ws_end(s: str, i: int) -> int:
    """The first index >= i of s that is not whitespace (len(s) if none)."""
    n = len(s)
    while i < n and s[i].isspace():
        i += 1
    return i


def _closer(s: str, start: int) -> int | None:
    r"""The earliest i >= start with s[i] == "\n" followed by whitespace and ``` (regex ``\n\s*```)."""
    j, floor = s.find("```", start), start
    while j >= 0:
        w = j
        while w > floor and s[w - 1].isspace():
            w -= 1
        nl = s.find("\n", w, j)
        if nl >= 0:
            return nl
        floor, j = j + 3, s.find("```", j + 1)
        floor = min(floor, j) if j >= 0 else floor
    return None


def extract_python(section: str) -> str | None:
    r"""The first ```python fenced block of `section` (with a trailing newline), or None.

    Exactly what ``re.search(r"```(?:python|py)\s*\n(.*?)\n\s*```", section, re.S)`` finds, in linear time
    (that regex backtracks quadratically on long runs of blank lines -- an untrusted file)."""
    s, k = section, section.find("```")
    while k >= 0:
        for alt in ("python", "py"):
            if not s.startswith(alt, k + 3):
                continue
            p = k + 3 + len(alt)
            e = _ws_end(s, p)
            last = s.rfind("\n", p, e)
            if last < 0:
                continue  # no newline after the language tag: this opener does not match
            i = _closer(s, last + 1)
            if i is not None:
                return s[last + 1:i] + "\n"
            # backtracking into the opener's blank lines: ``` right after them closes an empty-ish block
            prev = s.rfind("\n", p, last)
            if prev >= 0 and s.startswith("```", e):
                return s[prev + 1:last] + "\n"
            return None  # no closer after this opener: none after any later one either
        k = s.find("```", k + 1)
    return None


def parse_rubric_section(section: str) -> list[RubricRule]:
    """### sub-sections -> rules; '**Score 0.75**: text' lines -> levels. No sub-sections -> one rule."""
    blocks: list[tuple[str, list[str]]] = []
    for line in section.splitlines():
        if line.startswith("### "):
            blocks.append((line[4:].strip(), []))
        elif blocks:
            blocks[-1][1].append(line)
    if not blocks:
        blocks = [("llm_judge", section.splitlines())]
    rules = []
    for head, lines in blocks:
        scores: dict[str, str] = {}
        for ln in lines:
            m = _SCORE_LINE.match(ln)
            if m:
                key = format(float(m.group(1)), "g")
                scores[key] = m.group(2).strip().strip("*").strip()
        if not scores:
            text = "\n".join(lines).strip()
            scores = {"0": "The criterion is not met at all.", "1": text or head}
        wm = _WEIGHT.search(head)
        weight = float(wm.group(1)) / (100.0 if wm.group(2) else 1.0) if wm else None
        hint = _PATH_HINT.search(head) or next((_PATH_HINT.search(ln) for ln in lines
                                                 if ln.lower().lstrip("*- ").startswith("file")), None)
        rules.append(RubricRule(name=head, file_path=hint.group(1) if hint else "", scores=scores, weight=weight))
    return rules


def _asset_candidates(src: str, md_path: Path, assets_dir: Path | None) -> list[tuple[Path, str]]:
    """(folder, path relative to it) pairs to look `src` up in, in order. Only: an explicit assets_dir (src,
    then its basename); the task file's own folder (src, assets/src); and, when that folder is PinchBench's
    ``<repo>/tasks/``, the repository's ``assets/`` folder only (``<repo>/assets/src``, or ``<repo>/src`` when src
    itself starts with ``assets/``) -- never anything else beside the imported folder."""
    out: list[tuple[Path, str]] = []
    if assets_dir is not None:
        out += [(assets_dir, src), (assets_dir, src.rsplit("/", 1)[-1])]
    here = md_path.parent
    out += [(here, src), (here, f"assets/{src}")]
    if here.name == "tasks":
        out.append((here.parent, f"assets/{src}"))
        if src.startswith("assets/"):
            out.append((here.parent, src))
    return out


def _read_asset(src: str, file: str, where: str, md_path: Path, assets_dir: Path | None, limits: Limits,
                task_budget: Budget, suite_budget: Budget | None) -> bytes:
    """An asset's bytes, looked up only in the places of _asset_candidates through TaskDir (no symlink, no
    hard link, size caps); TaskError naming the task file and `<where>.source` otherwise."""
    try:
        check_relpath(src, "source")
    except ValueError as e:
        raise TaskError(file, f"{where}.source", f"{e} (assets are looked up inside the task's folder only)") \
            from None
    for folder, rel in _asset_candidates(src, md_path, assets_dir):
        # a folder the user named (assets_dir) may be a link; one found beside the task must be the task's own
        if not folder.is_dir() or (folder != assets_dir and folder.is_symlink()):
            continue
        try:
            with TaskDir(folder, folder.name, limits=limits, suite=suite_budget, task=task_budget,
                         follow_root=True) as td:
                k = td.kind(rel, f"{where}.source")
                if k == "missing" or k == "dir":
                    continue
                return td.read_bytes(rel, f"{where}.source")
        except TaskError as e:
            raise TaskError(file, f"{where}.source", f"asset {src!r}: {e}") from None
    raise TaskError(file, f"{where}.source", f"asset {src!r} not found")


def _workspace_files(fm: dict, file: str, md_path: Path, assets_dir: Path | None, limits: Limits | None = None,
                     task_budget: Budget | None = None, suite_budget: Budget | None = None) -> list[File]:
    limits = limits or DEFAULT_LIMITS
    task_budget = task_budget or Budget(limits.task_bytes, "task")
    entries = fm.get("workspace_files") or []
    if not isinstance(entries, list):
        raise TaskError(file, "workspace_files", "must be a list")
    out: list[File] = []
    for i, e in enumerate(entries):
        where = f"workspace_files[{i}]"
        if not isinstance(e, dict):
            raise TaskError(file, where, "must be a mapping ({path, content} or {source, dest})")
        if "content" in e:
            dest = e.get("path") or e.get("dest")
            if not isinstance(dest, str):
                raise TaskError(file, f"{where}.path", "missing")
            c = e["content"]
            data = c.encode() if isinstance(c, str) else None
            if data is None:
                raise TaskError(file, f"{where}.content", "must be a string")
            if len(data) > limits.file_bytes:
                raise TaskError(file, f"{where}.content", f"is over the per-file size cap of {limits.file_bytes} bytes")
            task_budget.take(len(data), file, f"{where}.content")
        elif "source" in e:
            if not isinstance(e["source"], str):
                raise TaskError(file, f"{where}.source", "must be a string")
            src = e["source"]
            dest = e.get("dest") or src.rsplit("/", 1)[-1]
            data = _read_asset(src, file, where, md_path, assets_dir, limits, task_budget, suite_budget)
        else:
            raise TaskError(file, where, "needs {path, content} or {source, dest}")
        try:
            dest = str(dest)
            out.append(File(path=dest[2:] if dest.startswith("./") else dest, content=data))
        except ValueError as ex:
            raise TaskError(file, f"{where}.dest", str(ex).splitlines()[-1]) from None
    return out


# ------------------------------------------------------------- transcripts (OpenAI -> OpenClaw) ----
# The parts of to_openclaw_transcript travel with it into PinchBench's check code (grade_adapter), so each loads
# only builtins and the other parts, and their names carry a prefix no check code uses.
def _clawgym_is_chat(e):
    """An OpenAI-style chat message (a role and no OpenClaw "message" envelope)."""
    return isinstance(e, dict) and isinstance(e.get("role"), str) and "message" not in e


def _clawgym_text_items(content, keep_empty, text_only=False):
    """A message's content as OpenClaw content items; empty text items dropped unless keep_empty (then at least
    one). text_only (an assistant's content): parts other than text are dropped, since a part shaped like a tool
    call or a thinking block is no call the agent made, and graders read those items as such."""
    if content is None:
        items = []
    elif isinstance(content, str):
        items = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        items = []
        for p in content:
            if isinstance(p, str):
                items.append({"type": "text", "text": p})
            elif isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text"):
                t = p.get("text")
                t = t if isinstance(t, str) else ("" if t is None else str(t))
                items.append({"type": "text", "text": t})
            elif not text_only:
                items.append(p)  # images and other parts of user and tool messages: kept as they are
    else:
        items = [{"type": "text", "text": str(content)}]
    if not keep_empty:
        items = [i for i in items if not (isinstance(i, dict) and i.get("type") == "text" and not i.get("text"))]
    elif not items:
        items = [{"type": "text", "text": ""}]
    return items


def _clawgym_parse_args(raw):
    """(arguments, raw text or None): a JSON object parsed, anything else {} plus its raw text."""
    import json

    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if isinstance(raw, str):
        try:
            v = json.loads(raw)
        except (ValueError, RecursionError):
            v = None
        if isinstance(v, dict):
            return v, None
        return {}, raw
    try:
        return {}, json.dumps(raw, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return {}, str(raw)


def _clawgym_assistant_message(e, run, call_names):
    """An assistant message: thinking, text and tool calls; what it said and called joins `run`, each call's name
    `call_names` (by call id) for the tool results that follow."""
    items = []
    reasoning = e.get("reasoning_content") or e.get("reasoning")
    if isinstance(reasoning, str) and reasoning.strip():
        items.append({"type": "thinking", "thinking": reasoning})
    texts = _clawgym_text_items(e.get("content"), False, True)
    items.extend(texts)
    said = "".join(i.get("text", "") for i in texts if isinstance(i, dict) and i.get("type") == "text")
    if said.strip():
        run["texts"].append(said)
    calls = e.get("tool_calls")
    if isinstance(calls, dict):
        calls = [calls]
    for tc in calls if isinstance(calls, list) else []:
        tc = tc if isinstance(tc, dict) else {}
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
        name = fn.get("name") if isinstance(fn.get("name"), str) else ""
        cid = tc.get("id") if isinstance(tc.get("id"), str) else ""
        args, raw = _clawgym_parse_args(fn.get("arguments"))
        item = {"type": "toolCall", "id": cid, "name": name, "arguments": args}
        if raw is not None:
            item["rawArguments"] = raw
        items.append(item)
        call_names[cid] = name
        run["tools"].append({"toolName": name})
    return {"role": "assistant", "content": items,
            "stopReason": "toolUse" if any(i.get("type") == "toolCall" for i in items
                                           if isinstance(i, dict)) else "stop"}


def _clawgym_run_events(runs):
    """The trajectory events newer graders read, per run that said or called something."""
    out = []
    for i, r in enumerate(runs):
        if not r["texts"] and not r["tools"]:
            continue
        rid = "clawgym-run-%d" % (i + 1)
        out.append({"type": "model.completed", "runId": rid, "data": {"assistantTexts": list(r["texts"])}})
        out.append({"type": "trace.artifacts", "runId": rid,
                    "data": {"assistantTexts": list(r["texts"]), "toolMetas": list(r["tools"])}})
    return out


def to_openclaw_transcript(messages) -> list[dict]:
    """OpenAI-style chat messages -> OpenClaw session transcript entries, as PinchBench's grade() reads them.

    Stdlib only: its source and its parts' (_TRANSCRIPT_PARTS, which load nothing but builtins and each other)
    are what runs inside the sandbox (see grade_adapter()), on whatever python3 the sandbox has.

    - a session header, then one {"type": "message", "id", "parentId", "message": {...}} entry per message, in
      order. system (and developer) messages are left out: OpenClaw does not write the system prompt to
      the session transcript.
    - user -> {"role": "user", "content": [{"type": "text", "text"}]}.
    - assistant -> {"role": "assistant", "content": [thinking?, text?, toolCall...], "stopReason"}: reasoning
      (reasoning_content / reasoning) -> {"type": "thinking", "thinking"}; each tool call ->
      {"type": "toolCall", "id", "name", "arguments": <parsed JSON object>}. Arguments that are not a JSON
      object keep their raw text in "rawArguments" with "arguments": {} (pi-ai's parseStreamingJson, which
      OpenClaw uses, yields {} for those too -- it does not repair truncated JSON here; graders call
      arguments.get(...)).
    - tool -> {"role": "toolResult", "toolCallId", "toolName" (from the call with that id), "content":
      [{"type": "text", "text"}], "isError"}.
    - then, per run (a user message and what follows it), the trajectory events newer graders read:
      {"type": "model.completed", "data": {"assistantTexts"}} and {"type": "trace.artifacts", "data":
      {"assistantTexts", "toolMetas": [{"toolName"}]}}.

    Entries that are already OpenClaw-shaped (no top-level "role") pass through in place; a transcript with no
    OpenAI-style message at all is returned unchanged (a copy), so the conversion is idempotent. Anything
    that is not a list is returned as it is."""
    if not isinstance(messages, list):
        return messages
    if not any(_clawgym_is_chat(e) for e in messages):
        return list(messages)
    out = [{"type": "session", "version": 3, "id": "clawgym"}]
    runs: list[dict[str, list]] = [{"texts": [], "tools": []}]
    call_names: dict[str, str] = {}
    parent = None
    n = 0
    for e in messages:
        if not _clawgym_is_chat(e):
            out.append(e)
            continue
        role = e.get("role")
        if role in ("system", "developer"):
            continue
        if role == "user":
            if runs[-1]["texts"] or runs[-1]["tools"]:
                runs.append({"texts": [], "tools": []})
            msg = {"role": "user", "content": _clawgym_text_items(e.get("content"), True)}
        elif role == "assistant":
            msg = _clawgym_assistant_message(e, runs[-1], call_names)
        elif role in ("tool", "function"):
            cid = e.get("tool_call_id") if isinstance(e.get("tool_call_id"), str) else ""
            name = call_names.get(cid) or (e.get("name") if isinstance(e.get("name"), str) else "")
            msg = {"role": "toolResult", "toolCallId": cid, "toolName": name,
                   "content": _clawgym_text_items(e.get("content"), True),
                   "isError": bool(e.get("is_error") or e.get("isError"))}
        else:
            msg = {"role": role, "content": _clawgym_text_items(e.get("content"), True)}
        n += 1
        eid = "%08x" % n
        out.append({"type": "message", "id": eid, "parentId": parent, "message": msg})
        parent = eid
    return out + _clawgym_run_events(runs)


# what grade_adapter ships beside to_openclaw_transcript, in this order
_TRANSCRIPT_PARTS = (_clawgym_is_chat, _clawgym_text_items, _clawgym_parse_args, _clawgym_assistant_message,
                     _clawgym_run_events)


ADAPTER_MARK = "# --- clawgym: OpenClaw transcript adapter (added on import, removed on export) ---"

_ADAPTER_TAIL = """

def _clawgym_adapt_grade(fn):
    def grade(transcript, workspace_path, *args, **kwargs):
        return fn(_clawgym_to_openclaw_transcript(transcript), workspace_path, *args, **kwargs)
    grade.__doc__ = getattr(fn, "__doc__", None)
    grade.__wrapped__ = fn
    return grade


if callable(globals().get("grade")):
    grade = _clawgym_adapt_grade(grade)
"""


@functools.lru_cache(maxsize=1)
def grade_adapter() -> str:
    """The code appended to PinchBench check code: ADAPTER_MARK, the conversion's parts and to_openclaw_transcript's
    own source (renamed _clawgym_to_openclaw_transcript), then the rebinding of grade(). One source of truth: the
    functions above."""
    parts = [textwrap.dedent(inspect.getsource(f)).rstrip("\n") for f in _TRANSCRIPT_PARTS]
    src = textwrap.dedent(inspect.getsource(to_openclaw_transcript))
    src = src.replace("def to_openclaw_transcript(", "def _clawgym_to_openclaw_transcript(", 1)
    return ADAPTER_MARK + "\n" + "\n\n\n".join([*parts, src.rstrip("\n")]) + "\n" + _ADAPTER_TAIL


def strip_grade_adapter(code: str) -> str:
    """PinchBench's own check code: the adapter (from the newline before its marker line on) removed."""
    i = code.rfind("\n" + ADAPTER_MARK + "\n")
    return code if i < 0 else code[:i]


def add_grade_adapter(code: str) -> str:
    """Check code with the current adapter appended after one blank line; an adapter already there (maybe an
    older version) is replaced, never doubled. strip_grade_adapter(add_grade_adapter(c)) == c when c ends
    with a newline (extract_python's code always does)."""
    base = strip_grade_adapter(code)
    return (base if base.endswith("\n") else base + "\n") + "\n" + grade_adapter()


def _check_code(sec: dict[str, str], gt: str, file: str) -> str | None:
    """The python block of the Automated Checks section (automated / hybrid grading), compiled to check it; else
    None."""
    code = None
    if gt in ("automated", "hybrid"):
        if SECTION_CHECKS not in sec:
            raise TaskError(file, f"## {SECTION_CHECKS}", f"missing section (grading_type {gt})")
        code = extract_python(sec[SECTION_CHECKS])
        if not code or "def grade" not in code:
            raise TaskError(file, f"## {SECTION_CHECKS}", "needs a fenced python block defining grade()")
        try:
            compile(code, f"{file}:{SECTION_CHECKS}", "exec")
        except SyntaxError as e:
            raise TaskError(file, f"## {SECTION_CHECKS}", f"SyntaxError line {e.lineno}: {e.msg}") from None
    return code


def _rubric(fm: dict, sec: dict[str, str], gt: str, file: str) -> list[RubricRule] | None:
    """The rubric (llm_judge / hybrid grading): the front matter's rubric_rules, else the Rubric section; else
    None."""
    rubric = None
    if gt in ("llm_judge", "hybrid"):
        if fm.get("rubric_rules") is not None:
            rr = fm["rubric_rules"]
            if not isinstance(rr, list) or not rr:
                raise TaskError(file, "rubric_rules", "must be a non-empty list")
            try:
                rubric = [RubricRule.model_validate(r) for r in rr]
            except Exception as e:
                raise TaskError(file, "rubric_rules", f"invalid: {str(e).splitlines()[0]}") from None
        else:
            if SECTION_RUBRIC not in sec or not _clean(sec[SECTION_RUBRIC]):
                raise TaskError(file, f"## {SECTION_RUBRIC}", f"missing section (grading_type {gt})")
            rubric = parse_rubric_section(_clean(sec[SECTION_RUBRIC]))
    return rubric


def _weights(fm: dict, gt: str, file: str) -> tuple[float | None, float | None]:
    """(code weight, rubric weight) of hybrid grading, normalised to sum to 1; (None, None) otherwise."""
    cw = rw = None
    if gt == "hybrid":
        w = fm.get("grading_weights") or {}
        if not isinstance(w, dict):
            raise TaskError(file, "grading_weights", "must be a mapping {automated, llm_judge}")
        try:
            cw, rw = float(w.get("automated", 0.5)), float(w.get("llm_judge", 0.5))
        except (TypeError, ValueError):
            raise TaskError(file, "grading_weights", "values must be numbers") from None
        tot = cw + rw
        if tot <= 0:
            raise TaskError(file, "grading_weights", "must sum to a positive number")
        cw, rw = cw / tot, rw / tot
    return cw, rw


def parse_pinchbench_text(text: str, file: str, md_path: Path, assets_dir: Path | None = None,
                          suite: str | None = None, *, limits: Limits | None = None,
                          suite_budget: Budget | None = None, task_budget: Budget | None = None) -> Task:
    """The Task of one PinchBench markdown task (`text` of `file`); TaskError naming the field on bad input.
    The front matter is parsed with aliases refused and a size cap (clawgym.tasks.reader.load_yaml); assets
    are read only from inside the task's bundle root or `assets_dir` (see _read_asset)."""
    fm_text, body = split_front_matter(text, file)
    fm = load_yaml(fm_text, file, "front matter", limits) or {}
    if not isinstance(fm, dict):
        raise TaskError(file, "front matter", "must be a mapping")
    if not isinstance(fm.get("id"), str) or not fm["id"].strip():
        raise TaskError(file, "id", "missing" if "id" not in fm else "must be a non-empty string")
    if not is_name(fm["id"]):
        raise TaskError(file, "id", f"{fm['id']!r} is not a valid task id ({NAME_RULE})")
    gt = fm.get("grading_type", "automated")
    if gt not in GRADING_TYPES:
        raise TaskError(file, "grading_type", f"must be one of {', '.join(GRADING_TYPES)} (got {gt!r})")
    preamble, sections = split_sections(body)
    sec = {h: b for h, b in sections}
    if SECTION_PROMPT not in sec or not _clean(sec[SECTION_PROMPT]):
        raise TaskError(file, f"## {SECTION_PROMPT}", "missing section")
    instruction = _clean(sec[SECTION_PROMPT])

    code = _check_code(sec, gt, file)
    rubric = _rubric(fm, sec, gt, file)
    cw, rw = _weights(fm, gt, file)
    timeout = fm.get("timeout_seconds", 600)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise TaskError(file, "timeout_seconds", "must be a positive number")
    files = _workspace_files(fm, file, md_path, assets_dir, limits, task_budget, suite_budget)
    raw_cat = str(fm.get("category", "") or "")
    cat = raw_cat if raw_cat in CATEGORIES else CATEGORY_MAP.get(raw_cat.lower(), raw_cat)
    return make_task(
        file,
        task_id=fm["id"], suite=suite or to_name(md_path.parent.name, "pinchbench"), split="bench",
        route="imported",
        family="pinchbench", category=cat, subcategory=raw_cat,
        instruction=instruction, files=files, timeout_s=float(timeout),
        verifier=Verifier(kind="none" if gt == "llm_judge" else "grade",
                          code=add_grade_adapter(code) if code else None, rubric=rubric,
                          code_weight=cw, rubric_weight=rw),
        source={"format": FORMAT, "filename": md_path.name, "raw": text, "name": fm.get("name", ""),
                "grading_type": gt,
                "sections": {h: _clean(b) for h, b in sections if h not in (SECTION_PROMPT,)}},
    )


def import_pinchbench_file(path: str | Path, assets_dir: str | Path | None = None, *,
                           suite: str | None = None, limits: Limits | None = None,
                           suite_budget: Budget | None = None) -> Task:
    """The Task of one PinchBench markdown file (assets from `assets_dir`); TaskError on bad input. The file
    is untrusted: a symlink or hard link is refused, sizes are capped (`limits`)."""
    p = Path(path)
    file = p.name
    lim = limits or DEFAULT_LIMITS
    task_budget = Budget(lim.task_bytes, "task")
    if not p.parent.is_dir() or (not p.exists() and not p.is_symlink()):
        raise TaskError(file, None, "not found")
    try:
        with TaskDir(p.parent, "", limits=lim, suite=suite_budget, task=task_budget, follow_root=True) as td:
            text = td.read_text(p.name)
    except TaskError as e:
        raise TaskError(file, e.field, "not found" if e.problem == "missing" else e.problem) from None
    return parse_pinchbench_text(text, file, p, Path(assets_dir) if assets_dir else None, suite, limits=lim,
                                 suite_budget=suite_budget, task_budget=task_budget)


def import_pinchbench_folder(dir: str | Path, assets_dir: str | Path | None = None, *,
                             suite: str | None = None, limits: Limits | None = None) -> ImportReport:
    """Every *.md task file in dir (README.md and TASK_TEMPLATE.md are skipped). Bad files are reported; all
    files together share the per-suite size cap of `limits`."""
    root = Path(dir)
    budget = reader.suite_budget(limits)
    name = suite or to_name(root.name, "pinchbench")
    return import_entries(
        root, lambda r: [p for p in sorted(r.glob("*.md")) if p.name.lower() not in ("readme.md", "task_template.md")],
        lambda p: import_pinchbench_file(p, assets_dir, suite=name, limits=limits, suite_budget=budget),
        lambda p: p.name, "id")


# ------------------------------------------------------------------------ export ----
def _same(a: Task, b: Task) -> bool:
    skip = {"source", "suite"}
    return a.model_dump(exclude=skip) == b.model_dump(exclude=skip)


def _render_rubric(rules: list[RubricRule]) -> str:
    out = []
    for r in rules:
        head = r.name if not r.file_path or r.file_path in r.name else f"{r.name} (`{r.file_path}`)"
        out.append(f"### {head}\n")
        for k, v in sorted(r.scores.items(), key=lambda kv: float(kv[0]), reverse=True):
            out.append(f"**Score {float(k):g}**: {v}")
        out.append("")
    return "\n".join(out).strip()


def render_pinchbench(task: Task) -> str:
    """A fresh PinchBench file for any task (our own or imported)."""
    v = task.verifier
    gt = ("hybrid" if v.rubric else "automated") if v.kind != "none" else "llm_judge"
    if v.kind == "reward_dir":
        raise TaskError(task.task_id, "verifier.kind", "reward_dir tasks cannot be written as PinchBench files "
                                                       "(export them as ClawGym folders)")
    fm: dict[str, Any] = {"id": task.task_id, "name": task.source.get("name") or task.task_id,
                          "category": task.subcategory or task.category, "grading_type": gt,
                          "timeout_seconds": (int(task.timeout_s) if float(task.timeout_s).is_integer()
                                              else task.timeout_s)}
    if gt == "hybrid":
        wc, wr = v.weights()
        fm["grading_weights"] = {"automated": wc, "llm_judge": wr}
    wf = []
    for f in task.files:
        try:
            wf.append({"path": f.path, "content": f.content.decode("utf-8")})
        except UnicodeDecodeError:
            raise TaskError(task.task_id, f"files[{f.path}]", "binary files cannot be inlined in PinchBench") from None
    fm["workspace_files"] = wf
    if v.rubric and any(r.proxy is not None or r.file_path or r.weight is not None for r in v.rubric):
        fm["rubric_rules"] = [r.model_dump(exclude_none=True) for r in v.rubric]
    secs = task.source.get("sections", {}) if task.source.get("format") == FORMAT else {}
    parts = ["---\n" + yaml.safe_dump(fm, sort_keys=False, allow_unicode=True, width=1000) + "---\n",
             f"## Prompt\n\n{task.instruction}\n",
             f"## Expected Behavior\n\n{secs.get('Expected Behavior', '') or 'See the prompt.'}\n",
             f"## Grading Criteria\n\n{secs.get('Grading Criteria', '') or '- [ ] The task is completed as asked'}\n"]
    if v.kind == "grade":
        parts.append(f"## Automated Checks\n\n```python\n{strip_grade_adapter(v.code or '').rstrip()}\n```\n")
    if v.rubric:
        parts.append(f"## LLM Judge Rubric\n\n{_render_rubric(v.rubric)}\n")
    return "\n".join(parts)


def export_pinchbench_task(task: Task, path: str | Path) -> Path:
    """Write task as a PinchBench .md file (atomic). Verbatim source text when it still matches."""
    p = Path(path)
    raw = task.source.get("raw") if task.source.get("format") == FORMAT else None
    text = None
    if isinstance(raw, str):
        try:
            again = parse_pinchbench_text(raw, p.name, p, None, task.suite)
        except TaskError:
            # assets may live beside the original file only: compare without files then
            again = None
        if again is not None and _same(again, task):
            text = raw
        elif again is None:
            try:
                fm = load_yaml(split_front_matter(raw, p.name)[0], p.name, "front matter") or {}
            except TaskError:
                fm = {}
            if not isinstance(fm, dict):
                fm = {}
            wfs = fm.get("workspace_files")
            wfs = wfs if isinstance(wfs, list) else []
            if any("source" in e for e in wfs if isinstance(e, dict)):
                # write the assets next to the file so the verbatim text re-imports
                by_dest = {f.path: f for f in task.files}
                ok, writes = True, []
                for e in wfs:
                    if isinstance(e, dict) and "source" in e:
                        dest = str(e.get("dest") or Path(str(e["source"])).name)
                        src = str(e["source"])
                        try:  # only inside the export's own folder
                            target = safe_join(p.parent, check_relpath(src, "source"))
                        except ValueError:
                            target = None
                        # never a hidden path (.git/config, .ssh/...), never the .md itself, never over a file that
                        # holds other bytes: the verbatim text is given up instead (rendered below)
                        hidden = any(c.startswith(".") for c in src.split("/"))
                        clash = target is not None and target.exists() and (
                            target.is_symlink() or not target.is_file()
                            or target.read_bytes() != by_dest.get(dest, File(path="x", content=b"")).content)
                        if dest not in by_dest or target is None or hidden or target == p or clash:
                            ok = False
                            break
                        writes.append((target, by_dest[dest].content))
                if ok:
                    for target, content in writes:
                        atomic_write_bytes(target, content)
                if ok:
                    try:
                        again = parse_pinchbench_text(raw, p.name, p, None, task.suite)
                        text = raw if _same(again, task) else None
                    except TaskError:
                        text = None
    if text is None:
        text = render_pinchbench(task)
        # the task's own text must not be able to rewrite its grader on re-import (an instruction that opens a
        # fence and carries a "## Automated Checks" section): the rendered file is read back first
        try:
            again = parse_pinchbench_text(text, p.name, p, None, task.suite)
        except TaskError as e:
            raise TaskError(task.task_id, e.field, f"the rendered PinchBench file does not read back: {e}") from None
        if (again.verifier.kind, (again.verifier.code or "").strip()) != (task.verifier.kind,
                                                                         (task.verifier.code or "").strip()):
            raise TaskError(task.task_id, "instruction", "cannot be written as PinchBench: its text would change "
                                                         "the task's grader when the file is read back")
    atomic_write_bytes(p, text.encode("utf-8"))
    return p

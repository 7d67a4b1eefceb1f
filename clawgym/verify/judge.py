"""Rubric judges: OpenAIJudge (any OpenAI-compatible endpoint) and OfflineJudge (deterministic proxies).

Judge prompt (formats.md): the judge sees the task prompt, the rules and the named output files, scores
each rule on its own on {0, 0.25, 0.5, 0.75, 1} and replies
    {"rule_scores": [{"name", "file_path", "score", "reason"}], "rubric_score": <mean>}
Rules whose file is missing never reach the judge (they score 0). The reply is validated (every rule
exactly once, scores on the scale); an invalid reply or an API error is retried with exponential backoff.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from clawgym.tasks.model import RUBRIC_SCALE, RubricRule

SCALE = tuple(float(s) for s in RUBRIC_SCALE)


def floor_to_scale(x: float) -> float:
    """Largest scale value <= x (x clamped to [0, 1])."""
    x = min(1.0, max(0.0, x))
    return max(s for s in SCALE if s <= x + 1e-12)


@dataclass
class RuleInput:
    """One rubric rule to score and the text of the file it judges."""

    rule: RubricRule
    content: str | None  # text of rule.file_path; None for whole-run rules (file_path == "")


@dataclass
class RubricContext:
    """What a judge may see of the run: the task, the agent's transcript and the workspace files."""

    task_id: str
    instruction: str
    transcript: list[Any] | None = None
    existing_files: set[str] = field(default_factory=set)  # workspace paths after the run
    read_text: Callable[[str], str | None] = lambda p: None  # workspace file text or None


@runtime_checkable
class Judge(Protocol):
    """Scores rubric rules: offline proxies or an LLM."""

    name: str  # recorded in VerificationResult.judge ("offline", "openai:<model>")

    def score_rules(self, ctx: RubricContext, items: list[RuleInput]) -> list[dict[str, Any]]:
        """One {"score": float on the scale, "reason": str} per item, in order."""
        ...


class JudgeError(RuntimeError):
    """A judge could not score the rules (no proxy offline, a bad reply, requests that kept failing)."""


# ---------------------------------------------------------------- offline -----
def proxy_checks(p) -> int:
    """How many *positive* offline checks a RubricProxy declares (0 for None): checks that only output can
    pass. Forbidden phrases and max_words alone would credit an empty answer, so they never count alone."""
    if p is None:
        return 0
    return (len(p.required_files) + len(p.required_phrases) + (1 if p.any_phrases else 0)
            + (p.min_words is not None and p.min_words > 0) + len(p.required_headings))


class OfflineJudge:
    """Deterministic proxies declared on each rule (RubricRule.proxy). Score = fraction of declared checks
    passed, floored to the scale. A rule without a proxy cannot be judged offline: `can_judge` is False
    and the verifier reports it *unjudged* (never credit). Whole-run rules see only the agent's own
    output (RubricContext.transcript holds its assistant messages and tool calls; existing_files holds
    the files it added or changed)."""

    name = "offline"

    @staticmethod
    def can_judge(rule: RubricRule) -> bool:
        return proxy_checks(rule.proxy) > 0

    def score_rules(self, ctx: RubricContext, items: list[RuleInput]) -> list[dict[str, Any]]:
        return [self._one(ctx, it) for it in items]

    @staticmethod
    def _one(ctx: RubricContext, it: RuleInput) -> dict[str, Any]:
        text = it.content if it.content is not None else _transcript_text(ctx.transcript)
        low = text.lower()
        p = it.rule.proxy
        checks: list[tuple[str, bool, bool]] = []  # (name, passed, positive)
        if proxy_checks(p) == 0:
            raise JudgeError(f"rule {it.rule.name!r} declares no proxy: the offline judge cannot score it")
        else:
            for f in p.required_files:
                checks.append((f"file {f}", f in ctx.existing_files, True))
            for ph in p.required_phrases:
                checks.append((f"phrase {ph!r}", ph.lower() in low, True))
            if p.any_phrases:
                checks.append(("any of " + ", ".join(map(repr, p.any_phrases)),
                               any(ph.lower() in low for ph in p.any_phrases), True))
            for ph in p.forbidden_phrases:
                checks.append((f"no {ph!r}", ph.lower() not in low, False))
            words = len(text.split())
            if p.min_words is not None:
                checks.append((f">= {p.min_words} words", words >= p.min_words, p.min_words > 0))
            if p.max_words is not None:
                checks.append((f"<= {p.max_words} words", words <= p.max_words, False))
            heads = [h.lstrip("#").strip().lower() for h in text.splitlines() if h.lstrip().startswith("#")]
            for h in p.required_headings:
                checks.append((f"heading {h!r}", any(h.lower() in x for x in heads), True))
        passed = sum(ok for _, ok, _ in checks)
        failed = [n for n, ok, _ in checks if not ok]
        reason = f"offline proxy: {passed}/{len(checks)} checks passed"
        if failed:
            reason += "; failed: " + "; ".join(failed[:8])
        if not any(ok for _, ok, pos in checks if pos):  # nothing produced that a positive check saw
            return {"score": 0.0, "reason": reason + "; no positive check passed"}
        return {"score": floor_to_scale(passed / len(checks)), "reason": reason}


def _transcript_text(transcript: list[Any] | None, limit: int = 20000) -> str:
    if not transcript:
        return ""
    parts = []
    for m in transcript:
        if isinstance(m, dict):
            c = m.get("content")
            if isinstance(c, list):
                c = " ".join(str(x.get("text", "")) if isinstance(x, dict) else str(x) for x in c)
            parts.append(f"[{m.get('role', '?')}] {c if c is not None else ''}")
            for tc in m.get("tool_calls") or []:
                parts.append(f"  tool_call {json.dumps(tc, default=str)[:2000]}")
        else:
            parts.append(str(m))
    s = "\n".join(parts)
    return s[-limit:]


# ---------------------------------------------------------------- openai ------
JUDGE_SYSTEM = (
    "You are a strict, fair grader of an AI agent's work in a file workspace. Score every rubric rule on its "
    "own, using only the evidence shown, on the scale 0, 0.25, 0.5, 0.75, 1 (pick the level whose description "
    "fits best). Reply with one JSON object and nothing else:\n"
    '{"rule_scores": [{"name": str, "file_path": str, "score": number, "reason": str}], "rubric_score": number}'
)


def build_judge_messages(ctx: RubricContext, items: list[RuleInput], max_chars: int = 20000) -> list[dict]:
    """The chat messages asking an LLM judge to score `items`: the task prompt, the rules, the files they
    judge and, for whole-run rules, the agent transcript (each cut at `max_chars`)."""
    rules = [{"name": it.rule.name, "file_path": it.rule.file_path, "scores": it.rule.scores} for it in items]
    parts = [f"## Task prompt\n{ctx.instruction}", "## Rubric rules\n" + json.dumps(rules, indent=2)]
    shown: set[str] = set()
    for it in items:
        fp = it.rule.file_path
        if it.content is not None and fp not in shown:
            shown.add(fp)
            body = it.content if len(it.content) <= max_chars else it.content[:max_chars] + "\n…[truncated]"
            parts.append(f"## File: {fp}\n```\n{body}\n```")
    if any(it.content is None for it in items):
        parts.append("## Agent transcript\n" + _transcript_text(ctx.transcript, max_chars))
    parts.append("Score each rule listed above exactly once. Reply with the JSON object only.")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_judge_reply(text: str, items: list[RuleInput]) -> list[dict[str, Any]]:
    """Validate a judge reply; raise JudgeError with the reason if it does not fit."""
    s = text.strip()
    m = re.search(r"```(?:json)?\s*(.*?)```", s, re.S)
    if m:
        s = m.group(1).strip()
    if not s.startswith("{"):
        a, b = s.find("{"), s.rfind("}")
        if a < 0 or b < a:
            raise JudgeError("reply has no JSON object")
        s = s[a:b + 1]
    try:
        data = json.loads(s)
    except json.JSONDecodeError as e:
        raise JudgeError(f"reply is not valid JSON: {e}") from None
    rs = data.get("rule_scores") if isinstance(data, dict) else None
    if not isinstance(rs, list):
        raise JudgeError('reply lacks a "rule_scores" list')
    by_name: dict[str, dict] = {}
    for r in rs:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise JudgeError("rule_scores entries must be objects with a name")
        by_name.setdefault(r["name"], r)
    out = []
    for it in items:
        r = by_name.get(it.rule.name)
        if r is None:
            raise JudgeError(f"reply has no score for rule {it.rule.name!r}")
        try:
            sc = float(r.get("score"))
        except (TypeError, ValueError):
            raise JudgeError(f"rule {it.rule.name!r}: score {r.get('score')!r} is not a number") from None
        if not any(abs(sc - v) < 1e-9 for v in SCALE):
            raise JudgeError(f"rule {it.rule.name!r}: score {sc} is not on the scale {RUBRIC_SCALE}")
        out.append({"score": min(SCALE, key=lambda v: abs(v - sc)), "reason": str(r.get("reason", ""))})
    return out


class OpenAIJudge:
    """LLM judge through the openai client against any OpenAI-compatible endpoint (vLLM, SGLang, OpenAI…).
    The API key is read from the environment variable `api_key_env` (never stored in results or logs, and
    redacted from error messages). Temperature 0."""

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", *,
                 max_retries: int = 3, backoff_s: float = 1.0, timeout_s: float = 120.0,
                 max_tokens: int = 1024, max_chars: int = 20000):
        import openai

        self.base_url, self.model, self.api_key_env = base_url, model, api_key_env
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.max_chars, self.max_tokens = max_chars, max_tokens
        self._secret = os.environ.get(api_key_env) or ""
        self._client = openai.OpenAI(base_url=base_url, api_key=self._secret or "EMPTY",
                                     timeout=timeout_s, max_retries=0)
        self.name = f"openai:{model}"

    @staticmethod
    def can_judge(rule: RubricRule) -> bool:
        return True

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIJudge(base_url={self.base_url!r}, model={self.model!r}, api_key_env={self.api_key_env!r})"

    def _redact(self, s: str) -> str:
        return s.replace(self._secret, "***") if self._secret else s

    def score_rules(self, ctx: RubricContext, items: list[RuleInput]) -> list[dict[str, Any]]:
        if not items:
            return []
        messages = build_judge_messages(ctx, items, self.max_chars)
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * (2 ** (attempt - 1)))
            try:
                resp = self._client.chat.completions.create(
                    model=self.model, messages=messages, temperature=0, max_tokens=self.max_tokens)
                text = resp.choices[0].message.content or ""
                return parse_judge_reply(text, items)
            except JudgeError as e:
                last = f"invalid judge reply: {e}"
            except Exception as e:  # openai.APIError, connection errors, …
                last = f"{type(e).__name__}: {e}"
        raise JudgeError(self._redact(f"judge failed after {self.max_retries + 1} attempts: {last}"))


JUDGE_SETTINGS = {"base_url": "CLAWGYM_JUDGE_BASE_URL", "model": "CLAWGYM_JUDGE_MODEL",
                  "api_key_env": "CLAWGYM_JUDGE_API_KEY_ENV"}  # "auto" settings and the env vars entry points read


def make_judge(spec: Any = None, settings: Mapping[str, str] | None = None) -> Judge:
    """A judge from a spec:
    None / "" / "offline"             -> OfflineJudge
    a Judge instance                  -> itself
    {"base_url", "model", "api_key_env"?} -> OpenAIJudge
    "openai:MODEL@BASE_URL"           -> OpenAIJudge (key from OPENAI_API_KEY)
    "auto" / "env"                    -> OpenAIJudge from `settings` {"base_url", "model", "api_key_env"?} when
                                         base_url and model are set, else OfflineJudge. The library never reads
                                         the environment: the JudgeResource (or an entry point) reads
                                         CLAWGYM_JUDGE_BASE_URL / _MODEL / _API_KEY_ENV (JUDGE_SETTINGS) and
                                         passes them here.
    """
    if spec is None or spec == "" or spec == "offline":
        return OfflineJudge()
    if isinstance(spec, dict):
        return OpenAIJudge(spec["base_url"], spec["model"], spec.get("api_key_env", "OPENAI_API_KEY"))
    if isinstance(spec, str):
        if spec in ("auto", "env"):
            st = dict(settings or {})
            url, model = st.get("base_url"), st.get("model")
            if url and model:
                return OpenAIJudge(url, model, st.get("api_key_env") or "OPENAI_API_KEY")
            return OfflineJudge()
        if spec.startswith("openai:") and "@" in spec:
            model, url = spec[len("openai:"):].split("@", 1)
            return OpenAIJudge(url, model)
        raise ValueError(f"unknown judge spec {spec!r} (use 'offline', 'auto', 'openai:MODEL@URL' or a dict)")
    if hasattr(spec, "score_rules"):
        return spec
    raise ValueError(f"unknown judge spec of type {type(spec).__name__}")

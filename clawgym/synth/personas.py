"""User personas: a shipped seed list expanded combinatorially (offline), or by an LLM when one is configured."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clawgym.tasks.model import TaskError

DEFAULT_SEEDS = Path(__file__).resolve().parents[2] / "data" / "seeds" / "personas.yaml"
SENIORITIES = ("junior", "mid-level", "senior", "lead")
TONES = ("formal", "casual", "terse", "friendly", "urgent")


@dataclass(frozen=True)
class Persona:
    """A user the task instructions are written for: role, domain, seniority, goals, tools and tone."""

    persona_id: str
    name: str
    role: str
    domain: str
    seniority: str
    goals: tuple[str, ...] = field(default_factory=tuple)
    tools: tuple[str, ...] = field(default_factory=tuple)
    tone: str = "friendly"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["goals"], d["tools"] = list(self.goals), list(self.tools)
        return d

    def describe(self) -> str:
        return (f"{self.name}, a {self.seniority} {self.role} in {self.domain}; goals: {', '.join(self.goals)}; "
                f"tools: {', '.join(self.tools)}; tone: {self.tone}")


def _pid(role: str, domain: str, seniority: str, tone: str) -> str:
    h = hashlib.sha1(f"{role}|{domain}|{seniority}|{tone}".encode()).hexdigest()[:8]
    return f"p-{h}"


def load_seeds(path: str | Path | None = None) -> dict[str, Any]:
    """The persona seed YAML (roles and names); TaskError naming the file and field when it is malformed."""
    p = Path(path or DEFAULT_SEEDS)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise TaskError(str(p), None, "persona seed file not found") from None
    except yaml.YAMLError as e:
        raise TaskError(str(p), None, f"invalid YAML: {e}") from None
    if not isinstance(data, dict):
        raise TaskError(str(p), None, "must be a mapping with 'roles' and 'names'")
    for key in ("roles", "names"):
        if not isinstance(data.get(key), list) or not data[key]:
            raise TaskError(str(p), key, "missing or empty list")
    for i, r in enumerate(data["roles"]):
        for k in ("role", "domains", "goals", "tools"):
            if not r.get(k):
                raise TaskError(str(p), f"roles[{i}].{k}", "missing")
    return data


def expand_personas(seeds: dict[str, Any] | None = None, limit: int | None = None, seed: int = 0) -> list[Persona]:
    """Combinatorial expansion: role × domain × seniority × tone, goals/tools sampled per persona.
    Deterministic in `seed`; ids are content hashes, so the result has no duplicates."""
    seeds = seeds or load_seeds()
    rng = random.Random(seed)
    names = seeds["names"]
    out: list[Persona] = []
    seen: set[str] = set()
    for r in seeds["roles"]:
        for domain, sen, tone in itertools.product(r["domains"], seeds.get("seniorities", SENIORITIES),
                                                   seeds.get("tones", TONES)):
            pid = _pid(r["role"], domain, sen, tone)
            if pid in seen:
                continue
            seen.add(pid)
            goals = tuple(rng.sample(r["goals"], min(2, len(r["goals"]))))
            tools = tuple(rng.sample(r["tools"], min(3, len(r["tools"]))))
            out.append(Persona(pid, rng.choice(names), r["role"], domain, sen, goals, tools, tone))
    rng.shuffle(out)
    return out[:limit] if limit else out


PERSONA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"personas": {"type": "array", "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "role": {"type": "string"}, "domain": {"type": "string"},
                       "seniority": {"type": "string"}, "goals": {"type": "array", "items": {"type": "string"}},
                       "tools": {"type": "array", "items": {"type": "string"}}, "tone": {"type": "string"}},
        "required": ["name", "role", "domain", "seniority", "goals", "tools", "tone"],
        "additionalProperties": False}}},
    "required": ["personas"], "additionalProperties": False,
}


def expand_personas_llm(client: Any, model: str, base: list[Persona], n: int, batch: int = 20,
                        max_rounds: int = 20) -> list[Persona]:
    """Ask an OpenAI-compatible endpoint for new personas (JSON-schema structured output); dedupe on
    (role, domain, seniority, tone). `client` is an `openai.OpenAI`. Returns base + new (up to n new)."""
    seen = {_pid(p.role, p.domain, p.seniority, p.tone) for p in base}
    new: list[Persona] = []
    examples = "\n".join(p.describe() for p in base[:5])
    for _ in range(max_rounds):
        if len(new) >= n:
            break
        resp = client.chat.completions.create(
            model=model,
            messages=[{"role": "system",
                       "content": "You invent realistic, diverse users of a personal file-workspace assistant."},
                      {"role": "user",
                       "content": f"Examples:\n{examples}\n\nInvent {batch} NEW personas with different "
                                  "roles and domains. Answer JSON only."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "personas", "schema": PERSONA_SCHEMA, "strict": True}},
        )
        try:
            items = json.loads(resp.choices[0].message.content or "{}").get("personas", [])
        except json.JSONDecodeError:
            continue
        for it in items:
            try:
                pid = _pid(it["role"].strip(), it["domain"].strip(), it["seniority"].strip(), it["tone"].strip())
            except (KeyError, AttributeError):
                continue
            if pid in seen:
                continue
            seen.add(pid)
            new.append(Persona(pid, it["name"], it["role"].strip(), it["domain"].strip(), it["seniority"].strip(),
                               tuple(it["goals"]), tuple(it["tools"]), it["tone"].strip()))
    return base + new[:n]


# ----------------------------------------------------------------------------------------------
# persona-voiced instructions
# ----------------------------------------------------------------------------------------------

_OPEN = {
    "formal": ["Good morning. ", "Hello, ", "Dear assistant, "],
    "casual": ["Hey! ", "Hi there, ", "Yo, "],
    "terse": ["", "Task: ", ""],
    "friendly": ["Hi! ", "Hello there :) ", "Hey, hope you're well! "],
    "urgent": ["Need this fast: ", "Urgent - ", "ASAP please: "],
}
_CLOSE = {
    "formal": [" Thank you.", " Kind regards.", ""],
    "casual": [" Thanks!", " Cheers.", ""],
    "terse": ["", "", " Thanks."],
    "friendly": [" Thanks so much!", " You're a star.", " Thanks a lot!"],
    "urgent": [" I need it before my next meeting.", " Please hurry.", ""],
}


def voice(persona: Persona | None, core: str, rng: random.Random) -> str:
    """Wrap a task's core request in the persona's voice (role/domain context + tone)."""
    if persona is None:
        return core
    tone = persona.tone if persona.tone in _OPEN else "friendly"
    intro = rng.choice([
        f"I'm {persona.name}, {persona.seniority} {persona.role} ({persona.domain}). ",
        f"As a {persona.role} working in {persona.domain}, ",
        f"{persona.name} here ({persona.role}, {persona.domain}). ",
    ])
    if intro.endswith(", "):
        core = core[0].lower() + core[1:] if core[:2] != "I " else core
    return (rng.choice(_OPEN[tone]) + intro + core + rng.choice(_CLOSE[tone])).strip()


def save_personas(personas: list[Persona], path: str | Path) -> None:
    """Write the personas as JSON lines to `path` (atomic replace)."""
    import os
    import tempfile

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        for per in personas:
            fh.write(json.dumps(per.to_dict()) + "\n")
    os.replace(tmp, p)


__all__ = ["Persona", "load_seeds", "expand_personas", "expand_personas_llm", "voice", "save_personas",
           "PERSONA_SCHEMA", "DEFAULT_SEEDS"]

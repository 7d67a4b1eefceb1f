"""OpenClaw skills: parse SKILL.md folders, annotate them with atomic operations and file types, and
filter out the ones that need the network, a GUI or an account (they cannot ground offline tasks).

Skill roots (in order): the shipped samples in <repo>/data/skills, the bundled skills of an installed
openclaw npm package (<openclaw_dir>/node_modules/openclaw/skills, default /var/lib/clawgym/openclaw), and any
extra directories. Missing roots are skipped. The settings come from the caller (the `skills` asset takes
them from OpenClawResource, which reads $CLAWGYM_OPENCLAW_DIR / $CLAWGYM_SKILL_DIRS).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clawgym.tasks.model import TaskError

SHIPPED_SKILLS = Path(__file__).resolve().parents[2] / "data" / "skills"
DEFAULT_OPENCLAW_DIR = "/var/lib/clawgym/openclaw"  # where scripts/install_openclaw.sh installs by default


@dataclass
class Skill:
    """One SKILL.md: its front matter, body, and the taxonomy operations / file types and offline needs
    derived from them."""

    skill_id: str
    name: str
    description: str
    body: str
    path: str
    source: str = "shipped"
    requires: dict[str, Any] = field(default_factory=dict)
    operations: list[str] = field(default_factory=list)
    file_types: list[str] = field(default_factory=list)
    needs_network: bool = False
    needs_gui: bool = False
    needs_account: bool = False

    @property
    def usable_offline(self) -> bool:
        return not (self.needs_network or self.needs_gui or self.needs_account)

    @property
    def excluded_reason(self) -> str | None:
        why = [w for w, f in (("network", self.needs_network), ("gui", self.needs_gui),
                              ("account", self.needs_account)) if f]
        return ("needs " + ", ".join(why)) if why else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["usable_offline"], d["excluded_reason"] = self.usable_offline, self.excluded_reason
        return d


def default_skill_dirs(openclaw_dir: str | Path | None = None, extra_dirs: Iterable[str | Path] = ()) -> list[Path]:
    """The shipped skills, those of the OpenClaw install at `openclaw_dir` (default DEFAULT_OPENCLAW_DIR),
    then `extra_dirs`."""
    oc = Path(openclaw_dir or DEFAULT_OPENCLAW_DIR) / "node_modules" / "openclaw" / "skills"
    return [SHIPPED_SKILLS, oc, *(Path(p) for p in extra_dirs)]


_FM = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", re.S)


def parse_skill_md(path: str | Path, source: str = "shipped") -> Skill:
    """Parse one SKILL.md. Bad input -> TaskError naming the file and the field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(str(p), None, f"unreadable: {e}") from None
    m = _FM.match(text)
    if not m:
        raise TaskError(str(p), "front matter", "missing (the file must start with a '---' YAML block)")
    try:
        fm = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        raise TaskError(str(p), "front matter", f"invalid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(fm, dict):
        raise TaskError(str(p), "front matter", "must be a mapping")
    name = fm.get("name")
    if not isinstance(name, str) or not name.strip():
        raise TaskError(str(p), "name", "missing or not a string")
    desc = fm.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise TaskError(str(p), "description", "missing or not a string")
    meta = fm.get("metadata") or {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            raise TaskError(str(p), "metadata", "not valid JSON/YAML") from None
    if not isinstance(meta, dict):
        raise TaskError(str(p), "metadata", "must be a mapping")
    oc = meta.get("openclaw") or meta.get("clawdbot") or {}
    requires = oc.get("requires") if isinstance(oc, dict) else {}
    sk = Skill(skill_id=f"{source}:{name.strip()}", name=name.strip(), description=desc.strip(),
               body=m.group(2).strip(), path=str(p), source=source, requires=requires or {})
    if isinstance(oc, dict) and oc.get("os") and "linux" not in oc.get("os", []):
        sk.needs_gui = True  # desktop-only (macOS/Windows) skills drive native apps
    annotate(sk)
    return sk


_OPS: list[tuple[str, str]] = [
    ("read", r"\b(read|open|load|inspect|view)\w*"), ("write", r"\b(write|save|create|generat|produc|export)\w*"),
    ("edit", r"\b(edit|modify|update|rewrite|patch|fix)\w*"), ("search", r"\b(search|find|grep|look ?up|locate)\w*"),
    ("summarize", r"\bsummar\w*"), ("transform", r"\b(convert|transform|format|normali[sz]|migrat)\w*"),
    ("compute", r"\b(calculat|comput|statistic|total|average|sum)\w*"), ("sort", r"\b(sort|order)\w*"),
    ("rank", r"\b(rank|score|priorit)\w*"), ("filter", r"\b(filter|select|exclud)\w*"),
    ("run", r"\b(run|execut|script|command|shell)\w*"), ("test", r"\b(test|pytest|assert)\w*"),
    ("draft", r"\b(draft|email|message|reply)\w*"), ("schedule", r"\b(schedul|calendar|remind|cron)\w*"),
    ("extract", r"\b(extract|pull out|parse)\w*"), ("compare", r"\b(compar|diff)\w*"),
    ("verify", r"\b(verif|validat|lint|check)\w*"), ("aggregate", r"\b(aggregat|group|roll ?up)\w*"),
]
_TYPES: list[tuple[str, str]] = [
    ("csv", r"\bcsv\b"), ("json", r"\bjson\b"), ("yaml", r"\bya?ml\b"), ("md", r"\b(markdown|\.md)\b"),
    ("txt", r"\b(txt|plain text|text file)"), ("log", r"\blogs?\b"), ("py", r"\b(python|\.py)\b"),
    ("html", r"\bhtml\b"), ("xml", r"\bxml\b"), ("pdf", r"\bpdf\b"), ("xlsx", r"\b(xlsx|excel|spreadsheet)\b"),
    ("ics", r"\b(ics|icalendar)\b"), ("sh", r"\b(bash|shell script|\.sh)\b"), ("ini", r"\b(ini|\.env|config)\b"),
]
_NET = r"\b(https?://|curl|wget|web ?search|browse the web|internet|online|api\b|fetch(es)? (a )?url|download)"
_DEVICE = r"\b(lights?|hue|bluos|bluetooth|speakers?|playback|volume|smart ?home|spectrograms?|audio|camera)\b"
_GUI = r"\b(gui|screenshot|click|desktop app|browser|applescript|screen|camera|canvas|mouse)\b"
_ACCOUNT = (r"\b(oauth|log ?in|sign ?in|api[ _-]?key|token|account|slack|gmail|notion|spotify|twitter|github|discord|"
            r"telegram|whatsapp)\b")
_NET_BINS = {"curl", "wget", "gh", "gog", "himalaya", "spotify_player", "slack", "op"}
_GUI_BINS = {"peekaboo", "osascript", "imsg", "camsnap"}


def annotate(sk: Skill) -> Skill:
    """Atomic operations / file types / offline-usability from the front matter and the text (keyword rules)."""
    text = f"{sk.name}\n{sk.description}\n{sk.body}".lower()
    sk.operations = [op for op, rx in _OPS if re.search(rx, text)] or ["read"]
    sk.file_types = [t for t, rx in _TYPES if re.search(rx, text)]
    req = sk.requires if isinstance(sk.requires, dict) else {}
    bins = set(req.get("bins") or []) | set(req.get("anyBins") or [])
    envs = [e for e in (req.get("env") or []) if isinstance(e, str)]
    sk.needs_network = sk.needs_network or bool(re.search(_NET, text)) or bool(bins & _NET_BINS) \
        or bool(re.search(_DEVICE, f"{sk.name} {sk.description}".lower()))  # a real device on the network
    sk.needs_gui = sk.needs_gui or bool(re.search(_GUI, text)) or bool(bins & _GUI_BINS)
    sk.needs_account = sk.needs_account or bool(envs) or bool(re.search(_ACCOUNT, text))
    return sk


def load_skills(dirs: list[str | Path] | None = None) -> tuple[list[Skill], list[TaskError]]:
    """All skills under the roots (each <root>/<name>/SKILL.md). A malformed SKILL.md is reported in the
    second list (TaskError naming file + field) and the rest are still parsed. Duplicate names: first root wins."""
    roots = [Path(d) for d in (dirs if dirs is not None else default_skill_dirs())]
    skills: list[Skill] = []
    errors: list[TaskError] = []
    seen: set[str] = set()
    for root in roots:
        if not root.is_dir():
            continue
        source = "openclaw" if "node_modules" in root.parts else ("shipped" if root == SHIPPED_SKILLS else root.name)
        for md in sorted(root.glob("*/SKILL.md")):
            try:
                sk = parse_skill_md(md, source=source)
            except TaskError as e:
                errors.append(e)
                continue
            if sk.name in seen:
                continue
            seen.add(sk.name)
            skills.append(sk)
    return skills, errors


def offline_skills(skills: list[Skill]) -> tuple[list[Skill], list[tuple[str, str]]]:
    """(usable, [(skill_id, reason)] for the excluded ones)."""
    ok, out = [], []
    for s in skills:
        if s.usable_offline:
            ok.append(s)
        else:
            out.append((s.skill_id, s.excluded_reason or ""))
    return ok, out


__all__ = ["Skill", "parse_skill_md", "load_skills", "offline_skills", "annotate", "default_skill_dirs",
           "SHIPPED_SKILLS", "DEFAULT_OPENCLAW_DIR"]

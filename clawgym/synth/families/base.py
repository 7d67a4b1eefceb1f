"""The procedural task-family framework (reasoning-gym style: small seeded generators registered by name).

A family author writes one `build(ctx)` function that fills a :class:`Ctx`:

    def build(ctx):
        rows = ...                                   # ctx.rng is seeded: deterministic in the seed
        ctx.csv("input/sales.csv", header, rows)     # workspace files (+ ctx.distractors())
        ctx.ask("Summarise input/sales.csv into output/summary.json ...")   # persona-voiced instruction
        ctx.expect("total", 1234.5)                  # expected values, embedded as JSON in grade()
        ctx.check("total", "close(J('output/summary.json')['total'], E['total'])")
        ctx.read("input/sales.csv"); ctx.write("output/summary.json", ...); ctx.exec("python3 -m json.tool output/summary.json")
    register(Family("sales_summary", "analysis_reasoning", "...", ["read", "compute", "write"], ["csv", "json"], "...", build))

Checks are python expressions evaluated inside grade(); names available: `ws` (the workspace path),
`E` (the expected dict), everything in clawgym.synth.checklib, plus shorthands `J(rel)` (load_json),
`C(rel)` (load_csv), `T(rel)` (read_text), `Y(rel)` (load_yaml), `L(rel)` (load_jsonl). A failing or
raising check scores 0; the task score is the mean of all checks.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clawgym.tasks.model import CATEGORIES, File, RubricRule, Task, ToolCall, Verifier

# ----------------------------------------------------------------------------------------------
# grade code
# ----------------------------------------------------------------------------------------------

CHECKLIB_SOURCE: str = (Path(__file__).resolve().parent.parent / "checklib.py").read_text()

_SHORTHANDS = '''
def _mk(ws):
    return (lambda r: load_json(ws, r)), (lambda r: load_csv(ws, r)), (lambda r: read_text(ws, r)), \\
        (lambda r: load_yaml(ws, r)), (lambda r: load_jsonl(ws, r))
'''


class GradeCode:
    """Builds grade(transcript, workspace_path) source from named checks (python expressions)."""

    def __init__(self) -> None:
        self.expected: dict[str, Any] = {}
        self.checks: list[tuple[str, str]] = []
        self.support: set[str] = set()  # checks credited only when a substantive check passes
        self.helpers: list[str] = []

    def expect(self, key: str, value: Any) -> None:
        json.dumps(value)  # must be JSON-able
        self.expected[key] = value

    def check(self, name: str, expr: str, support: bool = False) -> None:
        """Add a named check. `support`: the check (row order, inputs left untouched, a fact that an input
        file already holds) is credited only when at least one substantive check passes, so a cheap exploit
        (a placeholder, the instruction echoed, an input copied to the output) earns nothing from it."""
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise ValueError(f"check name must be snake_case: {name!r}")
        if any(n == name for n, _ in self.checks):
            raise ValueError(f"duplicate check name {name!r}")
        compile(expr, f"<check {name}>", "eval")
        self.checks.append((name, expr))
        if support:
            self.support.add(name)

    def helper(self, src: str) -> None:
        """Extra module-level python (a def) used by checks of this family."""
        self.helpers.append(src.strip("\n"))

    def source(self) -> str:
        if not self.checks:
            raise ValueError("a family must define at least one check")
        lines = [
            "# --- clawgym.synth.checklib (shared) ---",
            CHECKLIB_SOURCE,
            "# --- task-specific ---",
            _SHORTHANDS,
            "E = _json.loads(" + repr(json.dumps(self.expected, sort_keys=True)) + ")",
            *self.helpers,
            "",
            "def grade(transcript, workspace_path):",
            "    ws = workspace_path",
            "    J, C, T, Y, L = _mk(ws)",
            "    s = {}",
        ]
        main = [(n, e) for n, e in self.checks if n not in self.support]
        if not main:
            raise ValueError("a family needs at least one substantive (non-support) check")
        for name, expr in main:
            lines.append(f"    s[{name!r}] = _safe(lambda: {expr})")
        if self.support:
            lines.append("    real = any(bool(v) for v in s.values())")
            for name, expr in self.checks:
                if name in self.support:
                    lines.append(f"    s[{name!r}] = _safe(lambda: {expr}) if real else False")
        lines.append("    return {n: s[n] for n in " + repr([n for n, _ in self.checks]) + "}")
        return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# file-format helpers
# ----------------------------------------------------------------------------------------------


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    """CSV text: the header row, then `rows` (newline line endings)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def json_text(obj: Any) -> str:
    """Pretty-printed JSON (indent 2, non-ASCII kept) with a trailing newline."""
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def yaml_text(obj: Any) -> str:
    """YAML of `obj`, keys in insertion order."""
    return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True)


def md_table_text(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table of `header` and `rows`."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def r2(x: float) -> float:
    """`x` as a float rounded to 2 decimals."""
    return round(float(x) + 0.0, 2)


# ----------------------------------------------------------------------------------------------
# dirty data
# ----------------------------------------------------------------------------------------------


def dirty_number(rng: random.Random, x: float, p: float = 0.35) -> str:
    """A number written the way people do in spreadsheets: '$1,234.50', ' 1234.5 ', '1234.50'."""
    if rng.random() > p:
        return f"{x:.2f}"
    return rng.choice([f"${x:,.2f}", f" {x:.2f} ", f"{x:,.2f}", f"{x:.2f}"])


def dirty_text(rng: random.Random, s: str, p: float = 0.3) -> str:
    """Stray whitespace / case changes that a careful agent normalises."""
    if rng.random() > p:
        return s
    return rng.choice([f" {s}", f"{s} ", s.upper(), s.lower(), f"  {s}  "])


DATE_FORMATS = ["%Y-%m-%d", "%d/%m/%Y", "%b %d, %Y", "%Y/%m/%d"]


def dirty_date(rng: random.Random, d, p: float = 0.3) -> str:
    """`d` as ISO (YYYY-MM-DD), or with probability `p` in another common date format."""
    return d.strftime(rng.choice(DATE_FORMATS) if rng.random() < p else "%Y-%m-%d")


# ----------------------------------------------------------------------------------------------
# distractors & names
# ----------------------------------------------------------------------------------------------

FIRST = ["Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lena", "Mateo",
         "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq", "Uma", "Vik", "Wen", "Xavi", "Yara", "Zoe"]
LAST = ["Adams", "Baker", "Costa", "Diaz", "Evans", "Fischer", "Gupta", "Hughes", "Ito", "Jensen", "Kim",
        "Lopez", "Moreau", "Novak", "Okafor", "Patel", "Quist", "Rossi", "Silva", "Tanaka", "Ueda", "Vega",
        "Weber", "Xu", "Young", "Zhang"]
CITIES = ["Lisbon", "Austin", "Osaka", "Nairobi", "Toronto", "Berlin", "Pune", "Denver", "Leeds", "Porto"]
PRODUCTS = ["Widget", "Gizmo", "Sprocket", "Gadget", "Doohickey", "Flange", "Bracket", "Valve", "Coupler",
            "Spindle", "Rotor", "Hinge"]


def people(rng: random.Random, n: int) -> list[str]:
    """n distinct full names (first + last)."""
    names: list[str] = []
    while len(names) < n:
        nm = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if nm not in names:
            names.append(nm)
    return names


def first_names(rng: random.Random, n: int) -> list[str]:
    """n distinct first names."""
    return rng.sample(FIRST, n)


_DISTRACTORS: list[tuple[str, Callable[[random.Random], str]]] = [
    ("notes/todo.md", lambda r: "# TODO\n\n" + "".join(f"- [ ] {t}\n" for t in r.sample(
        ["renew parking permit", "book dentist", "reply to Sam", "order toner", "update laptop",
         "water plants", "file expenses", "call bank"], 4))),
    ("archive/old_report_2023.md", lambda r: f"# Report 2023 (superseded)\n\nNumbers here are stale. Total: {r.randint(1000, 9999)}\n"),
    ("README.md", lambda r: "# Workspace\n\nShared folder. Inputs live in input/, deliverables go to output/.\n"),
    ("scratch/ideas.txt", lambda r: "\n".join(r.sample(["dark mode?", "quarterly offsite", "rename repo",
                                                         "try duckdb", "new logo", "ask IT about VPN"], 3)) + "\n"),
    ("archive/backup_2022.csv", lambda r: csv_text(["id", "value"], [[i, r.randint(1, 99)] for i in range(1, 6)])),
    (".cache/tmp_9f3a.json", lambda r: json_text({"stale": True, "ts": r.randint(1600000000, 1700000000)})),
]


# ----------------------------------------------------------------------------------------------
# the per-task build context
# ----------------------------------------------------------------------------------------------


@dataclass
class Mutation:
    """A corruption of the oracle's outputs (path -> bytes; None deletes). Must lose score."""

    name: str
    fn: Callable[[dict[str, bytes]], dict[str, bytes]]


class Ctx:
    """What a family's build() fills. Deterministic: everything random comes from ctx.rng."""

    def __init__(self, family: Family, seed: int, persona: Any = None):
        self.family = family
        self.seed = seed
        self.persona = persona
        self.rng = random.Random(f"{family.name}:{seed}")
        self.files: dict[str, File] = {}
        self.grade = GradeCode()
        self.reference: list[ToolCall] = []
        self.instruction = ""
        self.outputs: list[str] = []
        self.rubric: list[RubricRule] = []
        self.mutations: dict[str, Mutation] = {}
        self.difficulty = family.difficulty
        self._keep: list[str] = []
        # a program teacher's solution composed for this one task (python source), recorded as its
        # Task.program_reference; families with one program for every seed keep theirs in synth/solutions/
        self.program: str | None = None
        self.source_extra: dict[str, Any] = {}  # more of Task.source (JSON-able), e.g. a composition

    # --- workspace ------------------------------------------------------------------------
    def file(self, path: str, content: str | bytes, mode: int = 0o644) -> str:
        data = content.encode() if isinstance(content, str) else content
        self.files[path] = File(path=path, content=data, mode=mode)
        return path

    def csv(self, path: str, header: list[str], rows: list[list[Any]]) -> str:
        return self.file(path, csv_text(header, rows))

    def json(self, path: str, obj: Any) -> str:
        return self.file(path, json_text(obj))

    def yaml(self, path: str, obj: Any) -> str:
        return self.file(path, yaml_text(obj))

    def text(self, path: str, path_content: str) -> str:
        return self.file(path, path_content)

    def distractors(self, k: int = 2) -> None:
        for path, make in self.rng.sample(_DISTRACTORS, k):
            if path not in self.files:
                self.file(path, make(self.rng))

    # --- instruction ----------------------------------------------------------------------
    def ask(self, core: str) -> None:
        from clawgym.synth.personas import voice

        # a separate rng: the persona never changes the workspace, the checks or the mutations
        pid = getattr(self.persona, "persona_id", "")
        self.instruction = voice(self.persona, core, random.Random(f"voice:{self.family.name}:{self.seed}:{pid}"))

    # --- verifier -------------------------------------------------------------------------
    def expect(self, key: str, value: Any) -> None:
        self.grade.expect(key, value)

    def check(self, name: str, expr: str, support: bool = False) -> None:
        """A named check of the task's grade code (see GradeCode.check for `support`)."""
        self.grade.check(name, expr, support)

    def output(self, path: str) -> str:
        """Declare a deliverable (first one = primary: the default mutations target it)."""
        if path not in self.outputs:
            self.outputs.append(path)
        return path

    def keep_inputs(self, *paths: str) -> None:
        """Adds a check (at the end of build) that the given input files are untouched — gated on the primary
        output being present and non-trivial, so an untouched workspace or a placeholder still scores 0."""
        self._keep.extend(p for p in paths if p not in self._keep)

    def _finish(self) -> None:
        import hashlib

        for c in self.reference:
            if c.name == "write" and c.arguments["path"].startswith("output/"):
                self.output(c.arguments["path"])
        if self._keep and self.outputs:
            digests = {p: hashlib.sha256(self.files[p].content).hexdigest() for p in self._keep}
            self.expect("_input_digests", digests)
            prim = self.outputs[0]
            self.check("inputs_untouched",
                       f"exists(ws, {prim!r}) and len(T({prim!r}).strip()) > 20 and "
                       "all(unchanged(ws, p, d) for p, d in E['_input_digests'].items())", support=True)

    def rubric_rule(self, name: str, file_path: str, scores: dict[str, str]) -> None:
        """A rubric rule on `file_path`. It always declares an offline proxy, so it is judged without an LLM
        judge too (a rule without one is *unjudged* offline and the task gets no score): by default the file
        must be one the agent produced, of at least 15 words; families refine it with phrases/headings."""
        from clawgym.tasks.model import RubricProxy

        proxy = RubricProxy(required_files=[file_path], min_words=15) if file_path else None
        self.rubric.append(RubricRule(name=name, file_path=file_path, scores=scores, proxy=proxy))

    def mutation(self, name: str, fn: Callable[[dict[str, bytes]], dict[str, bytes]]) -> None:
        self.mutations[name] = Mutation(name, fn)

    # --- oracle ---------------------------------------------------------------------------
    def read(self, path: str) -> None:
        self.reference.append(ToolCall(name="read", arguments={"path": path}))

    def write(self, path: str, content: str) -> None:
        if path.startswith("output/"):
            self.output(path)
        self.reference.append(ToolCall(name="write", arguments={"path": path, "content": content}))

    def edit(self, path: str, old: str, new: str) -> None:
        self.reference.append(ToolCall(name="edit", arguments={"path": path, "oldText": old, "newText": new}))

    def exec(self, command: str) -> None:
        self.reference.append(ToolCall(name="exec", arguments={"command": command}))

    def verify_json(self, path: str) -> None:
        self.exec(f"python3 -m json.tool {path} > /dev/null && echo ok")


# ----------------------------------------------------------------------------------------------
# Family + registry
# ----------------------------------------------------------------------------------------------


@dataclass
class Family:
    """A procedural task family: taxonomy placement, operations, file types and the `build(ctx)` that
    writes one task's workspace, instruction, checks and oracle."""

    name: str
    category: str
    subcategory: str
    operations: list[str]
    file_types: list[str]
    description: str
    build: Callable[[Ctx], None] = field(repr=False, default=None)  # type: ignore[assignment]
    difficulty: int = 2

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"family {self.name}: unknown category {self.category!r}")
        if self.build is None:
            raise ValueError(f"family {self.name}: build function missing")

    def generate(self, seed: int, persona: Any = None) -> Task:
        """One task, deterministic in (family, seed, persona)."""
        ctx = Ctx(self, seed, persona)
        self.build(ctx)
        ctx._finish()
        if not ctx.instruction:
            raise ValueError(f"family {self.name}: build() did not call ctx.ask()")
        if not ctx.outputs:
            raise ValueError(f"family {self.name}: no deliverable under output/")
        program = None
        if ctx.program is not None:
            from clawgym.synth.solutions import program_command

            program = [ToolCall(name="exec", arguments={"command": program_command(ctx.program)})]
        return Task(
            task_id=f"{self.name}-{seed:05d}",
            route="procedural",
            family=self.name,
            category=self.category,
            subcategory=self.subcategory,
            persona_id=getattr(persona, "persona_id", None),
            difficulty=ctx.difficulty,
            seed=seed,
            instruction=ctx.instruction,
            files=[ctx.files[p] for p in sorted(ctx.files)],
            verifier=Verifier(kind="grade", code=ctx.grade.source(), rubric=ctx.rubric or None),
            reference=list(ctx.reference),
            program_reference=program,
            source={"outputs": list(ctx.outputs), "operations": list(self.operations),
                    "file_types": list(self.file_types),
                    "mutations": sorted(ctx.mutations), **ctx.source_extra},
        )

    def mutations(self, seed: int, persona: Any = None) -> dict[str, Mutation]:
        """Family-specific mutations for a seed (rebuilds the context; deterministic)."""
        ctx = Ctx(self, seed, persona)
        self.build(ctx)
        return ctx.mutations


REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family to REGISTRY (ValueError when another family has the same name); returns it."""
    if family.name in REGISTRY and REGISTRY[family.name] is not family:
        raise ValueError(f"family {family.name!r} registered twice")
    REGISTRY[family.name] = family
    return family


def family(name: str, category: str, subcategory: str, operations: list[str], file_types: list[str],
           description: str, difficulty: int = 2) -> Callable[[Callable[[Ctx], None]], Callable[[Ctx], None]]:
    """Decorator form: @family("name", "category", ...) def build(ctx): ..."""

    def deco(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        register(Family(name, category, subcategory, operations, file_types, description, fn, difficulty))
        return fn

    return deco


def all_families() -> list[Family]:
    """Every registered family (all family modules imported), sorted by name."""
    import clawgym.synth.families  # noqa: F401  (registers every family module)

    return [REGISTRY[k] for k in sorted(REGISTRY)]


def get_family(name: str) -> Family:
    """The registered family called `name`; KeyError when there is none."""
    all_families()
    if name not in REGISTRY:
        from clawgym.synth import compose

        if name.startswith(compose.PREFIX):  # a composition of shared operations, built on demand
            return compose.composed_family(name)
        raise KeyError(f"unknown task family {name!r}")
    return REGISTRY[name]


def generate_procedural(n: int, seed: int = 0, families: list[str] | None = None,
                        personas: list[Any] | None = None) -> list[Task]:
    """n tasks, round-robin over the (sorted) families; task i of family f gets seed `seed + i // len(fams)`
    and task_id f"{family}-{seed:05d}". Personas are assigned round-robin too. Stable in (n, seed, families)."""
    fams = [get_family(f) for f in families] if families else all_families()
    if not fams:
        return []
    out: list[Task] = []
    for i in range(n):
        fam = fams[i % len(fams)]
        s = seed + i // len(fams)
        persona = personas[(i * 7 + s) % len(personas)] if personas else None
        out.append(fam.generate(s, persona))
    return out


__all__ = [
    "CHECKLIB_SOURCE", "GradeCode", "Ctx", "Family", "Mutation", "REGISTRY", "register", "family",
    "all_families", "get_family", "generate_procedural", "csv_text", "json_text", "yaml_text",
    "md_table_text", "dirty_number", "dirty_text", "dirty_date", "people", "first_names", "r2", "FIRST", "LAST",
    "CITIES", "PRODUCTS",
]

"""Composed tasks: families built from shared atomic operations, so a student can learn skills, not templates.

ClawGym-SynData composes persona × scenario × atomic operations. Here a *family* is a composition of operations
from one shared set, and every operation is one numbered step of the instruction AND one snippet of the program
teacher's solution, with the step's parameters (a file, a field, a value, a threshold) written into both:

    read        read_csv | read_json | read_jsonl | read_yaml | read_log      (parse a file into records)
    transform   dedupe | filter_eq | filter_min | rename | join | derive       (one or two, in a seeded order)
    reduce      group_sum | group_count | top_k | select                       (records -> the result)
    write       write_json | write_csv                                         (the result, in a stated schema)

A family name spells its composition, `ops_<read>_<transforms, sorted>_<reduce>_<write>` with the short codes
of `OPS` (`ops_csv_dedupe_feq_gsum_tojson`); `composed_family(name)` builds it on demand and `get_family` finds
it, so the pipeline, the gates and the lake treat it as any other family. A seed picks the domain (tickets,
sales, expenses, ...), the data, each step's parameters and the order of the transforms. Operations are
registered by name with `@operation` (reasoning-gym style); the grade code has a check per part of the
deliverable (its keys or record ids, its values, its columns, its order), so a half-right answer scores above
0 while a placeholder, an echoed instruction or a copied input scores 0 (the hacker gate holds).

The held-out-composition split is a rule on the family name, fixed before any training and independent of any
model: `heldout_composition(name)` (a hash of the name, `HELDOUT_SHARE` of the compositions). Every operation
appears in training compositions (`split_compositions` checks it), so a held-out family is a new composition
of seen operations. Training code asks only for `split_compositions()[0]`.

The program teacher's solution is composed per task from the same steps (`Task.program_reference`: one exec of
the program), so the recorded program differs with the composition, the parameters and the order.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clawgym.synth.families.base import Ctx, Family, csv_text, json_text, yaml_text

PREFIX = "ops_"
HELDOUT_SHARE = 4  # one composition in HELDOUT_SHARE is held out (by a hash of its name)


# ----------------------------------------------------------------------------------------------
# domains: the records a composed task works on (seed-dependent field names and values)
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Domain:
    """A kind of record: its file stem, id field, two categorical and two numeric fields, a lookup table for the
    join (keyed by one categorical field), the derived field (the product of the numeric ones) and renames."""

    noun: str
    stems: tuple[str, ...]
    id_field: str
    id_prefix: str
    cats: dict[str, tuple[str, ...]]
    nums: dict[str, tuple[float, float]]
    lookup: tuple[str, str, str, tuple[str, ...]]  # (file stem, key field, attribute, attribute values)
    derived: str
    renames: dict[str, str]


DOMAINS: tuple[Domain, ...] = (
    Domain("ticket", ("tickets", "support_tickets", "helpdesk"), "ticket_id", "T",
           {"team": ("ops", "web", "data", "mobile"), "priority": ("low", "medium", "high")},
           {"hours": (0.5, 12.0), "rate": (40.0, 95.0)},
           ("teams", "team", "manager", ("Ana", "Ben", "Chen", "Dara")), "cost",
           {"team": "squad", "priority": "severity", "hours": "effort", "rate": "hourly_rate"}),
    Domain("sale", ("sales", "orders", "sales_export"), "order_id", "S",
           {"region": ("north", "south", "east", "west"), "channel": ("web", "store", "phone")},
           {"qty": (1.0, 20.0), "price": (3.0, 80.0)},
           ("regions", "region", "director", ("Eli", "Farah", "Gus", "Hana")), "revenue",
           {"region": "area", "channel": "source", "qty": "units", "price": "unit_price"}),
    Domain("expense", ("expenses", "claims", "spend")
           , "expense_id", "E",
           {"dept": ("legal", "sales", "hr", "it"), "kind": ("travel", "meals", "software")},
           {"amount": (5.0, 400.0), "fx": (0.8, 1.3)},
           ("departments", "dept", "approver", ("Ivan", "Jade", "Kofi", "Lena")), "amount_eur",
           {"dept": "department", "kind": "category", "amount": "total", "fx": "fx_rate"}),
    Domain("shipment", ("shipments", "deliveries", "parcels"), "shipment_id", "P",
           {"carrier": ("dhl", "ups", "fedex", "post"), "zone": ("local", "national", "abroad")},
           {"weight": (0.2, 30.0), "tariff": (1.5, 9.0)},
           ("carriers", "carrier", "account", ("A100", "B200", "C300", "D400")), "charge",
           {"carrier": "courier", "zone": "lane", "weight": "kg", "tariff": "price_per_kg"}),
    Domain("session", ("sessions", "workouts", "training_log"), "session_id", "W",
           {"coach": ("mateo", "nia", "omar", "priya"), "level": ("beginner", "intermediate", "advanced")},
           {"minutes": (15.0, 120.0), "intensity": (1.0, 5.0)},
           ("coaches", "coach", "gym", ("Downtown", "Harbor", "Uptown", "Riverside")), "load",
           {"coach": "trainer", "level": "tier", "minutes": "duration", "intensity": "effort_level"}),
)


@dataclass
class State:
    """The records as the steps so far leave them, and their schema (field -> 'id' | 'cat' | 'num' | 'attr')."""

    dom: Domain
    rows: list[dict[str, Any]]
    schema: dict[str, str]
    rng: random.Random
    result: Any = None
    result_kind: str = ""  # "mapping" (key -> number) or "records" (list of dicts)
    result_fields: tuple[str, ...] = ()  # records: the fields; mapping: (key column, value column)
    ordered: bool = False  # the result's records are in an asked order
    comp: Composition | None = None
    # fields a transform made or renamed: the result uses each of them, so every step shows in the deliverable
    touched: list[str] = field(default_factory=list)
    dupe_ids: set = field(default_factory=set)  # ids of the records the file repeats
    input_ids: set = field(default_factory=set)  # every id in the input file
    main_checks: list = field(default_factory=list)  # the grade expressions of the result's parts

    def fields(self, *kinds: str) -> list[str]:
        return [f for f, k in self.schema.items() if k in kinds]


@dataclass(frozen=True)
class Step:
    """One step of a composed task: the instruction's sentence, the program's snippet, and (transforms and
    reduces) `apply(state)`, the step with its parameters as data, which the generator replays to check that
    leaving the step out changes the result."""

    sentence: str
    code: str
    apply: Callable[[State], None] | None = None


@dataclass(frozen=True)
class Operation:
    """An atomic operation: `kind` (read | transform | reduce | write), its short code in family names, and
    `plan(ctx, state) -> Step`, which picks the step's parameters with ctx.rng, applies it to `state` and
    returns its sentence and snippet. `needs_filter`: a records result is only graded where a filter shaped it."""

    name: str
    kind: str
    code: str
    plan: Callable[[Ctx, State], Step]
    operations: tuple[str, ...]
    file_type: str = ""


OPS: dict[str, Operation] = {}
KINDS = ("read", "transform", "reduce", "write")


def operation(name: str, kind: str, code: str, operations: tuple[str, ...], file_type: str = ""):
    """Register an operation's plan function by name (decorator)."""
    if kind not in KINDS:
        raise ValueError(f"operation {name}: kind {kind!r} is not one of {KINDS}")

    def deco(fn: Callable[[Ctx, State], Step]) -> Callable[[Ctx, State], Step]:
        if name in OPS or any(o.code == code for o in OPS.values()):
            raise ValueError(f"operation {name!r} (code {code!r}) registered twice")
        OPS[name] = Operation(name, kind, code, fn, operations, file_type)
        return fn

    return deco


def _q(s: str) -> str:
    """A python string literal (double-quoted) for a snippet."""
    return json.dumps(s)


def _num(x: float) -> float:
    return round(float(x) + 0.0, 2)


def _fmt(x: float) -> str:
    """A number as the data files write it (2 decimals)."""
    return f"{x:.2f}"


# ----------------------------------------------------------------------------------------------
# read: one file of records in some format
# ----------------------------------------------------------------------------------------------

def _stem(ctx: Ctx, st: State) -> str:
    return ctx.rng.choice(st.dom.stems)


def _file_rows(st: State) -> list[dict[str, str]]:
    """The records as text fields (what a CSV or a log line holds)."""
    out = []
    for r in st.rows:
        out.append({f: (_fmt(v) if st.schema[f] == "num" else str(v)) for f, v in r.items()})
    return out


@operation("read_csv", "read", "csv", ("read", "parse"), "csv")
def _read_csv(ctx: Ctx, st: State) -> Step:
    path = f"input/{_stem(ctx, st)}.csv"
    fields = list(st.schema)
    ctx.csv(path, fields, [[r[f] for f in fields] for r in _file_rows(st)])
    return Step(f"Read the CSV file {path}.", f"rows = list(csv.DictReader(open({_q(path)})))")


@operation("read_json", "read", "json", ("read", "parse"), "json")
def _read_json(ctx: Ctx, st: State) -> Step:
    path = f"input/{_stem(ctx, st)}.json"
    ctx.file(path, json_text(st.rows))
    return Step(f"Read the JSON list of records in {path}.", f"rows = json.load(open({_q(path)}))")


@operation("read_jsonl", "read", "jsonl", ("read", "parse"), "jsonl")
def _read_jsonl(ctx: Ctx, st: State) -> Step:
    path = f"input/{_stem(ctx, st)}.jsonl"
    ctx.file(path, "".join(json.dumps(r) + "\n" for r in st.rows))
    return Step(f"Read {path} (one JSON record per line).",
                f"rows = [json.loads(line) for line in open({_q(path)}) if line.strip()]")


@operation("read_yaml", "read", "yaml", ("read", "parse"), "yaml")
def _read_yaml(ctx: Ctx, st: State) -> Step:
    path = f"input/{_stem(ctx, st)}.yaml"
    ctx.file(path, yaml_text(st.rows))
    return Step(f"Read the YAML list of records in {path}.", f"import yaml\nrows = yaml.safe_load(open({_q(path)}))")


@operation("read_log", "read", "log", ("read", "parse", "extract"), "log")
def _read_log(ctx: Ctx, st: State) -> Step:
    path = f"input/{_stem(ctx, st)}.log"
    lines, t = [], ctx.rng.randint(0, 3000)
    for r in _file_rows(st):
        while ctx.rng.random() < 0.35:  # other events between the records: not records
            t += ctx.rng.randint(1, 90)
            lines.append(f"2026-03-{1 + t // 1440 % 28:02d}T{t // 60 % 24:02d}:{t % 60:02d}:00 "
                         + ctx.rng.choice(["heartbeat ok", "cache warm=1", "sync done in 2s", "warn disk=81%"]))
        t += ctx.rng.randint(1, 90)
        kv = " ".join(f"{f}={v}" for f, v in r.items())
        lines.append(f"2026-03-{1 + t // 1440 % 28:02d}T{t // 60 % 24:02d}:{t % 60:02d}:00 record {kv}")
    ctx.file(path, "\n".join(lines) + "\n")
    return Step(f"Parse {path}: each line whose second word is `record` holds one record as key=value fields.",
                f"rows = [dict(kv.split(\"=\", 1) for kv in line.split()[2:]) for line in open({_q(path)})\n"
                f"        if line.split()[1:2] == [\"record\"]]")


# ----------------------------------------------------------------------------------------------
# transform: records -> records
# ----------------------------------------------------------------------------------------------

@operation("dedupe", "transform", "dedupe", ("dedupe",))
def _dedupe(ctx: Ctx, st: State) -> Step:
    idf = st.fields("id")[0]

    def apply(s: State) -> None:
        seen, kept = set(), []
        for r in s.rows:
            if r[idf] not in seen:
                seen.add(r[idf])
                kept.append(r)
        s.rows = kept

    apply(st)
    return Step(f"Drop duplicate records with the same {idf}, keeping the first one.",
                f"seen, kept = set(), []\nfor r in rows:\n    if r[{_q(idf)}] not in seen:\n"
                f"        seen.add(r[{_q(idf)}])\n        kept.append(r)\nrows = kept", apply)


@operation("filter_eq", "transform", "feq", ("filter",))
def _filter_eq(ctx: Ctx, st: State) -> Step:
    # a field and value that keep two or more records and drop some (else one that drops some, else any)
    choices: list[tuple[int, str, str]] = []
    for f in st.fields("cat"):
        counts: dict[str, int] = {}
        for r in st.rows:
            counts[str(r[f])] = counts.get(str(r[f]), 0) + 1
        choices += [(0 if 2 <= n < len(st.rows) else 1 if n < len(st.rows) else 2, f, v)
                    for v, n in sorted(counts.items())]
    best = min(c[0] for c in choices)
    _, f, v = ctx.rng.choice([c for c in choices if c[0] == best])

    def apply(s: State) -> None:
        s.rows = [r for r in s.rows if str(r[f]) == v]

    apply(st)
    return Step(f"Keep only the records whose {f} is {v}.",
                f"rows = [r for r in rows if str(r[{_q(f)}]) == {_q(v)}]", apply)


@operation("filter_min", "transform", "fmin", ("filter",))
def _filter_min(ctx: Ctx, st: State) -> Step:
    f = ctx.rng.choice(st.fields("num"))
    vals = sorted(float(r[f]) for r in st.rows)
    if len(vals) < 2:
        t = vals[0] if vals else 0.0
    else:  # a threshold strictly between two values, keeping between a third and two thirds of the records
        i = ctx.rng.randint(max(1, len(vals) // 3), max(1, (2 * len(vals)) // 3))
        lo, hi = vals[i - 1], vals[i]
        t = _num((lo + hi) / 2) if hi - lo >= 0.02 else hi

    def apply(s: State) -> None:
        s.rows = [r for r in s.rows if float(r[f]) >= t]

    apply(st)
    return Step(f"Keep only the records with a {f} of at least {t:g}.",
                f"rows = [r for r in rows if float(r[{_q(f)}]) >= {t:g}]", apply)


@operation("rename", "transform", "rename", ("transform",))
def _rename(ctx: Ctx, st: State) -> Step:
    cands = [f for f in st.fields("cat", "num") if f in st.dom.renames and st.dom.renames[f] not in st.schema]
    a = ctx.rng.choice(cands)
    b = st.dom.renames[a]

    def apply(s: State) -> None:
        for r in s.rows:
            r[b] = r.pop(a)
        s.schema = {(b if f == a else f): k for f, k in s.schema.items()}
        s.touched = [b if f == a else f for f in s.touched] + [b]

    apply(st)
    return Step(f"Rename the field {a} to {b}.", f"for r in rows:\n    r[{_q(b)}] = r.pop({_q(a)})", apply)


@operation("join", "transform", "join", ("join",), "csv")
def _join(ctx: Ctx, st: State) -> Step:
    stem, key, attr, values = st.dom.lookup
    # the record's field holding the key: the key field itself, or its new name after a rename
    field_ = key if key in st.schema else st.dom.renames[key]
    path = f"input/{stem}.csv"
    keys = sorted({str(v) for v in st.dom.cats[key]})
    table = dict(zip(keys, ctx.rng.sample(list(values), len(keys))))
    ctx.csv(path, [key, attr], [[k, table[k]] for k in keys])

    def apply(s: State) -> None:
        for r in s.rows:
            r[attr] = table.get(str(r[field_]), "")
        s.schema[attr] = "attr"
        s.touched.append(attr)

    apply(st)
    return Step(f"Join {path}: match each record's {field_} to its {key} column and add its {attr} field.",
                f"lookup = {{x[{_q(key)}]: x[{_q(attr)}] for x in csv.DictReader(open({_q(path)}))}}\n"
                f"for r in rows:\n    r[{_q(attr)}] = lookup.get(str(r[{_q(field_)}]), \"\")", apply)


@operation("derive", "transform", "derive", ("compute",))
def _derive(ctx: Ctx, st: State) -> Step:
    a, b = st.fields("num")[:2]
    new = st.dom.derived

    def apply(s: State) -> None:
        for r in s.rows:
            if round(float(r[a]) * float(r[b]) * 1000) % 10 == 5:
                # an exact half cent: round-half-even and round-half-up disagree, so the answer would depend on
                # how an honest program rounds
                raise _Retry("half")
            r[new] = _num(float(r[a]) * float(r[b]))
        s.schema[new] = "num"
        s.touched.append(new)

    apply(st)
    return Step(f"Add a field {new} = {a} * {b}, rounded to 2 decimals.",
                f"for r in rows:\n    r[{_q(new)}] = round(float(r[{_q(a)}]) * float(r[{_q(b)}]), 2)", apply)


# ----------------------------------------------------------------------------------------------
# reduce: records -> the result (a mapping, or records with chosen fields)
# ----------------------------------------------------------------------------------------------

def _prefer(ctx: Ctx, st: State, fields: list[str]) -> str:
    """One of `fields`: a transform's field first (so that step shows in the result), then one that still varies
    (grouping by the field a filter fixed gives one group)."""
    varied = [f for f in fields if len({str(r[f]) for r in st.rows}) > 1]
    mine = [f for f in fields if f in st.touched]
    for pool in ([f for f in mine if f in varied], mine, varied, fields):
        if pool:
            return ctx.rng.choice(pool)
    raise ValueError("no field to choose from")


def _group_field(ctx: Ctx, st: State) -> str:
    return _prefer(ctx, st, st.fields("cat", "attr"))


@operation("group_sum", "reduce", "gsum", ("aggregate",))
def _group_sum(ctx: Ctx, st: State) -> Step:
    g, n = _group_field(ctx, st), _prefer(ctx, st, st.fields("num"))

    def apply(s: State) -> None:
        out: dict[str, float] = {}
        for r in s.rows:
            out[str(r[g])] = _num(out.get(str(r[g]), 0) + float(r[n]))
        s.result, s.result_kind, s.result_fields = out, "mapping", (g, f"total_{n}")

    apply(st)
    if any(float(v).is_integer() for v in st.result.values()):  # a whole number is one a guess of 1, 2, 3 can hit
        raise _Retry("whole")
    return Step(f"Total the {n} per {g}.",
                f"out = {{}}\nfor r in rows:\n    out[str(r[{_q(g)}])] = round(out.get(str(r[{_q(g)}]), 0) + "
                f"float(r[{_q(n)}]), 2)", apply)


@operation("group_count", "reduce", "gcount", ("count", "aggregate"))
def _group_count(ctx: Ctx, st: State) -> Step:
    g = _group_field(ctx, st)

    def apply(s: State) -> None:
        out: dict[str, int] = {}
        for r in s.rows:
            out[str(r[g])] = out.get(str(r[g]), 0) + 1
        s.result, s.result_kind, s.result_fields = out, "mapping", (g, "count")

    apply(st)
    return Step(f"Count the records per {g}.",
                f"out = {{}}\nfor r in rows:\n    out[str(r[{_q(g)}])] = out.get(str(r[{_q(g)}]), 0) + 1", apply)


def _pick_fields(ctx: Ctx, st: State, must: list[str]) -> list[str]:
    idf = st.fields("id")[0]
    others = [f for f in st.schema if f != idf and f not in must]
    extra = ctx.rng.sample(others, (ctx.rng.randint(0, 1) if len(must) < 2 else 0) if must else ctx.rng.randint(1, 2))
    return [idf] + [f for f in st.schema if f in set(must) | set(extra)]


@operation("top_k", "reduce", "topk", ("sort", "rank"))
def _top_k(ctx: Ctx, st: State) -> Step:
    n = _prefer(ctx, st, st.fields("num"))
    k = ctx.rng.randint(2, max(2, min(4, len(st.rows) - 1)))
    fields = _pick_fields(ctx, st, [n, *st.touched])
    top = sorted((float(r[n]) for r in st.rows), reverse=True)[:k + 1]
    if len(set(top)) < len(top):  # a tie inside the top k or at its cut: the asked records would be ambiguous
        raise _Retry("tie")

    def apply(s: State) -> None:
        s.rows = sorted(s.rows, key=lambda r: -float(r[n]))[:k]
        s.result = [{f: r[f] for f in fields} for r in s.rows]
        s.result_kind, s.result_fields, s.ordered = "records", tuple(fields), True

    apply(st)
    return Step(f"Sort the records by {n}, highest first, and keep the top {k}, with the fields "
                f"{', '.join(fields)}.",
                f"rows = sorted(rows, key=lambda r: -float(r[{_q(n)}]))[:{k}]\n"
                f"out = [{{k: r[k] for k in {json.dumps(fields)}}} for r in rows]", apply)


@operation("select", "reduce", "select", ("extract",))
def _select(ctx: Ctx, st: State) -> Step:
    fields = _pick_fields(ctx, st, list(st.touched))

    def apply(s: State) -> None:
        s.result = [{f: r[f] for f in fields} for r in s.rows]
        s.result_kind, s.result_fields = "records", tuple(fields)

    apply(st)
    return Step(f"Keep only the fields {', '.join(fields)}.",
                f"out = [{{k: r[k] for k in {json.dumps(fields)}}} for r in rows]", apply)


# ----------------------------------------------------------------------------------------------
# write: the result in a stated schema; the grade code checks each part of it
# ----------------------------------------------------------------------------------------------

def _out_stem(ctx: Ctx, st: State) -> str:
    a, b = st.result_fields[0], st.result_fields[-1]
    return ctx.rng.choice([f"{b}_by_{a}" if st.result_kind == "mapping" else f"{st.dom.noun}_report",
                           f"{st.dom.noun}_summary", "result"])


# What earns credit is only what needs the data. The asked keys, columns and field names are in the instruction
# (and in the domain's fixed vocabulary), so they earn nothing alone: they gate the parts that need the data. A part
# an answer can reach without doing its step (every input id listed, counts split evenly) scores only above what
# that shallow answer gets (`_above`). Numbers match to a tenth of a cent: every honest value is a whole number of
# cents, so an unrounded product is wrong where the instruction says to round.
_PARTS = """
TOL = 0.001


def _above(x, base):
    # the share of the way from what a shallow answer gets (base) to a full answer
    x = float(x or 0.0)
    return (1.0 if x >= 1.0 else 0.0) if base >= 1.0 else max(0.0, (x - base) / (1.0 - base))


def _map_score(got, exp, exact=False):
    # each expected key with its right value is a part; a key the answer adds is a wrong part. Keys are compared
    # as words (case and spaces aside); `exact`: all or nothing (counts: small numbers a guess can hit)
    if not isinstance(got, dict) or not got:
        return 0.0
    g = {norm(k): v for k, v in got.items()}
    if len(g) != len(got):
        return 0.0
    e = {norm(k): v for k, v in exp.items()}
    good = sum(1 for k, v in e.items() if k in g and close(g[k], v, TOL))
    s = frac(good, len(e) + sum(1 for k in g if k not in e))
    return (1.0 if s >= 1.0 else 0.0) if exact else s


def _fields_ok(rows, fields):
    return isinstance(rows, list) and len(rows) > 0 and all(
        isinstance(r, dict) and set(r) == set(fields) for r in rows)


def _unique(rows, idf):
    # a record written twice is a wrong part (a skipped dedupe)
    ids = [norm(r.get(idf)) for r in rows]
    return frac(len(set(ids)), len(ids))
"""


def _grade_mapping(ctx: Ctx, st: State, load: str) -> None:
    ctx.expect("map", st.result)
    ctx.grade.helper(_PARTS)
    exact = st.result_fields[1] == "count"
    st.main_checks.append(f"_map_score({load}, E['map'], {exact})")
    ctx.check("values", st.main_checks[-1])


def _grade_records(ctx: Ctx, st: State, load: str) -> None:
    idf = st.result_fields[0]
    ctx.expect("rows", st.result)
    ctx.expect("fields", list(st.result_fields))
    ctx.expect("ids", [str(r[idf]) for r in st.result])
    # an answer listing every input id once gets this share of the ids (and, with the raw values, of the values)
    ctx.expect("base", len(st.result) / max(1, len(st.input_ids)))
    ctx.grade.helper(_PARTS)
    # the columns asked for, exactly, gate every part (a copied input has every column: it earns none)
    ok = f"_fields_ok({load}, E['fields'])"
    uniq = f"_unique({load}, {idf!r})"
    parts = {"ids": f"set_score([norm(r[{idf!r}]) for r in {load}], [norm(i) for i in E['ids']])",
             "values": f"rows_score({load}, E['rows'], {idf!r}, E['fields'], TOL)"}
    # a field a transform made (joined, derived, renamed) is a part of its own: skipping that step loses it
    for f in st.touched:
        if f in st.result_fields:
            parts[f"field_{f}"] = f"rows_score({load}, E['rows'], {idf!r}, [{f!r}], TOL)"
    for name, expr in parts.items():
        st.main_checks.append(f"({ok} and _above({expr} * {uniq}, E['base']))")
        ctx.check(name, st.main_checks[-1])
    if st.ordered:
        ctx.check("order", f"[norm(r[{idf!r}]) for r in {load}] == [norm(i) for i in E['ids']]", support=True)


@operation("write_json", "write", "tojson", ("write",), "json")
def _write_json(ctx: Ctx, st: State) -> Step:
    path = ctx.output(f"output/{_out_stem(ctx, st)}.json")
    if st.result_kind == "mapping":
        a, b = st.result_fields
        what = f"as a JSON object mapping each {a} to its {b}"
        _grade_mapping(ctx, st, f"J({path!r})")
    else:
        what = "as a JSON list of records"
        _grade_records(ctx, st, f"J({path!r})")
    ctx.write(path, json_text(st.result))
    return Step(f"Write the result to {path} {what}.",
                f"os.makedirs(\"output\", exist_ok=True)\njson.dump(out, open({_q(path)}, \"w\"), indent=2)")


@operation("write_csv", "write", "tocsv", ("write",), "csv")
def _write_csv(ctx: Ctx, st: State) -> Step:
    path = ctx.output(f"output/{_out_stem(ctx, st)}.csv")
    head = list(st.result_fields)
    opn = f"os.makedirs(\"output\", exist_ok=True)\nwith open({_q(path)}, \"w\", newline=\"\") as f:\n"
    if st.result_kind == "mapping":
        ctx.grade.helper("def _csv_map(rows, head):\n"
                         "    if not rows or list(rows[0]) != head:\n        raise ValueError('columns')\n"
                         "    out = {r[head[0]]: r[head[1]] for r in rows}\n"
                         "    if len(out) != len(rows):\n        raise ValueError('a key written twice')\n"
                         "    return out")
        _grade_mapping(ctx, st, f"_csv_map(C({path!r}), {head!r})")
        ctx.check("order", f"[r[{head[0]!r}] for r in C({path!r})] == sorted(E['map'])", support=True)
        body = [[k, st.result[k]] for k in sorted(st.result)]
        sentence = (f"Write the result to {path} with the columns {', '.join(head)}, one row per {head[0]} "
                    f"sorted by {head[0]}.")
        code = (opn + f"    w = csv.writer(f)\n    w.writerow({json.dumps(head)})\n"
                "    for k in sorted(out):\n        w.writerow([k, out[k]])")
    else:
        _grade_records(ctx, st, f"C({path!r})")
        body = [[r[h] for h in head] for r in st.result]
        sentence = f"Write the result to {path} with the columns {', '.join(head)}."
        code = (opn + f"    w = csv.DictWriter(f, fieldnames={json.dumps(head)})\n    w.writeheader()\n"
                "    w.writerows(out)")
    ctx.write(path, csv_text(head, body))
    return Step(sentence, code)


# ----------------------------------------------------------------------------------------------
# compositions
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Composition:
    """A read, one or two transforms (a set: a seed orders them), a reduce and a write."""

    read: str
    transforms: tuple[str, ...]
    reduce: str
    write: str

    @property
    def name(self) -> str:
        codes = [OPS[self.read].code, *sorted(OPS[t].code for t in self.transforms), OPS[self.reduce].code,
                 OPS[self.write].code]
        return PREFIX + "_".join(codes)

    @property
    def ops(self) -> tuple[str, ...]:
        return (self.read, *self.transforms, self.reduce, self.write)


def _of_kind(kind: str) -> list[str]:
    return sorted(n for n, o in OPS.items() if o.kind == kind)


def valid(c: Composition) -> bool:
    """A composition is valid when every step can be graded: a records result (top_k, select) needs a filter to
    shape it (else the asked records are every input record); a join after a rename of its key is fine."""
    if len(set(c.transforms)) != len(c.transforms) or not 1 <= len(c.transforms) <= 2:
        return False
    if c.reduce == "select" and not {"filter_eq", "filter_min"} & set(c.transforms):
        return False
    # a mapping result shows no field name, so a rename before it changes nothing; a count shows no number, so a
    # derived one would not show either
    if c.reduce in ("group_sum", "group_count") and "rename" in c.transforms:
        return False
    return not (c.reduce == "group_count" and "derive" in c.transforms)


def all_compositions() -> list[Composition]:
    """Every valid composition, sorted by name."""
    out = []
    for r, w, red in itertools.product(_of_kind("read"), _of_kind("write"), _of_kind("reduce")):
        for n in (1, 2):
            for ts in itertools.combinations(_of_kind("transform"), n):
                c = Composition(r, ts, red, w)
                if valid(c):
                    out.append(c)
    return sorted(out, key=lambda c: c.name)


def heldout_composition(name: str) -> bool:
    """Whether composition `name` is held out of training: a hash of the name, nothing a model could move."""
    return int(hashlib.sha256(f"compose-split:{name}".encode()).hexdigest(), 16) % HELDOUT_SHARE == 0


def split_compositions() -> tuple[list[str], list[str]]:
    """(training, held-out) composition family names. ValueError when some operation is in no training
    composition (a held-out family must be a new composition of seen operations)."""
    names = [c.name for c in all_compositions()]
    train = [n for n in names if not heldout_composition(n)]
    held = [n for n in names if heldout_composition(n)]
    seen = {op for n in train for op in parse(n).ops}
    missing = sorted(set(OPS) - seen)
    if missing:
        raise ValueError(f"operations in no training composition: {missing}")
    return train, held


def sample_compositions(names: list[str], k: int, salt: str) -> list[str]:
    """k of `names`, always the same k for the same arguments (a sample of the sorted names seeded by `salt`),
    sorted."""
    names = sorted(names)
    return sorted(random.Random(f"compose-sample:{salt}").sample(names, min(k, len(names))))


def is_composed(family: str | None) -> bool:
    """Whether `family` is a composed family (by its name)."""
    return bool(family) and str(family).startswith(PREFIX)


def parse(name: str) -> Composition:
    """The composition a family name spells; KeyError naming the part that is not an operation's code."""
    if not name.startswith(PREFIX):
        raise KeyError(f"{name!r} is not a composed family (no {PREFIX!r} prefix)")
    by_code: dict[tuple[str, str], str] = {(o.kind, o.code): n for n, o in OPS.items()}
    parts = name[len(PREFIX):].split("_")
    if len(parts) < 4:
        raise KeyError(f"{name!r}: a composed family is {PREFIX}<read>_<transforms>_<reduce>_<write>")
    kinds = ["read"] + ["transform"] * (len(parts) - 3) + ["reduce", "write"]
    ops = []
    for kind, code in zip(kinds, parts):
        if (kind, code) not in by_code:
            have = ", ".join(o.code for o in OPS.values() if o.kind == kind)
            raise KeyError(f"{name!r}: {code!r} is no {kind} operation ({have})")
        ops.append(by_code[(kind, code)])
    c = Composition(ops[0], tuple(ops[1:-2]), ops[-2], ops[-1])
    if not valid(c) or c.name != name:
        raise KeyError(f"{name!r} is not a valid composition (canonical name: transforms sorted by code)")
    return c


# ----------------------------------------------------------------------------------------------
# the family of a composition
# ----------------------------------------------------------------------------------------------

def _records(ctx: Ctx, dom: Domain, dupes: bool) -> State:
    rng = ctx.rng
    n = rng.randint(9, 14)
    # ids from a space no guess covers (an answer naming every possible id earns nothing), numbers distinct in
    # cents (a sort has no ties)
    ids = rng.sample(range(10000, 100000), n)
    nums = {f: rng.sample(range(int(lo * 100), int(hi * 100)), n) for f, (lo, hi) in dom.nums.items()}
    # categorical values: each at least once, the rest drawn with uneven weights (counts a guess cannot split evenly)
    cols = {}
    for f, vals in dom.cats.items():
        w = [rng.uniform(0.15, 1.0) ** 2 for _ in vals]
        col = list(vals) + rng.choices(list(vals), weights=w, k=n - len(vals))
        rng.shuffle(col)
        cols[f] = col
    rows = []
    for i in range(n):
        r: dict[str, Any] = {dom.id_field: f"{dom.id_prefix}-{ids[i]}"}
        for f in dom.cats:
            r[f] = cols[f][i]
        for f in dom.nums:
            r[f] = nums[f][i] / 100
        rows.append(r)
    st = State(dom, rows, {dom.id_field: "id", **{f: "cat" for f in dom.cats}, **{f: "num" for f in dom.nums}}, rng)
    st.input_ids = {r[dom.id_field] for r in rows}
    if dupes:  # records repeated, as exports do: how many is the seed's (the file's length says nothing)
        for r in rng.sample(rows, rng.randint(1, 4)):
            rows.insert(rng.randint(0, len(rows)), dict(r))
            st.dupe_ids.add(r[dom.id_field])
    return st


class _Retry(Exception):
    """This seed's draw would leave a step without effect or an answer ambiguous: draw again."""


def _reset(ctx: Ctx, attempt: int) -> None:
    """A fresh context for another draw of the same task (deterministic in family, seed and attempt)."""
    fresh = Ctx(ctx.family, ctx.seed, ctx.persona)
    ctx.__dict__.update(fresh.__dict__)
    if attempt:
        ctx.rng = random.Random(f"{ctx.family.name}:{ctx.seed}:draw{attempt}")


def _build_once(ctx: Ctx, comp: Composition) -> None:
    dom = ctx.rng.choice(DOMAINS)
    st = _records(ctx, dom, "dedupe" in comp.transforms)
    st.comp = comp
    transforms = list(comp.transforms)
    ctx.rng.shuffle(transforms)  # the order is the seed's: a program is not one fixed sequence
    # any order works: a join matches its key field under its current name, a filter names current fields
    order = [comp.read, *transforms, comp.reduce, comp.write]
    steps = [OPS[order[0]].plan(ctx, st)]
    start = (copy.deepcopy(st.rows), dict(st.schema))
    steps += [OPS[name].plan(ctx, st) for name in order[1:-1]]
    for i in range(1, len(order) - 2):  # each transform (steps[1:] are the transforms and the reduce)
        if _same_without(st, start, steps[1:], i - 1):
            raise _Retry(f"{order[i]} shows nowhere")  # every step must change what the deliverable holds
    steps.append(OPS[order[-1]].plan(ctx, st))
    lead = ctx.rng.choice([f"Process the {dom.noun} records for me:",
                           f"Please prepare this from the {dom.noun} data:",
                           f"I need a quick {dom.noun} report. Steps:"])
    ctx.ask(lead + "\n" + "\n".join(f"{i}. {s.sentence}" for i, s in enumerate(steps, 1)))
    # the inputs stay as they were: credited beside a complete result only (a partial answer earns its parts, not
    # this one)
    ctx.expect("_input_digests", {p: hashlib.sha256(f.content).hexdigest()
                                  for p, f in sorted(ctx.files.items()) if p.startswith("input/")})
    ctx.check("inputs_untouched", "all(unchanged(ws, p, d) for p, d in E['_input_digests'].items()) and "
              + " and ".join(f"{c} >= 1.0" for c in st.main_checks))
    ctx.distractors(1)
    ctx.program = "import csv, json, os\n" + "\n".join(s.code for s in steps) + "\n"
    ctx.source_extra = {"composition": order, "split": "heldout_composition" if heldout_composition(
        ctx.family.name) else "train_composition"}


def _same_without(st: State, start: tuple, steps: list[Step], skip: int) -> bool:
    """Whether the transforms and the reduce in `steps`, replayed from `start` without step `skip`, give the
    result `st` holds (that step would then be one no check can see). A replay that fails (a field the skipped
    step made is missing) is a different result; one that meets an ambiguous value counts as the same."""
    s = State(st.dom, copy.deepcopy(start[0]), dict(start[1]), st.rng, comp=st.comp)
    try:
        for i, step in enumerate(steps):
            if i != skip and step.apply is not None:
                step.apply(s)
    except _Retry:  # the replay met an ambiguous value (a half cent another path keeps): draw again to be sure
        return True
    except Exception:
        return False
    return s.result == st.result and s.result_fields == st.result_fields


# draws of one seed before giving up (a draw is < 1 ms; the hardest compositions, a derived number behind a filter
# on one of its factors and sorted by it, need ~15 on average: a filter that keeps the top k is invisible)
DRAWS = 400


def _build(comp: Composition) -> Callable[[Ctx], None]:
    def build(ctx: Ctx) -> None:
        for attempt in range(DRAWS):
            _reset(ctx, attempt)
            try:
                return _build_once(ctx, comp)
            except _Retry:
                continue
        raise ValueError(f"{comp.name} seed {ctx.seed}: no draw in {DRAWS} where every step shows")
    return build


_FAMILIES: dict[str, Family] = {}


def composed_family(name: str) -> Family:
    """The family of composition `name` (built once; KeyError when the name is no valid composition)."""
    if name not in _FAMILIES:
        comp = parse(name)
        ops_tags = sorted({t for op in comp.ops for t in OPS[op].operations})
        ftypes = sorted({OPS[op].file_type for op in comp.ops if OPS[op].file_type})
        desc = "composed: " + " -> ".join(comp.ops)
        _FAMILIES[name] = Family(name, "analysis_reasoning", "data analysis and calculation",
                                 ops_tags, ftypes, desc, _build(comp), difficulty=2)
    return _FAMILIES[name]


__all__ = ["OPS", "KINDS", "DOMAINS", "Operation", "Step", "State", "Composition", "operation", "all_compositions",
           "heldout_composition", "split_compositions", "sample_compositions", "is_composed", "parse",
           "composed_family", "PREFIX",
           "HELDOUT_SHARE"]

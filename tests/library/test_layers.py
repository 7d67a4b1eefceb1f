"""The library's layers (docs/ARCHITECTURE.md "Layers"), read from the source with `ast`, no import.

- Every import arrow inside clawgym/ goes from a unit to itself or to a unit of a LOWER layer; units of one layer
  are peers and never import each other. The order is written once, in `LAYERS` (the packages) and `INNER` (the
  units inside a package), as the code obeys it today; the arrows that break it are listed in `KNOWN_BREAKS` with
  the reason, and the test fails on a new wrong-way arrow and on a listed one that is gone (shrink the list).
  Function-local imports and `if TYPE_CHECKING:` imports count: a lazy import is still an arrow.
- Programs shipped as text (into a sandbox, a Harbor container, a grade() body) import the standard library only,
  and of clawgym only the stdlib-only modules that travel with them.
- clawgym/ never imports Dagster or clawgym_assets (the layer above it), except the CLI entry
  point that lives in the package.
- Every `clawgym/…`, `clawgym_assets/…` path in backticks in docs/ARCHITECTURE.md exists.
- Every read of the environment in clawgym/ outside the CLI entry point is a row of docs/NOTES.md "Environment
  reads outside the edges".
- No function in clawgym/ or clawgym_assets/ is over MAX_FUNCTION_LINES lines: a longer one has parts a reader
  wants names for.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "clawgym"

# ---------------------------------------------------------------------------------------------------------------
# the order, lowest layer first. A unit is a dotted prefix; a module belongs to the longest unit that prefixes it
# ("clawgym" itself is only the package's __init__: its constants).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("clawgym", "clawgym.fsatomic", "clawgym.quality", "clawgym.keys"),  # core: constants, atomic folders, data
    #                                                        quality, API keys read by name
    ("clawgym.tasks",),                                   # the Task model, its formats, Harbor import
    ("clawgym.lake", "clawgym.sandbox"),                  # storage; sandboxes (inner order below)
    ("clawgym.verify", "clawgym.serve", "clawgym.stats"),  # scoring, the clean room, judges; the embedded model
    #                                                        server; score statistics (bench and the demo's report)
    ("clawgym.tasks.harbor_export",),                     # Harbor export: ships the verifier's own files
    ("clawgym.agent",),                                   # rollouts: loop, policies, OpenClaw + proxy, runtimes
    ("clawgym.synth", "clawgym.bench"),                   # synthesis; bench
    ("clawgym.trajectories",),                            # rollouts -> SFT rows
    ("clawgym.train",),                                   # SFT / GRPO / checkpoints
    ("clawgym.cli",),                                     # the entry point `clawgym` (and `clawgym export harbor`)
)

# inside a package: arrows between its units (both ends inside it) follow this order
INNER: dict[str, tuple[tuple[str, ...], ...]] = {
    "clawgym.sandbox": (
        ("clawgym.sandbox.host.export",),                    # the export data (stdlib only) the protocol returns
        ("clawgym.sandbox.base", "clawgym.sandbox.guest"),   # the protocol; guest programs (files, path constants)
        ("clawgym.sandbox.host",),                           # host-side access shared by the backends
        ("clawgym.sandbox",),                                # registry, pool, local backend, spawner, images, bench
        ("clawgym.sandbox.docker", "clawgym.sandbox.bwrap"),  # one unit per backend, found by name (registry)
    ),
}

# (importing module, imported unit) -> why the arrow goes the wrong way (docs/NOTES.md "Layer order").
KNOWN_BREAKS: dict[tuple[str, str], str] = {}  # none left: a wrong-way arrow is moved, not listed

# programs shipped as text: they import the standard library and, of clawgym, only STDLIB_MODULES
SHIPPED_DIRS = ("clawgym/sandbox/guest", "clawgym/tasks/harbor_side")
STDLIB_MODULES = {
    "clawgym.agent.toolcore": "bundled with the synth drivers (guest/synth.SHIPPED)",
    "clawgym.verify.scoring": "bundled with the synth drivers (guest/synth.SHIPPED)",
    "clawgym.agent.proxy_forwarder": "its source is the in-sandbox forwarder (agent.openclaw.FORWARDER)",
    "clawgym.synth.checklib": "its source is prepended to every procedural grade() (yaml optional)",
}
OPTIONAL_IN_SANDBOX = {"yaml", "pytest", "_pytest"}  # in the sandbox image, imported under try
# a stdlib-only module shipped next to a program under its own name
SIBLINGS = {"clawgym/tasks/harbor_side/clawgym_solve.py": {"toolcore": "clawgym.agent.toolcore"},
            "clawgym/tasks/harbor_side/clawgym_verify.py": {"scoring": "clawgym.verify.scoring"}}

# the layers above the library, and the only modules of it that may import them
ABOVE = ("dagster", "clawgym_assets")
EDGE_IMPORTS = {
    "clawgym.cli": {"dagster", "clawgym_assets"},  # the CLI main (pyproject: clawgym.cli:app)
    "clawgym.train.pipes_sft": {"dagster_pipes"},  # `python -m clawgym.train.pipes_sft`: a Pipes child process
}


# ---------------------------------------------------------------------------------------------------------------
def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def library_sources() -> dict[str, tuple[str, str]]:
    """{dotted name: (path relative to the repo, source)} of every .py file under clawgym/."""
    return {module_name(p): (str(p.relative_to(ROOT)), p.read_text())
            for p in sorted(LIB.rglob("*.py")) if "__pycache__" not in p.parts}


def imports(mod: str, path: str, source: str, known: set[str]) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement of one file, anywhere in it; relative imports resolved,
    `from pkg import sub` read as pkg.sub where that is a module."""
    tree = ast.parse(source, filename=path)
    is_pkg = path.endswith("__init__.py")
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub if sub in known else target, node.lineno))
    return out


def _units(layers) -> dict[str, int]:
    return {unit: i for i, layer in enumerate(layers) for unit in layer}


def unit_of(mod: str, units) -> str | None:
    best = None
    for r in units:
        if (mod == r or (r != "clawgym" and mod.startswith(r + "."))) and (best is None or len(r) > len(best)):
            best = r
    return best


def is_shipped(mod: str, path: str) -> bool:
    solutions = "clawgym/synth/solutions/"
    if path.startswith(solutions) and path.count("/") == 3 and not Path(path).name.startswith("_"):
        return True  # a family's program solution, run in a sandbox
    return any(path.startswith(d + "/") for d in SHIPPED_DIRS) or mod in STDLIB_MODULES


def layer_arrows(sources: dict[str, tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    """Every wrong-way arrow: {(importing module, imported unit): ["path:line -> module", ...]}."""
    known = set(sources)
    top = _units(LAYERS)
    bad: dict[tuple[str, str], list[str]] = {}
    for mod, (path, src) in sources.items():
        if is_shipped(mod, path):
            continue  # its imports are checked by test_shipped_programs_import_only_the_stdlib
        src_unit = unit_of(mod, top)
        assert src_unit is not None, f"{path}: module {mod} is in no unit of LAYERS (add its package)"
        for target, line in imports(mod, path, src, known):
            if not (target == "clawgym" or target.startswith("clawgym.")):
                continue
            dst_unit = unit_of(target, top)
            assert dst_unit is not None, f"{path}:{line}: {target} is in no unit of LAYERS"
            if dst_unit == src_unit:
                inner = INNER.get(src_unit)
                if inner is None:
                    continue
                iunits = _units(inner)
                a, b = unit_of(mod, iunits), unit_of(target, iunits)
                if a == b or iunits[b] < iunits[a]:
                    continue
                key = (mod, b)
            elif top[dst_unit] < top[src_unit]:
                continue
            else:
                key = (mod, dst_unit)
            bad.setdefault(key, []).append(f"{path}:{line} -> {target}")
    return bad


def test_every_module_is_in_a_layer_unit():
    sources = library_sources()
    assert len(sources) > 150
    top = _units(LAYERS)
    for mod, (path, _) in sources.items():
        assert unit_of(mod, top), f"{path}: {mod} is in no unit of LAYERS"
    for pkg, inner in INNER.items():
        units = _units(inner)
        for mod, (path, _) in sources.items():
            if mod == pkg or mod.startswith(pkg + "."):
                assert unit_of(mod, units), f"{path}: {mod} is in no unit of INNER[{pkg!r}]"
    # every unit names a real package or module
    for unit in [*top, *(r for inner in INNER.values() for r in _units(inner))]:
        assert unit in sources, f"unit {unit} is no module of clawgym/"


def test_no_import_goes_up_a_layer():
    bad = layer_arrows(library_sources())
    new = {k: v for k, v in bad.items() if k not in KNOWN_BREAKS}
    assert not new, ("imports from a lower layer to a higher one (docs/ARCHITECTURE.md \"Layers\"; the order is "
                     "LAYERS/INNER in tests/library/test_layers.py):\n" + "\n".join(
                         f"  {m} -> {r}: " + "; ".join(v) for (m, r), v in sorted(new.items())))
    gone = sorted(set(KNOWN_BREAKS) - set(bad))
    assert not gone, f"KNOWN_BREAKS lists arrows that no longer exist (remove them): {gone}"


def test_a_wrong_way_import_is_caught():
    """The check fails on an added arrow: a lazy import of the agent from the tasks package, a backend unit
    imported by the host unit, a peer importing a peer."""
    sources = dict(library_sources())
    probes = {
        "clawgym.tasks._probe": "def f():\n    from clawgym.agent.rollout import run_rollout\n",
        "clawgym.sandbox.host._probe": "import clawgym.sandbox.docker.backend\n",
        "clawgym.synth._probe": "from clawgym.bench import stats\n",
        "clawgym.lake._probe": "from ..sandbox.base import Sandbox\n",
    }
    for mod, src in probes.items():
        sources[mod] = (mod.replace(".", "/") + ".py", src)
    probes["clawgym.verify._probe"] = "from clawgym.sandbox.host import fstree\nfrom clawgym.tasks import Task\n"
    sources["clawgym.verify._probe"] = ("clawgym/verify/_probe.py", probes["clawgym.verify._probe"])
    bad = layer_arrows(sources)
    assert {k for k in bad if k[0].endswith("._probe")} == {
        ("clawgym.tasks._probe", "clawgym.agent"), ("clawgym.sandbox.host._probe", "clawgym.sandbox.docker"),
        ("clawgym.synth._probe", "clawgym.bench"), ("clawgym.lake._probe", "clawgym.sandbox")}  # verify's: downward


def _top_names(mod: str, path: str, src: str, known: set[str]) -> set[str]:
    return {t.split(".")[0] for t, _ in imports(mod, path, src, known) if t}


def test_shipped_programs_import_only_the_stdlib():
    sources = library_sources()
    known = set(sources)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    checked = 0
    for mod, (path, src) in sources.items():
        if not is_shipped(mod, path):
            continue
        checked += 1
        for target, line in imports(mod, path, src, known):
            if target.split(".")[0] in stdlib or target.split(".")[0] in OPTIONAL_IN_SANDBOX:
                continue
            if target in STDLIB_MODULES and mod not in STDLIB_MODULES:
                continue
            if SIBLINGS.get(path, {}).get(target) in STDLIB_MODULES:
                continue  # e.g. solution/toolcore.py, clawgym.agent.toolcore verbatim (tasks/harbor.py)
            if path.startswith("clawgym/sandbox/guest/") and target.startswith("clawgym.sandbox.guest"):
                continue  # the guest's own modules travel together (guest/synth.bundle())
            raise AssertionError(f"{path}:{line}: a program shipped as text imports {target} (stdlib only; of "
                                 f"clawgym only the stdlib-only modules {sorted(STDLIB_MODULES)})")
    assert checked > 40  # the guest, harbor_side, the family solutions and the stdlib-only modules
    from clawgym.sandbox.guest.synth import SHIPPED

    shipped = {"clawgym." + s.removesuffix(".py").replace("/", ".") for s in SHIPPED}
    assert {m for m in shipped if not m.startswith("clawgym.sandbox.guest")} <= set(STDLIB_MODULES)


def test_the_library_imports_nothing_above_it():
    sources = library_sources()
    known = set(sources)
    found: dict[str, set[str]] = {}
    for mod, (path, src) in sources.items():
        above = {n for n in _top_names(mod, path, src, known)
                 if n in ABOVE or n.startswith("dagster_")}
        if above:
            found[mod] = above
    bad = {m: n for m, n in found.items() if not n <= EDGE_IMPORTS.get(m, set())}
    assert not bad, f"clawgym/ imports Dagster / clawgym_assets (only entry points may): {bad}"
    assert found == EDGE_IMPORTS, f"EDGE_IMPORTS is out of date: found {found}"


def test_architecture_paths_exist():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    paths = sorted({p for p in re.findall(r"`([^`\s]+)`", text)
                    if p.split("/")[0] in ("clawgym", "clawgym_assets") and "/" in p})
    assert len(paths) > 15
    missing = []
    for p in paths:
        fixed = p.split("<")[0]  # `clawgym/tasks/<format>.py`: the folder it goes in
        if not (ROOT / fixed).exists():
            missing.append(p)
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


# ---------------------------------------------------------------------------------------------------------------
ENV_HEADING = "Environment reads outside the edges"
ENV_EDGES = {"clawgym/cli.py"}  # the CLI main: an entry point, it reads the environment by design


def _env_uses(node, scope: list[str], path: str, out: dict[str, set[int]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            _env_uses(child, scope + [child.name], path, out)
            continue
        hit = (isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name)
               and child.value.id == "os" and child.attr in ("environ", "getenv", "environb"))
        hit = hit or (isinstance(child, ast.ImportFrom) and child.module == "os"
                      and any(a.name in ("environ", "getenv") for a in child.names))
        if hit:
            out.setdefault(f"{path}:{'.'.join(scope) or '<module>'}", set()).add(child.lineno)
        _env_uses(child, scope, path, out)


def env_reads(sources: dict[str, tuple[str, str]]) -> dict[str, set[int]]:
    """{"path:function": lines} of every os.environ / os.getenv / environ use under clawgym/."""
    out: dict[str, set[int]] = {}
    for path, src in sources.values():
        if path not in ENV_EDGES:
            _env_uses(ast.parse(src, filename=path), [], path, out)
    return out


def env_table() -> set[str]:
    text = (ROOT / "docs" / "NOTES.md").read_text()
    m = re.search(rf"^#+ {re.escape(ENV_HEADING)}.*?$(.*?)(?=^#|\Z)", text, re.S | re.M)
    assert m, f'docs/NOTES.md has no heading "{ENV_HEADING}"'
    rows = [ln for ln in m.group(1).splitlines() if ln.startswith("| `clawgym/")]
    return {re.match(r"\| `([^`]+)`", ln).group(1) for ln in rows}


def test_every_environment_read_in_the_library_is_listed():
    found = env_reads(library_sources())
    listed = env_table()
    unlisted = sorted(set(found) - listed)
    assert not unlisted, (f'environment reads in clawgym/ not in docs/NOTES.md "{ENV_HEADING}" (read settings at '
                          f"the edges and pass parameters; or add a row saying why it stays): "
                          + ", ".join(f"{k} (line {min(found[k])})" for k in unlisted))
    stale = sorted(listed - set(found))
    assert not stale, f'docs/NOTES.md "{ENV_HEADING}" lists reads that are gone: {stale}'


# ---------------------------------------------------------------------------------------------------------------
MAX_FUNCTION_LINES = 80


def long_functions(paths, root: Path = ROOT) -> list[str]:
    """`path::name (lines)` of every function (methods and nested ones included) over MAX_FUNCTION_LINES lines,
    counted from its `def` to the last line of its body."""
    out = []
    for p in paths:
        for n in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = n.end_lineno - n.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out.append(f"{p.relative_to(root)}::{n.name} ({lines})")
    return out


def test_no_function_is_over_the_line_limit():
    paths = sorted([*LIB.rglob("*.py"), *(ROOT / "clawgym_assets").rglob("*.py")])
    assert len(paths) > 100
    assert long_functions(paths) == []


def test_a_long_function_is_caught(tmp_path):
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}")
    assert long_functions([tmp_path / "m.py"], tmp_path) == [f"m.py::long ({MAX_FUNCTION_LINES + 1})"]

"""No import circle in the package: every module of clawgym and clawgym_assets
imports on its own in a fresh interpreter (no clawgym module loaded before it), and all of them import in sorted
and in reversed order. A circle shows as an ImportError ("partially initialized module", "cannot import name")
from the entry points that meet it first.

Each module is imported in a child forked from one interpreter that has loaded only third-party packages (so a
child starts with no clawgym module, like `python -c "import <module>"`, without paying the interpreter and
dagster/torch start-up 160 times). Not modules: `__main__` files (they run a command), the program solutions
(clawgym/synth/solutions/<family>.py are programs run in a sandbox), clawgym/sandbox/guest/verify/ and the *_side
folders (files copied into sandboxes, no package)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("clawgym", "clawgym_assets")


def package_modules() -> list[str]:
    """Every importable module of the three packages, by dotted name (sorted)."""
    solutions = ROOT / "clawgym" / "synth" / "solutions"
    out = []
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            if p.name == "__main__.py" or not (p.parent / "__init__.py").exists():
                continue
            if p.parent == solutions and not p.name.startswith("_"):
                continue  # a family's program solution: a script for the sandbox, not a module
            rel = p.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out.append(".".join(parts))
    return sorted(set(out))


CHILD = r'''
import importlib, json, os, sys, traceback
mods = json.loads(sys.argv[1])
# third-party packages the modules use, loaded once in the parent (a circle is among our own modules)
for dep in ("dagster", "pydantic", "pyarrow", "pyarrow.parquet", "numpy", "yaml", "fastapi", "httpx", "uvicorn",
            "typer", "rich", "duckdb", "torch", "transformers", "trl", "datasets"):
    try:
        importlib.import_module(dep)
    except Exception:
        pass
assert not [m for m in sys.modules if m.split(".")[0] in ("clawgym", "clawgym_assets")]
bad = {}
if sys.argv[2] == "alone":
    for m in mods:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                importlib.import_module(m)
                msg = ""
            except BaseException:
                msg = traceback.format_exc()[-1500:]
            os.write(w, msg.encode())
            os._exit(0)
        os.close(w)
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        msg = b"".join(chunks).decode()
        if msg or status:
            bad[m] = msg or f"child exit status {status}"
else:  # one interpreter, every module in the given order
    for m in mods:
        try:
            importlib.import_module(m)
        except BaseException:
            bad[m] = traceback.format_exc()[-1500:]
print(json.dumps(bad))
'''


def _run(mods: list[str], mode: str) -> dict[str, str]:
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(mods), mode], cwd=ROOT, capture_output=True,
                       text=True, timeout=900, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_walk_finds_the_package():
    mods = package_modules()
    assert len(mods) > 100
    for m in ("clawgym.agent.servers", "clawgym.synth.solutions", "clawgym.synth.solutions._check",
              "clawgym_assets.definitions"):
        assert m in mods
    assert "clawgym.synth.solutions.backup_retention" not in mods and "clawgym.synth.solutions.__main__" not in mods


def test_every_module_imports_alone_in_a_fresh_interpreter():
    bad = _run(package_modules(), "alone")
    assert not bad, "modules that do not import on their own (an import circle?):\n" + "\n".join(
        f"--- {m}\n{e}" for m, e in bad.items())


def test_all_modules_import_in_sorted_and_reversed_order():
    mods = package_modules()
    for order in (mods, mods[::-1]):
        bad = _run(order, "ordered")
        assert not bad, f"import errors ({'reversed' if order[0] > order[-1] else 'sorted'} order):\n" + "\n".join(
            f"--- {m}\n{e}" for m, e in bad.items())


def test_the_teacher_imports_nothing_from_synthesis():
    """The program teacher replays task data: the policy server, the rollout and the policy registry load no
    clawgym.synth module (the old agent.servers -> synth.solutions -> agent.rollout circle)."""
    code = """
import json, sys
import clawgym.agent.servers, clawgym.agent.rollout, clawgym.agent.policies
from clawgym.agent.servers import PolicyServer
from clawgym.tasks.model import Task, ToolCall
t = Task(task_id="t1", family="backup_retention", instruction="do it",
         reference=[ToolCall(name="ls", arguments={"path": "."})],
         program_reference=[ToolCall(name="exec", arguments={"command": "echo recorded"})])
msg = PolicyServer(token="").reply("program", t, {"messages": [{"role": "user", "content": "do it"}]})
print(json.dumps([json.loads(msg["tool_calls"][0]["function"]["arguments"]),
                  sorted(m for m in sys.modules if m.startswith("clawgym.synth"))]))
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    args, synth = json.loads(r.stdout.strip().splitlines()[-1])
    assert args["command"] == "echo recorded"  # the recorded program, not one looked up by family name
    assert synth == []


def test_a_circle_is_caught(tmp_path):
    """The walk's check fails on a real circle: two modules importing a name from each other."""
    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circ.b import B\nA = 1\n")
    (pkg / "b.py").write_text("from circ.a import A\nB = 2\n")
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(["circ.a", "circ.b"]), "alone"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    bad = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(bad) == {"circ.a", "circ.b"} and "partially initialized" in bad["circ.a"]

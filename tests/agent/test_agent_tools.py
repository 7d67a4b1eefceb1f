"""The OpenClaw tool surface (clawgym.agent.tools) against a workspace sandbox."""

import json
import os
import shutil
import subprocess
import tempfile

import pytest

from clawgym.agent.tools import (
    MAX_OUTPUT_CHARS,
    TOOL_NAMES,
    TOOL_SCHEMAS,
    apply_reference,
    execute_tool,
    parse_patch,
)
from clawgym.sandbox.base import ExecResult, Sandbox, SandboxConfig
from clawgym.tasks.model import File, ToolCall


class TmpDirSandbox(Sandbox):
    """A temp-dir sandbox used only when clawgym's `local` backend is not available."""

    backend = "tmpdir"

    def __init__(self, files=()):
        self.root = tempfile.mkdtemp(prefix="cg-tools-")
        super().__init__(SandboxConfig(workspace=self.root))
        self.write_files(files)

    def _p(self, path):
        p = os.path.normpath(path if path.startswith("/") else os.path.join(self.root, path))
        if not (p == self.root or p.startswith(self.root + "/") or p.startswith("/tmp/")):
            raise ValueError(f"outside workspace: {path}")
        return p

    def exec(self, cmd, timeout=None, workdir=None, env=None, stdin=None, max_output=1_000_000):
        args = ["bash", "-c", cmd] if isinstance(cmd, str) else cmd
        try:
            r = subprocess.run(args, cwd=workdir or self.root, capture_output=True, timeout=timeout or 60,
                               input=stdin)
        except subprocess.TimeoutExpired:
            return ExecResult(124, "", "", timed_out=True)
        return ExecResult(r.returncode, r.stdout.decode(errors="replace")[:max_output],
                          r.stderr.decode(errors="replace")[:max_output])

    def write_file(self, path, content, mode=0o644):
        p = self._p(path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(content)
        os.chmod(p, mode)

    def read_file(self, path):
        with open(self._p(path), "rb") as f:
            return f.read()

    def list_files(self, path="."):
        out = []
        for d, _, fs in os.walk(self._p(path)):
            out += [os.path.relpath(os.path.join(d, f), self.root) for f in fs]
        return sorted(out)

    def remove(self, path):
        p = self._p(path)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def _open(files=()):
    try:
        from clawgym.sandbox import get_factory
        return get_factory("local").open(files)
    except Exception:
        return TmpDirSandbox(files)


@pytest.fixture
def sb():
    s = _open([File(path="notes.txt", content=b"alpha\nbeta\ngamma\n"),
               File(path="src/app.py", content=b"def greet():\n    print('Hi')\n\nx = 1\n")])
    yield s
    s.close()


def test_schemas_are_openai_tools():
    names = [t["function"]["name"] for t in TOOL_SCHEMAS]
    assert names == list(TOOL_NAMES)
    for t in TOOL_SCHEMAS:
        assert t["type"] == "function"
        assert t["function"]["parameters"]["type"] == "object"
    props = {t["function"]["name"]: t["function"]["parameters"]["properties"] for t in TOOL_SCHEMAS}
    assert set(props["read"]) == {"path", "offset", "limit"}
    assert {"path", "oldText", "newText", "edits"} <= set(props["edit"])
    assert {"command", "workdir", "timeout"} <= set(props["exec"])
    json.dumps(TOOL_SCHEMAS)


def test_read_offset_limit_and_errors(sb):
    assert execute_tool(sb, "read", {"path": "notes.txt"}).content == "alpha\nbeta\ngamma"
    r = execute_tool(sb, "read", {"path": "notes.txt", "offset": 2, "limit": 1})
    assert r.content.startswith("beta") and "Use offset=3" in r.content and not r.is_error
    r = execute_tool(sb, "read", json.dumps({"path": sb.workspace + "/notes.txt"}))
    assert r.content.startswith("alpha")
    r = execute_tool(sb, "read", {"path": "missing.txt"})
    assert r.is_error
    assert execute_tool(sb, "read", {}).is_error
    assert execute_tool(sb, "read", "{not json").is_error
    assert execute_tool(sb, "read", {"path": "../../etc/passwd"}).is_error


def test_write_edit_and_openclaw_edits(sb):
    r = execute_tool(sb, "write", {"path": "output/report.md", "content": "# R\nvalue: 1\n"})
    assert not r.is_error
    assert sb.read_file("output/report.md") == b"# R\nvalue: 1\n"
    r = execute_tool(sb, "edit", {"path": "output/report.md", "oldText": "value: 1", "newText": "value: 2"})
    assert not r.is_error and sb.read_file("output/report.md") == b"# R\nvalue: 2\n"
    r = execute_tool(sb, "edit", {"path": "output/report.md",
                                  "edits": [{"oldText": "# R", "newText": "# Report"},
                                            {"oldText": "2", "newText": "3"}]})
    assert not r.is_error and sb.read_file("output/report.md") == b"# Report\nvalue: 3\n"
    r = execute_tool(sb, "edit", {"path": "output/report.md", "oldText": "nope", "newText": "x"})
    assert r.is_error and "Could not find" in r.content
    sb.write_file("dup.txt", b"a a\n")
    r = execute_tool(sb, "edit", {"path": "dup.txt", "oldText": "a", "newText": "b"})
    assert r.is_error and "2 occurrences" in r.content
    assert sb.read_file("dup.txt") == b"a a\n"


def test_exec_ls_and_truncation(sb):
    r = execute_tool(sb, "exec", {"command": "cat notes.txt | wc -l"})
    assert r.content.strip() == "3" and not r.is_error
    r = execute_tool(sb, "exec", {"command": "pwd", "workdir": "src"})
    assert r.content.strip().endswith("/src")
    r = execute_tool(sb, "exec", {"command": "echo oops >&2; exit 3"})
    assert r.is_error and "oops" in r.content and "code 3" in r.content
    r = execute_tool(sb, "exec", {"command": "sleep 5", "timeoutSeconds": 1})
    assert r.is_error and "timed out" in r.content
    r = execute_tool(sb, "exec", {"command": f"python3 -c \"print('x' * {MAX_OUTPUT_CHARS * 3})\""})
    assert len(r.content) < MAX_OUTPUT_CHARS + 1000 and "truncated" in r.content
    r = execute_tool(sb, "ls", {})
    assert r.content.split("\n") == ["notes.txt", "src/"]
    assert execute_tool(sb, "ls", {"path": "nope"}).is_error
    assert execute_tool(sb, "frobnicate", {}).is_error


def test_apply_patch_add_update_delete_move(sb):
    patch = """*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-    print('Hi')
+    print("Hello, world!")
*** Delete File: notes.txt
*** End Patch"""
    assert [o["op"] for o in parse_patch(patch)] == ["add", "update", "delete"]
    r = execute_tool(sb, "apply_patch", {"input": patch})
    assert not r.is_error, r.content
    assert sb.read_file("hello.txt") == b"Hello world\n"
    assert sb.read_file("src/main.py") == b"def greet():\n    print(\"Hello, world!\")\n\nx = 1\n"
    assert sorted(sb.list_files(".")) == ["hello.txt", "src/main.py"]
    bad = "*** Begin Patch\n*** Update File: src/main.py\n@@\n-nope\n+x\n*** Add File: z.txt\n+z\n*** End Patch"
    r = execute_tool(sb, "apply_patch", {"input": bad})
    assert r.is_error and "could not find" in r.content
    assert "z.txt" not in sb.list_files(".")  # nothing half-applied
    assert execute_tool(sb, "apply_patch", {"input": "no markers"}).is_error


def test_apply_reference_replays_solution(sb):
    ref = [ToolCall(name="exec", arguments={"command": "mkdir -p output && sort -r notes.txt > output/s.txt"}),
           {"name": "edit", "arguments": {"path": "output/s.txt", "oldText": "gamma", "newText": "GAMMA"}},
           ToolCall(name="read", arguments={"path": "output/s.txt"})]
    res = apply_reference(sb, ref)
    assert [r.is_error for r in res] == [False, False, False]
    assert res[-1].content == "GAMMA\nbeta\nalpha"


def test_toolcore_runs_on_any_backend_and_only_infra_errors_propagate(tmp_path):
    """clawgym.agent.toolcore (what the gates' replay driver ships) on a plain directory: the same results as
    through execute_tool; a backend failure of an `infra` class propagates, any other is an is_error result."""
    from clawgym.agent import toolcore
    from clawgym.sandbox.guest.synth.replay import DirWorkspace

    (tmp_path / "a.txt").write_text("one two\n")
    ws = DirWorkspace(str(tmp_path))
    r = toolcore.execute(ws, "edit", {"path": "a.txt", "edits": [{"oldText": "one", "newText": "1"},
                                                                 {"oldText": "two", "newText": "2"}]})
    assert not r.is_error and (tmp_path / "a.txt").read_text() == "1 2\n"
    assert toolcore.execute(ws, "read", {"path": str(tmp_path / "a.txt")}).content == "1 2"  # absolute in-workspace
    assert toolcore.execute(ws, "exec", {"command": "echo hi; exit 2"}).content == "hi\n\nCommand exited with code 2"

    class Broken(RuntimeError):
        pass

    class BrokenWorkspace(DirWorkspace):
        def read_file(self, path):
            raise Broken("sandbox died")

    bad = BrokenWorkspace(str(tmp_path))
    assert toolcore.execute(bad, "read", {"path": "a.txt"}).is_error
    with pytest.raises(Broken):
        toolcore.execute(bad, "read", {"path": "a.txt"}, infra=(Broken,))

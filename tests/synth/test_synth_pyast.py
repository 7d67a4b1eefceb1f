"""Every AST the host builds while synthesizing is built one at a time.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state: two threads building ASTs at once
can fail with a SystemError, which the LLM route read as "the spec is invalid" and answered with a repair request
(a cached re-run then asked the endpoint again). These tests watch `ast.parse` itself: while one parse is in flight
no other may start, whichever host entry point (the LLM compile gate, the exploit scan, the software families) asks.
"""

from __future__ import annotations

import ast
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clawgym.synth import exploits, llm_spec, pyast
from clawgym.tasks.model import Task, Verifier

CODE = ("import json, os\n\ndef grade(transcript, workspace_path):\n"
        "    p = os.path.join(workspace_path, 'output' / 'x.csv')\n    return {'ok': 1.0}\n")


class Watch:
    """Wraps ast.parse: counts the calls and the most that were in flight at once (each held for 2 ms)."""

    def __init__(self, real):
        self.real, self.lock, self.now, self.most, self.calls = real, threading.Lock(), 0, 0, 0

    def __call__(self, *a, **kw):
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.002)
            return self.real(*a, **kw)
        finally:
            with self.lock:
                self.now -= 1


def _task(i: int) -> Task:
    return Task(task_id=f"t{i}", family="f", instruction="write output/x.csv", files=[],
                verifier=Verifier(kind="grade", code=CODE))


@pytest.mark.parametrize("entry", ["compile_gate", "exploit_outputs"])
def test_host_parses_never_overlap(monkeypatch, entry):
    watch = Watch(ast.parse)
    monkeypatch.setattr(ast, "parse", watch)
    call = {"compile_gate": lambda i: llm_spec.compile_gate(CODE),
            "exploit_outputs": lambda i: exploits.outputs_from_check_code(_task(i))}[entry]
    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(call, range(40)))
    assert watch.calls >= 40, "the entry point did not build its AST through ast.parse"
    assert watch.most == 1, f"{watch.most} ASTs were built at once"
    if entry == "compile_gate":
        assert results == [None] * 40


def test_a_spurious_depth_mismatch_is_retried_and_other_errors_are_not(monkeypatch):
    real, seen = ast.parse, []

    def flaky(src, filename="<unknown>"):
        seen.append(src)
        if len(seen) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=27, after=21)")
        return real(src, filename)

    monkeypatch.setattr(ast, "parse", flaky)
    assert isinstance(pyast.parse(CODE), ast.Module) and len(seen) == 2
    assert llm_spec.compile_gate("def grade(:\n") is not None  # a SyntaxError is still the spec's problem

    def broken(src, filename="<unknown>"):
        raise SystemError("something else")

    monkeypatch.setattr(ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        pyast.parse(CODE)

"""Python source to an AST, one parse at a time in this process.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state, so two threads building ASTs at
once can fail with "SystemError: AST constructor recursion depth mismatch" (cpython gh-106905). The gates and the LLM
pipeline parse in worker threads, and a spurious SystemError there read as "the spec is invalid" and sent a repair
request, so every AST the host builds goes through this lock. A parse in a thread outside clawgym can still collide
with ours; that one is retried once, under the lock.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, serialized; a SyntaxError is raised as ast.parse raises it."""
    with _LOCK:
        try:
            return ast.parse(source, filename)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e):
                raise
            return ast.parse(source, filename)

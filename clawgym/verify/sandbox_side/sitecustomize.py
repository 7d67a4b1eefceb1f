"""Verifier import guard (runs inside the sandbox, in every python3 the verifier starts).

Put on PYTHONPATH (a sealed, root-owned directory) only while a verifier runs. It inserts a finder in front
of the path-based finder that resolves every top-level module the interpreter's own library has (stdlib,
dist-packages: json, csv, re, pathlib, pytest, yaml, ...) from those trusted directories first. So a
`json.py`, `pytest.py` or `csv/` the agent left in the workspace (which `python3 -c`, a script's own
directory or pytest's rootdir insertion put first on sys.path) can no longer stand in for the real one,
while a module only the workspace has (the agent's `utils.py` a check imports) still imports as before.
Nothing else changes: no output, no other side effect.
"""

import importlib.machinery as _machinery
import os as _os
import sys as _sys

_GUARD_DIR = _os.path.dirname(_os.path.abspath(__file__))
_TRUSTED = [p for p in _sys.path
            if p and _os.path.isabs(p) and p.startswith("/usr/") and not p.startswith(_GUARD_DIR)]


class _TrustedFirst:
    """Top-level imports: the trusted library directories win over anything earlier on sys.path."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None or "." in name:
            return None  # submodules resolve through their (trusted) package's __path__
        return _machinery.PathFinder.find_spec(name, _TRUSTED)

    @classmethod
    def invalidate_caches(cls):
        pass


def _install():
    for i, f in enumerate(_sys.meta_path):
        if f is _machinery.PathFinder:
            _sys.meta_path.insert(i, _TrustedFirst)
            return
    _sys.meta_path.append(_TrustedFirst)


_install()

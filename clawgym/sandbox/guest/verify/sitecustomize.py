"""Verifier import guard (runs inside the sandbox, in every python3 the verifier starts).

Put on PYTHONPATH (a sealed, root-owned directory) only while a verifier runs. An allow-list, not a
fall-through:

* a top-level module the interpreter's own library directories have (stdlib, dist-packages: json, csv, re,
  pathlib, pytest, yaml, ...) always comes from there, whatever sits earlier on sys.path;
* a *protected* name those directories do not have -- anything in `sys.stdlib_module_names` or in
  `protected_modules.txt` beside this file (every name the library code imports, platform shims such as
  `nt`, `msvcrt`, `_winapi`, `org` included; see clawgym/verify/protected.py) -- is refused with
  ModuleNotFoundError, exactly as on a machine without it; it is never looked up in the workspace;
* only other names (the agent's `calc.py` that a check imports by design) may come from the workspace: in the
  grade driver such a module is a stand-in whose calls run in a child python (grade_driver.py), where it loads;
* installed distributions (importlib.metadata: entry points, pytest plugins) are discovered in the trusted
  directories only, so a `*.dist-info` in the workspace cannot register a plugin;
* the process makes itself non-dumpable, so code of the agent's that a check runs (a child, same uid) cannot read
  its memory or descriptors, or ptrace it.
Nothing else changes: no output, no other side effect.
"""

import importlib.machinery as _machinery
import os as _os
import sys as _sys

_GUARD_DIR = _os.path.dirname(_os.path.abspath(__file__))
_TRUSTED = [p for p in _sys.path
            if p and _os.path.isabs(p) and p.startswith("/usr/") and not p.startswith(_GUARD_DIR)]
try:
    with open(_os.path.join(_GUARD_DIR, "protected_modules.txt"), encoding="ascii") as _f:
        _PROTECTED = frozenset(ln.strip() for ln in _f if ln.strip() and not ln.startswith("#"))
except OSError:
    _PROTECTED = frozenset()
_PROTECTED = _PROTECTED | frozenset(getattr(_sys, "stdlib_module_names", ()))


class _TrustedFirst:
    """Top-level imports: the trusted library directories win; protected names never leave them."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None or "." in name:
            return None  # submodules resolve through their (trusted or allowed) package's __path__
        spec = _machinery.PathFinder.find_spec(name, _TRUSTED)
        if spec is not None:
            return spec
        if name in _PROTECTED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

    @classmethod
    def invalidate_caches(cls):
        pass


def _trusted(p):
    return isinstance(p, str) and _os.path.isabs(p) and p.startswith("/usr/") and not p.startswith(_GUARD_DIR)


_find_distributions = _machinery.PathFinder.find_distributions


def _trusted_distributions(*args, **kwargs):
    from importlib.metadata import DistributionFinder

    ctx = args[0] if args else kwargs.pop("context", None)
    if ctx is None:
        ctx = DistributionFinder.Context(**kwargs)
    safe = DistributionFinder.Context(name=ctx.name, path=[p for p in ctx.path if _trusted(p)])
    return _find_distributions(safe)


def _not_inspectable():
    """PR_SET_DUMPABLE 0: no process of the same uid (agent code a check runs by design) may read this verifier
    process's memory (/proc/<pid>/mem: a nonce), open its descriptors (/proc/<pid>/fd: a pipe to the score) or
    ptrace it. Inherited by forks; an exec resets it, and every python3 the verifier starts comes here again."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except Exception:  # pragma: no cover - no libc prctl: nothing more to do here
        pass


def _install():
    _not_inspectable()
    _machinery.PathFinder.find_distributions = staticmethod(_trusted_distributions)
    for i, f in enumerate(_sys.meta_path):
        if f is _machinery.PathFinder:
            _sys.meta_path.insert(i, _TrustedFirst)
            return
    _sys.meta_path.append(_TrustedFirst)


_install()

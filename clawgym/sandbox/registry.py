"""Backend registry: get_factory("auto" | <name>, config, **kwargs).

A backend registers its SandboxFactory subclass with a decorator (compare inspect_ai's `@sandboxenv`):

    @sandbox_backend("bwrap", auto=20)
    class BwrapFactory(SandboxFactory): ...

`auto` is the backend's rank for get_factory("auto") (lowest first; None: never chosen automatically):
"auto" takes the first registered backend whose `available(config)` says yes (docker when an engine answers
and has the image, else bwrap). local is never chosen automatically. Which backend a deployment wants
(e.g. $CLAWGYM_SANDBOX) is decided by the entry point (clawgym_assets.defs.rollouts.resources.SandboxResource),
not here.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from clawgym.sandbox.base import SandboxConfig, SandboxError, SandboxFactory

log = logging.getLogger(__name__)

# modules whose import registers the built-in backends (imported on first lookup)
BUILTIN_MODULES = ("clawgym.sandbox.docker.backend", "clawgym.sandbox.bwrap.backend",
                   "clawgym.sandbox.local_backend")


@dataclass(frozen=True)
class Backend:
    """A registered sandbox backend: its name, factory class and rank for "auto"."""

    name: str
    factory: type[SandboxFactory]
    auto: int | None  # rank for "auto" (lowest first), None: only by name


_registry: dict[str, Backend] = {}
_loaded = False

F = TypeVar("F", bound=type)


def sandbox_backend(name: str, *, auto: int | None = None) -> Callable[[F], F]:
    """Class decorator: register a SandboxFactory subclass as backend `name`."""

    def deco(cls: F) -> F:
        if not (isinstance(cls, type) and issubclass(cls, SandboxFactory)):
            raise TypeError(f"sandbox backend {name!r}: {cls!r} is not a SandboxFactory subclass")
        cls.name = name
        _registry[name] = Backend(name, cls, auto)
        return cls

    return deco


def _load() -> None:
    global _loaded
    if not _loaded:
        for mod in BUILTIN_MODULES:
            importlib.import_module(mod)
        _loaded = True


def backends() -> dict[str, Backend]:
    """Every registered backend by name."""
    _load()
    return dict(_registry)


def resolve_auto(config: SandboxConfig | None = None) -> str:
    """Which backend "auto" means on this machine right now: the first (by rank) whose available() says yes."""
    config = config or SandboxConfig()
    why_not: list[str] = []
    ranked = [(b.auto, b) for b in backends().values() if b.auto is not None]
    for _, b in sorted(ranked, key=lambda rb: rb[0]):
        ok, why = b.factory.available(config)
        if ok:
            if why_not:
                log.info("sandbox auto: %s; using %s", "; ".join(why_not), b.name)
            return b.name
        why_not.append(f"not {b.name} ({why})")
    raise SandboxError("no sandbox backend is available here: " + "; ".join(why_not))


def get_factory(backend: str = "auto", config: SandboxConfig | None = None, **kwargs) -> SandboxFactory:
    """A factory for `backend`. kwargs go to the backend's factory (docker: pool_size=2)."""
    config = config or SandboxConfig()
    if backend == "auto":
        backend = resolve_auto(config)
    b = backends().get(backend)
    if b is None:
        raise SandboxError(f"unknown sandbox backend {backend!r}: one of auto, {', '.join(backends())}")
    return b.factory(config, **kwargs)

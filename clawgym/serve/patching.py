"""How a serving patch replaces library attributes, and undoes that: the shared part of the patch modules.

A patch replaces an attribute (a method of a `transformers serve` class) by a wrapper of the stock one; every
wrapper keeps the stock attribute as its ``_clawgym_stock``, which is what undoing the patch puts back. A `Patch`
is one module's set of replacements: `install` checks the library release the module targets (`compat`) and
replaces them all once per process; `uninstall` (tests) puts back every stock attribute still wrapped.
"""

from __future__ import annotations

from typing import Callable, Iterable

from clawgym.serve.compat import require_transformers

# (owner, attribute name, wrap): wrap(stock) is the replacement, with the stock one as its `_clawgym_stock`
Replacement = tuple[object, str, Callable]


def restore_stock(owner, name: str) -> None:
    """Put back `owner.name`'s stock attribute when it is a patch's wrapper (nothing otherwise)."""
    stock = getattr(getattr(owner, name), "_clawgym_stock", None)
    if stock is not None:
        setattr(owner, name, stock)


class Patch:
    """One patch module's replacements (`replacements()` names them; it imports the patched library, so it is
    called only when installing or undoing), made at most once per process."""

    def __init__(self, module: str, target: str, replacements: Callable[[], Iterable[Replacement]]):
        self.module, self.target, self.replacements = module, target, replacements
        self.installed = False

    def install(self) -> None:
        require_transformers(self.module, self.target)
        if self.installed:
            return
        replacements = list(self.replacements())
        self.installed = True
        for owner, name, wrap in replacements:
            setattr(owner, name, wrap(getattr(owner, name)))

    def uninstall(self) -> None:
        for owner, name, _ in self.replacements():
            restore_stock(owner, name)
        self.installed = False


def chat_handler_replacements(handle_request: Callable, generation: Callable) -> list[Replacement]:
    """`ChatCompletionHandler.handle_request` wrapped by `handle_request(stock)`, and its `_streaming` /
    `_non_streaming` by `generation(stock, is_async)` (the non-streaming one is async)."""
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    return [(ChatCompletionHandler, "handle_request", handle_request),
            (ChatCompletionHandler, "_streaming", lambda stock: generation(stock, is_async=False)),
            (ChatCompletionHandler, "_non_streaming", lambda stock: generation(stock, is_async=True))]


def flat_ids(ids) -> list[int]:
    """A request's token ids as one list of ints (from a tensor or a list, batched [[...]] or not)."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]

"""The library versions the serving patches target, checked before any patch is installed.

Every module of this package that patches private code of a library (`transformers serve`'s handlers and
generation managers, continuous batching's model runner and cache) declares the release it was written against
(``TRANSFORMERS_VERSION``) and calls `require_transformers` in its ``install_*`` function: on any other installed
release it refuses with one error naming the module, the version it targets and the version found, instead of
patching code whose private signatures may have moved (a positional argument read by index, a method replaced
outright). pyproject.toml pins the same release. Set ``CLAWGYM_SERVE_ALLOW_TRANSFORMERS=<version>`` to try a
new release deliberately (the check then accepts exactly that version as well).
"""

from __future__ import annotations

import os

ALLOW_ENV = "CLAWGYM_SERVE_ALLOW_TRANSFORMERS"


class UnsupportedLibraryVersion(RuntimeError):
    """A serving patch was asked to install over a library release it was not written for."""


def installed_transformers() -> str:
    """The installed transformers release."""
    import transformers

    return transformers.__version__


def require_transformers(module: str, target: str, found: str | None = None) -> None:
    """Raise `UnsupportedLibraryVersion` unless the installed transformers is `target` (or $CLAWGYM_SERVE_ALLOW_...)."""
    found = installed_transformers() if found is None else found
    if found == target or (os.environ.get(ALLOW_ENV) or "").strip() == found:
        return
    raise UnsupportedLibraryVersion(
        f"{module} patches private code of transformers {target}, but transformers {found} is installed: "
        f"install transformers=={target} (pyproject.toml pins it), or port the patch and update "
        f"{module}.TRANSFORMERS_VERSION ({ALLOW_ENV}={found} tries it anyway)")


def installed_torch() -> str:
    """The installed torch release, without its local build tag (+cpu)."""
    import torch

    return torch.__version__.split("+")[0]


def require_torch(module: str, target: str, found: str | None = None) -> None:
    """Like `require_transformers`, for a patch over torch's private operators (the local build tag ignored)."""
    found = installed_torch() if found is None else found
    if found == target:
        return
    raise UnsupportedLibraryVersion(
        f"{module} uses private operators of torch {target}, but torch {found} is installed: install "
        f"torch=={target} or port the patch and update {module}.TORCH_VERSION")

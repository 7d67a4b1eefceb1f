"""The serving patches' shared install / undo (clawgym.serve.patching): each module replaces exactly its attributes,
once, refuses another transformers release, and its undo puts every stock attribute back."""

import pytest

from clawgym.serve import compat, context_limit, served_prefix, token_ids


def _attrs():
    from transformers.cli.serving import utils
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    names = [(ChatCompletionHandler, n) for n in ("handle_request", "_streaming", "_non_streaming")]
    names += [(m, n) for m in (utils.GenerateManager, utils.CBGenerateManager)
              for n in ("generate_streaming", "generate_non_streaming")]
    names += [(utils.CBGenerateManager, "__init__")]
    return {(o.__name__, n): getattr(o, n) for o, n in names}


PATCHES = [(context_limit.install_context_limit, context_limit.uninstall_context_limit,
            {"handle_request", "_streaming", "_non_streaming"}),
           (served_prefix.install_served_prefix, served_prefix.uninstall_served_prefix,
            {"handle_request", "_streaming", "_non_streaming"}),
           (token_ids.install_token_ids, token_ids.uninstall_token_ids,
            {"handle_request", "generate_streaming", "generate_non_streaming", "__init__"})]


@pytest.mark.parametrize("install,uninstall,names", PATCHES)
def test_install_wraps_its_attributes_once_and_uninstall_restores_them(install, uninstall, names):
    stock = _attrs()
    install()
    try:
        once = _attrs()
        changed = {k for k in stock if once[k] is not stock[k]}
        assert {n for _, n in changed} == names
        assert all(once[k]._clawgym_stock is stock[k] for k in changed)
        install()  # a second install changes nothing
        assert _attrs() == once
    finally:
        uninstall()
    assert all(v is stock[k] for k, v in _attrs().items())


def test_all_three_stack_and_unstack():
    stock = _attrs()
    for install, _, _ in PATCHES:
        install()
    for _, uninstall, _ in reversed(PATCHES):
        uninstall()
    assert all(v is stock[k] for k, v in _attrs().items())


@pytest.mark.parametrize("install,uninstall,names", PATCHES)
def test_install_refuses_another_transformers(install, uninstall, names, monkeypatch):
    monkeypatch.setattr(compat, "installed_transformers", lambda: "4.99.0")
    monkeypatch.delenv(compat.ALLOW_ENV, raising=False)
    stock = _attrs()
    with pytest.raises(compat.UnsupportedLibraryVersion, match="4.99.0"):
        install()
    assert all(v is stock[k] for k, v in _attrs().items())

"""Requests over the model's context window (clawgym.serve.context_limit): refused with a 400 that names the model,
its window and the request's tokens, before any generation; the default completion bound cut to what fits. The
handler wrappers are driven directly with stand-ins for the model and the stock handlers (no server)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from clawgym.serve import context_limit as cl
from clawgym.serve.compat import UnsupportedLibraryVersion, require_transformers


def _model(window):
    return SimpleNamespace(config=SimpleNamespace(max_position_embeddings=window))


def test_check_fit_refuses_over_the_window_and_cuts_the_default():
    assert cl.check_fit("m", None, 10**6, 1024, None) == (None, 1024)  # no window known: unchecked
    err, _ = cl.check_fit("smol", 8192, 9161, 2048, 2048)
    assert "smol" in err and "9161" in err and "8192" in err
    err, _ = cl.check_fit("smol", 8192, 7000, 2048, 2048)  # the request asked for more than fits
    assert "7000" in err and "2048" in err and "9048" in err and "8192" in err
    assert cl.check_fit("smol", 8192, 7500, 1024, None) == (None, 692)  # the server's default, cut to fit
    assert cl.check_fit("smol", 8192, 3000, 256, 256) == (None, 256)
    assert cl.check_fit("smol", 8192, 8192, 1, None)[0]  # no room at all
    assert cl.request_bound({"max_completion_tokens": 5, "max_tokens": 9}) == 5
    assert cl.request_bound({"max_tokens": "7"}) == 7 and cl.request_bound({}) is None
    vlm = SimpleNamespace(text_config=SimpleNamespace(max_position_embeddings=4096))
    assert cl.context_window(vlm) == 4096 and cl.context_window(SimpleNamespace()) is None


def test_wrapped_handlers_answer_400_before_generating():
    calls = []

    def stock_streaming(self, request_id, model, processor, model_id, inputs, gen_config, **kw):
        calls.append(("stream", gen_config.max_new_tokens))
        return "stream"

    async def stock_non_streaming(self, request_id, model, processor, model_id, inputs, gen_config, **kw):
        calls.append(("json", gen_config.max_new_tokens))
        return "json"

    streaming = cl._checked(stock_streaming, is_async=False)
    non_streaming = cl._checked(stock_non_streaming, is_async=True)

    async def handle(body, prompt_len, stream):
        async def stock_handle(self, body, request_id):
            gen = SimpleNamespace(max_new_tokens=cl.request_bound(body) or 1024)  # as the stock handler sets it
            args = (None, "r1", _model(100), None, "tiny", {"input_ids": [[0] * prompt_len]}, gen)
            return streaming(*args) if stream else await non_streaming(*args)

        return await cl._wrap_handle_request(stock_handle)(None, body, "r1")

    for stream in (False, True):
        r = asyncio.run(handle({"max_tokens": 50}, 120, stream))  # prompt over the window
        assert r.status_code == 400
        err = json.loads(r.body)["error"]
        assert err["code"] == "context_length_exceeded" and err["type"] == "invalid_request_error"
        assert "tiny" in err["message"] and "120" in err["message"] and "100" in err["message"]
        r = asyncio.run(handle({"max_completion_tokens": 50}, 60, stream))  # prompt + asked completion over it
        assert r.status_code == 400 and "110" in json.loads(r.body)["error"]["message"]
    assert calls == []  # nothing was generated for a refused request
    assert asyncio.run(handle({}, 60, False)) == "json" and calls[-1] == ("json", 40)  # default cut to fit
    assert asyncio.run(handle({"max_tokens": 30}, 60, True)) == "stream" and calls[-1] == ("stream", 30)
    assert cl._bound_var().get() is None  # the request's bound does not leak past it


def test_install_wraps_the_handler_and_uninstall_restores_it():
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    before = (ChatCompletionHandler.handle_request, ChatCompletionHandler._streaming,
              ChatCompletionHandler._non_streaming)
    cl.install_context_limit()
    try:
        assert ChatCompletionHandler._streaming._clawgym_stock is before[1]
        assert ChatCompletionHandler._non_streaming._clawgym_stock is before[2]
    finally:
        cl.uninstall_context_limit()
    assert (ChatCompletionHandler.handle_request, ChatCompletionHandler._streaming,
            ChatCompletionHandler._non_streaming) == before


def test_version_guard_refuses_another_transformers():
    with pytest.raises(UnsupportedLibraryVersion, match="context_limit"):
        require_transformers("clawgym.serve.context_limit", cl.TRANSFORMERS_VERSION, found="4.99.0")

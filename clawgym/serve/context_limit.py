"""Requests that do not fit the model's context window are refused with a 400 (a `transformers serve` patch)."""

from __future__ import annotations

from clawgym.serve.patching import Patch, chat_handler_replacements

TRANSFORMERS_VERSION = "5.24.0"  # the transformers release whose private code this module patches (see compat)

# ---- the context window, checked before generation -----------------------------------------------------------------
# Stock `transformers serve` renders the chat template and generates whatever the prompt's length: a prompt past the
# model's position embeddings (SmolLM2-135M: 8,192) is prefilled on CPU for minutes and decoded into garbage, and
# the client waits for it (an OpenClaw request of 9,161 prompt tokens ran 600 s until OpenClaw gave up). Like
# vLLM, this server answers such a request at once with HTTP 400 and OpenAI's error body
#   {"error": {"message": "...", "type": "invalid_request_error", "param": "messages",
#              "code": "context_length_exceeded"}}
# whose message names the model, its context window and the request's prompt / completion tokens:
# - prompt tokens >= the window: refused;
# - prompt + the request's own `max_completion_tokens` / `max_tokens` > the window: refused (the client asked for
#   more than fits, vLLM's rule);
# - no completion bound in the request: the server's default (1,024 new tokens) is cut to what fits.
# The window is the model config's `max_position_embeddings` (a multimodal config's `text_config`'s); a model
# without one is not checked. Installed in the server process by the launcher (`--context-limit`).

_BOUND = None  # contextvars.ContextVar: the current request's own completion bound (None: none given)


def _bound_var():
    global _BOUND
    if _BOUND is None:
        import contextvars

        _BOUND = contextvars.ContextVar("clawgym_completion_bound", default=None)
    return _BOUND


def context_window(config) -> int | None:
    """The model's context window in tokens (`max_position_embeddings`), or None when its config has none."""
    for c in (config, getattr(config, "text_config", None)):
        n = getattr(c, "max_position_embeddings", None) if c is not None else None
        if isinstance(n, int) and n > 0:
            return n
    return None


def request_bound(body: dict) -> int | None:
    """The completion bound the request itself gives (`max_completion_tokens`, else `max_tokens`), or None."""
    for k in ("max_completion_tokens", "max_tokens"):
        v = body.get(k)
        if v is not None:
            try:
                return int(v)
            except (TypeError, ValueError):
                return None
    return None


def check_fit(model_id: str, window: int | None, prompt_tokens: int, max_new_tokens: int | None,
              requested: int | None) -> tuple[str | None, int | None]:
    """(error message or None, the max_new_tokens to generate with) for a prompt of `prompt_tokens` on a model of
    context `window` (None: unchecked), `max_new_tokens` the generation config's bound and `requested` the bound
    the request gave (None: none; the default is then cut to fit)."""
    if window is None:
        return None, max_new_tokens
    if prompt_tokens >= window:
        return (f"model {model_id}: the prompt is {prompt_tokens} tokens, but the model's context window is {window} "
                f"tokens (no room for a completion)"), max_new_tokens
    if requested is not None and prompt_tokens + requested > window:
        return (f"model {model_id}: the prompt ({prompt_tokens} tokens) plus the requested completion ({requested} "
                f"tokens) is {prompt_tokens + requested} tokens, over the model's context window of {window} "
                f"tokens"), max_new_tokens
    if max_new_tokens is not None and prompt_tokens + max_new_tokens > window:
        return None, window - prompt_tokens
    return None, max_new_tokens


def context_error(message: str):
    """The 400 response for a request over the context window (OpenAI's error body)."""
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": "messages",
                                   "code": "context_length_exceeded"}}, status_code=400)


def _prompt_len(inputs) -> int:
    ids = inputs["input_ids"]
    if hasattr(ids, "shape"):
        return int(ids.shape[-1])
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return len(ids)


def _checked(stock, is_async: bool):
    """`ChatCompletionHandler._streaming` / `_non_streaming` that refuse (or cut) a request over the window first."""

    def refusal(model, model_id, inputs, gen_config):
        err, new_max = check_fit(model_id, context_window(getattr(model, "config", None)), _prompt_len(inputs),
                                 getattr(gen_config, "max_new_tokens", None), _bound_var().get())
        if err is None and new_max != getattr(gen_config, "max_new_tokens", None):
            gen_config.max_new_tokens = new_max
        return context_error(err) if err else None

    if is_async:
        async def non_streaming(self, request_id, model, processor, model_id, inputs, gen_config, *args, **kwargs):
            refused = refusal(model, model_id, inputs, gen_config)
            if refused is not None:
                return refused
            return await stock(self, request_id, model, processor, model_id, inputs, gen_config, *args, **kwargs)

        non_streaming._clawgym_stock = stock
        return non_streaming

    def streaming(self, request_id, model, processor, model_id, inputs, gen_config, *args, **kwargs):
        refused = refusal(model, model_id, inputs, gen_config)
        if refused is not None:
            return refused
        return stock(self, request_id, model, processor, model_id, inputs, gen_config, *args, **kwargs)

    streaming._clawgym_stock = stock
    return streaming


def _wrap_handle_request(stock):
    async def handle_request(self, body, request_id):
        token = _bound_var().set(request_bound(body))
        try:
            return await stock(self, body, request_id)
        finally:
            _bound_var().reset(token)

    handle_request._clawgym_stock = stock
    return handle_request


_PATCH = Patch(__name__, TRANSFORMERS_VERSION, lambda: chat_handler_replacements(_wrap_handle_request, _checked))


def install_context_limit() -> None:
    """Refuse chat completions over the model's context window in this process's `transformers serve` (see above)."""
    _PATCH.install()


def uninstall_context_limit() -> None:
    """Undo `install_context_limit` (tests)."""
    _PATCH.uninstall()

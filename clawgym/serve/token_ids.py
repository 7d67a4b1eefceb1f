"""Token-exact responses: prompt/completion token ids and sampled log-probabilities (a `transformers serve` patch)."""

from __future__ import annotations

from clawgym.serve.patching import Patch, flat_ids

TRANSFORMERS_VERSION = "5.24.0"  # the transformers release whose private code this module patches (see compat)

# ---- token-exact responses: prompt/completion token ids and sampled log-probabilities -----------------------------
# RL wants the tokens that were sampled, not a re-tokenization of the text (`prompt_token_ids` may differ from a
# re-render of the conversation, and a decoded-then-re-encoded completion may split into other tokens). Like vLLM,
# a chat-completion request may ask for them, streamed or not:
#   "return_token_ids": true  -> the response's top level gets "prompt_token_ids" (the ids the chat template
#                                rendered, as generated from) and the choice "token_ids" (the generated ids, the
#                                end-of-turn token included)
#   "logprobs": true          -> the choice gets OpenAI's "logprobs": {"content": [{"token", "logprob", "bytes",
#                                "top_logprobs": []}, ...]}, one entry per generated token: its log-probability
#                                under the distribution it was drawn from (after temperature; greedy: the model's)
# Continuous batching reports the log-probabilities of its own sampling step (ContinuousBatchingConfig
# .return_logprobs, switched on by this launcher); the sequential path scores the generated tokens with one forward
# pass on its inference thread.
# Streamed (``"stream": true``), the same fields ride on the chunks, as vLLM sends them: the first chunk carries
# ``prompt_token_ids`` at its top level, and every content / tool-call chunk (and the final one, with the
# finish reason) carries on its choice the ``token_ids`` generated since the previous chunk and, with
# ``logprobs``, their ``logprobs.content`` entries; concatenated over the stream they are exactly the
# non-streamed fields (`test_serve_stream_tokens`). Tokens that produced no text yet (a partial UTF-8
# character, a held tool call, the end-of-turn token) ride on a later chunk, the last ones on the final chunk.
# Installed in the server process by the launcher (`--token-ids`).

TOKEN_FIELDS = ("return_token_ids",)  # request fields this extension reads (and removes before validation)
_TOKEN_BOX = None  # contextvars.ContextVar holding the current request's capture dict


def _token_box():
    global _TOKEN_BOX
    if _TOKEN_BOX is None:
        import contextvars

        _TOKEN_BOX = contextvars.ContextVar("clawgym_token_box", default=None)
    return _TOKEN_BOX


def _forward_logprobs(model, prompt_ids: list[int], completion_ids: list[int], gen_config) -> list[float]:
    """log p(token) of each completion token given what precedes it, under the sampling distribution of
    `gen_config` (logits / temperature when sampling)."""
    import torch

    if not completion_ids:
        return []
    ids = torch.tensor([prompt_ids + completion_ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    if getattr(gen_config, "do_sample", False) and (gen_config.temperature or 1.0) not in (0.0, 1.0):
        logits = logits / float(gen_config.temperature)
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(1, torch.tensor(completion_ids, device=lp.device)[:, None])[:, 0].tolist()


def _wrap_sequential_generate(stock):
    async def generate_non_streaming(self, model, processor, inputs, gen_config, request_id):
        text, input_len, generated = await stock(self, model, processor, inputs, gen_config, request_id)
        box = _token_box().get()
        if box is not None:
            prompt, completion = flat_ids(inputs["input_ids"]), flat_ids(generated)
            box.update(prompt=prompt, completion=completion, tokenizer=getattr(processor, "tokenizer", processor))
            if box.get("want_logprobs"):
                box["logprobs"] = await self.async_submit(_forward_logprobs, model, prompt, completion, gen_config)
        return text, input_len, generated

    generate_non_streaming._clawgym_stock = stock
    return generate_non_streaming


def _cb_generate_non_streaming(self, model, processor, inputs, gen_config, request_id):
    """`CBGenerateManager.generate_non_streaming` that also keeps the result's sampled log-probabilities."""
    import asyncio

    from transformers.cli.serving.utils import CBWorkerDeadError

    async def run():
        cb = self._cb
        if cb is None:
            raise RuntimeError("CB manager not initialized. Call `init_cb()` first.")
        self._check_alive(request_id)
        input_ids = inputs["input_ids"]
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def _on_result(result):
            if not future.done():
                future.set_result(result)

        cb.register_result_handler(request_id, _on_result)
        cb.add_request(input_ids, request_id=request_id, max_new_tokens=gen_config.max_new_tokens, streaming=False,
                       eos_token_id=gen_config.eos_token_id)
        result = await future
        if result.error is not None:
            if cb.background_thread_status.fatal_error is not None:
                raise CBWorkerDeadError(f"CB worker died during request {request_id}: {result.error}")
            raise RuntimeError(f"CB generation failed for {request_id}: {result.error}")
        generated = result.generated_tokens
        box = _token_box().get()
        if box is not None:
            lps = list(getattr(result, "logprobs", None) or [])
            box.update(prompt=flat_ids(input_ids), completion=flat_ids(generated),
                       tokenizer=getattr(processor, "tokenizer", processor),
                       logprobs=[float(x) for x in lps] if len(lps) == len(generated) else None)
        return processor.decode(generated, skip_special_tokens=True), len(input_ids), generated

    return run()


def _cb_init_with_logprobs(stock):
    def __init__(self, cb_config=None):
        from transformers import ContinuousBatchingConfig

        cb_config = cb_config if cb_config is not None else ContinuousBatchingConfig()
        cb_config.return_logprobs = True  # a softmax per step; the sampled tokens are unchanged
        stock(self, cb_config)

    __init__._clawgym_stock = stock
    return __init__


def _token_entries(tok, ids: list[int], logprobs: list[float]) -> list[dict]:
    out = []
    for i, lp in zip(ids, logprobs):
        piece = tok.decode([i])
        out.append({"token": piece, "logprob": float(lp), "bytes": list(piece.encode("utf-8", "replace")),
                    "top_logprobs": []})
    return out


def _wrap_streaming(stock, sequential: bool):
    """`generate_streaming` that records the request's prompt and, as they are generated, its token ids (and
    CB's log-probabilities) in the request's token box, by wrapping the returned streamer's `put`."""

    def generate_streaming(self, model, processor, inputs, gen_config, request_id, *args, **kwargs):
        queue, streamer = stock(self, model, processor, inputs, gen_config, request_id, *args, **kwargs)
        box = _token_box().get()
        if box is None:
            return queue, streamer
        box.update(prompt=flat_ids(inputs["input_ids"]), completion=[], logprobs=[],
                   tokenizer=getattr(processor, "tokenizer", processor), manager=self, model=model,
                   gen_config=gen_config, sequential=sequential)
        put = streamer.put
        if sequential:
            first = [True]

            def put_direct(value):
                if first[0]:  # generate's first put is the prompt
                    first[0] = False
                else:
                    box["completion"].extend(flat_ids(value) if value.dim() else [int(value)])
                return put(value)

            streamer.put = put_direct
        else:
            def put_cb(output):
                ids, lps = list(output.generated_tokens), list(getattr(output, "logprobs", None) or [])
                box["completion"][len(box["completion"]):] = ids[len(box["completion"]):]
                box["logprobs"][len(box["logprobs"]):] = [float(x) for x in lps[len(box["logprobs"]):]]
                return put(output)

            streamer.put = put_cb
        return queue, streamer

    generate_streaming._clawgym_stock = stock
    return generate_streaming


def _sse_events(text: str) -> list[str]:
    return [e for e in text.split("\n\n") if e.strip()]


async def _streamed_with_tokens(inner, box: dict, want_ids: bool, want_lp: bool):
    """The SSE stream of `inner` with the token fields added to its chunks (see above)."""
    import json as _json

    sent = 0  # completion tokens already attached to a chunk
    first = True
    async for part in inner:
        text = part.decode() if isinstance(part, (bytes, bytearray)) else part
        events = _sse_events(text)
        out = []
        for ev in events:
            if not ev.startswith("data: ") or ev.strip() == "data: [DONE]":
                out.append(ev)
                continue
            try:
                data = _json.loads(ev[len("data: "):])
            except ValueError:
                out.append(ev)
                continue
            choices = data.get("choices") or []
            if not isinstance(data, dict) or "error" in data or not choices:
                out.append(ev)
                continue
            if first and want_ids:
                data["prompt_token_ids"] = box.get("prompt")
            first = False
            choice = choices[0]
            final = choice.get("finish_reason") is not None
            delta = choice.get("delta") or {}
            if final or delta.get("content") or delta.get("tool_calls") or delta.get("reasoning_content"):
                ids = list(box.get("completion") or [])
                new = ids[sent:]
                if want_ids:
                    choice["token_ids"] = new
                if want_lp:
                    lps = await _stream_logprobs(box, len(ids)) if final else box.get("logprobs") or []
                    got = lps[sent:sent + len(new)] if len(lps) >= sent + len(new) else None
                    choice["logprobs"] = ({"content": _token_entries(box["tokenizer"], new, got)}
                                          if got is not None else None)
                sent += len(new)
            out.append("data: " + _json.dumps(data, separators=(",", ":")))
        yield "".join(e + "\n\n" for e in out)


async def _stream_logprobs(box: dict, n: int) -> list[float]:
    """The log-probabilities of the first `n` completion tokens: CB's own, or (sequential generation, which
    streams no scores) one scoring forward pass on the inference thread once the generation has ended."""
    if not box.get("sequential"):
        return box.get("logprobs") or []
    if len(box.get("logprobs") or []) != n:
        box["logprobs"] = await box["manager"].async_submit(_forward_logprobs, box["model"], box["prompt"],
                                                            box["completion"][:n], box["gen_config"])
    return box["logprobs"]


def _wrap_handle_request(stock):
    async def handle_request(self, body, request_id):
        from fastapi.responses import JSONResponse, StreamingResponse

        want_ids = bool(body.pop("return_token_ids", False))
        want_lp = body.get("logprobs") is True
        if not (want_ids or want_lp):
            return await stock(self, body, request_id)
        body.pop("top_logprobs", None)
        box = {"want_logprobs": want_lp}
        var = _token_box()
        token = var.set(box)
        try:
            resp = await stock(self, body, request_id)
        finally:
            var.reset(token)
        if isinstance(resp, StreamingResponse):
            if "prompt" in box:
                resp.body_iterator = _streamed_with_tokens(resp.body_iterator, box, want_ids, want_lp)
            return resp
        if not isinstance(resp, JSONResponse) or resp.status_code != 200 or "completion" not in box:
            return resp
        import json as _json

        data = _json.loads(resp.body)
        choice = data["choices"][0]
        if want_ids:
            data["prompt_token_ids"] = box["prompt"]
            choice["token_ids"] = box["completion"]
        if want_lp:
            lps = box.get("logprobs")
            choice["logprobs"] = ({"content": _token_entries(box["tokenizer"], box["completion"], lps)}
                                  if lps is not None else None)
        return JSONResponse(data, status_code=resp.status_code)

    handle_request._clawgym_stock = stock
    return handle_request


def _cb_non_streaming(stock):
    _cb_generate_non_streaming._clawgym_stock = stock  # replaced outright, the stock one kept to undo it
    return _cb_generate_non_streaming


def _replacements():
    from transformers.cli.serving import utils
    from transformers.cli.serving.chat_completion import ChatCompletionHandler

    return [(ChatCompletionHandler, "handle_request", _wrap_handle_request),
            (utils.GenerateManager, "generate_non_streaming", _wrap_sequential_generate),
            (utils.GenerateManager, "generate_streaming", lambda stock: _wrap_streaming(stock, sequential=True)),
            (utils.CBGenerateManager, "generate_streaming", lambda stock: _wrap_streaming(stock, sequential=False)),
            (utils.CBGenerateManager, "__init__", _cb_init_with_logprobs),
            (utils.CBGenerateManager, "generate_non_streaming", _cb_non_streaming)]


_PATCH = Patch(__name__, TRANSFORMERS_VERSION, _replacements)


def install_token_ids() -> None:
    """Answer `return_token_ids` / `logprobs` in this process's chat-completions handler (see above)."""
    _PATCH.install()


def uninstall_token_ids() -> None:
    """Undo `install_token_ids` (tests)."""
    _PATCH.uninstall()

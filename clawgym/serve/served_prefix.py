"""A re-sent conversation is generated from the tokens this server sampled, not a re-tokenization of their text
(a `transformers serve` patch)."""

from __future__ import annotations

import json
import secrets
import threading
from collections import OrderedDict

from clawgym.serve.patching import Patch, chat_handler_replacements, flat_ids

TRANSFORMERS_VERSION = "5.24.0"  # the transformers release whose private code this module patches (see compat)

# ---- the served tokens of a conversation, reused when a client re-sends it ------------------------------------------
# An agent client (OpenClaw) keeps text, not tokens: each turn it re-sends the whole history, and the server renders
# and tokenizes it again. The model's own sampled ids need not be the canonical tokenization of their text (a BPE
# merge the sampler did not take; constrained decoding, which allows any tokenization of the grammar, often does
# not): the next turn's prompt then starts with other ids than the model produced (OpenClaw + SmolLM2 with
# tool_choice required: 15 tokens into the first reply), the model is conditioned on a history it never wrote,
# and a trajectory built from the served tokens is not one sequence (clawgym.trajectories.sft.token_exact_row:
# "drift"), so it is re-tokenized for training.
# This server remembers what it served: each finished generation whose ids were asked for (``return_token_ids``,
# as the recording proxy asks) and that ended with the end-of-turn token is kept as the prompt + sampled ids (the
# last SERVED_MAX, least recently used dropped). A new request's rendered ids are matched at each end-of-turn token
# (a special token: tokenization never merges across it): where the ids up to it decode to exactly the text of a
# served sequence, those ids are replaced by the served ones (the longest match) and the rest is kept as
# rendered. The text is unchanged, so only the tokenization of the model's own earlier turns changes, back to
# what it sampled; `prompt_token_ids` reports the ids generated from. Installed by the launcher (`--served-prefix`).

# The tool-call ids the server hands out are re-sent too. transformers serve names them f"{request_id}_tool_call_{i}"
# with a uuid4 request id (49+ characters); OpenClaw keeps only the letters and digits of an id and cuts it to 40
# (its openai-completions transcript policy, `makeUniqueToolId`), so the re-sent id lost its call index and no
# longer named the call this server returned (the recording proxy saw a rewritten history and results for calls it
# never returned). The handler is given a request id of "chatcmpl" + 16 hex digits instead: the ids become
# "chatcmpl<16 hex>_tool_call_<i>", 33 letters and digits (up to 9,999,999 calls), which such a client keeps whole.

SERVED_MAX = 256  # served sequences kept


class ServedSequences:
    """The served sequences (prompt + sampled ids, ending with the end-of-turn id), most recent last; each one's
    text (its decode, special tokens kept) computed once, when first needed."""

    def __init__(self, max_items: int = SERVED_MAX):
        self.max_items = max_items
        self._items: OrderedDict[tuple, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, ids: list[int]) -> None:
        key = tuple(int(i) for i in ids)
        with self._lock:
            self._items[key] = self._items.pop(key, None)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)

    def _texts(self, tok) -> dict[str, tuple]:
        with self._lock:
            for k, v in list(self._items.items()):
                if v is None:
                    self._items[k] = _decode(tok, list(k))
            return {v: k for k, v in self._items.items()}

    def reuse(self, tok, ids: list[int]) -> list[int]:
        """`ids` with its longest prefix ending at an end-of-turn id whose text is a served sequence's replaced by
        that sequence's ids (unchanged when none matches)."""
        if not self._items:
            return ids
        ends = {k[-1] for k in self._items}
        texts = self._texts(tok)
        for k in range(len(ids) - 1, -1, -1):
            if ids[k] not in ends:
                continue
            hit = texts.get(_decode(tok, ids[:k + 1]))
            if hit is not None:
                with self._lock:
                    if hit in self._items:
                        self._items.move_to_end(hit)
                return list(hit) + list(ids[k + 1:])
        return ids


SERVED = ServedSequences()


def _decode(tok, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _tokenizer(processor):
    return getattr(processor, "tokenizer", processor)


def _with_ids(inputs, new: list[int]):
    """`inputs` (the chat template's encoding: lists under continuous batching, tensors otherwise) with `new` as
    its input ids (and an all-ones attention mask of that length)."""
    old = inputs["input_ids"]
    if hasattr(old, "shape"):
        import torch

        t = torch.tensor([new], dtype=old.dtype, device=old.device)
        inputs["input_ids"] = t
        if "attention_mask" in inputs:
            inputs["attention_mask"] = torch.ones_like(t)
    else:
        nested = bool(old) and isinstance(old[0], list)
        inputs["input_ids"] = [new] if nested else new
        if "attention_mask" in inputs:
            inputs["attention_mask"] = [[1] * len(new)] if nested else [1] * len(new)
    return inputs


def _reusing(stock, is_async: bool):
    """`ChatCompletionHandler._streaming` / `_non_streaming` generating from the served ids of a re-sent history."""

    def swap(processor, inputs):
        ids = flat_ids(inputs["input_ids"])
        new = SERVED.reuse(_tokenizer(processor), ids)
        return _with_ids(inputs, new) if new != ids else inputs

    if is_async:
        async def non_streaming(self, request_id, model, processor, model_id, inputs, gen_config, *args, **kwargs):
            return await stock(self, request_id, model, processor, model_id, swap(processor, inputs), gen_config,
                               *args, **kwargs)

        non_streaming._clawgym_stock = stock
        return non_streaming

    def streaming(self, request_id, model, processor, model_id, inputs, gen_config, *args, **kwargs):
        return stock(self, request_id, model, processor, model_id, swap(processor, inputs), gen_config, *args,
                     **kwargs)

    streaming._clawgym_stock = stock
    return streaming


def remember(prompt, completion, finish) -> bool:
    """Keep prompt + completion as a served sequence when the turn ended by itself (not cut at the length bound)
    and both are id lists; True when kept."""
    if finish not in ("stop", "tool_calls") or not isinstance(prompt, list) or not isinstance(completion, list):
        return False
    if not prompt or not completion or not all(type(i) is int for i in prompt + completion):
        return False
    SERVED.add(prompt + completion)
    return True


async def _remembering_stream(inner):
    prompt, completion, finish = None, [], None
    async for part in inner:
        text = part.decode() if isinstance(part, (bytes, bytearray)) else part
        for ev in text.split("\n\n"):
            if not ev.startswith("data: ") or ev.strip() == "data: [DONE]":
                continue
            try:
                data = json.loads(ev[len("data: "):])
            except ValueError:
                continue
            if not isinstance(data, dict):
                continue
            if isinstance(data.get("prompt_token_ids"), list):
                prompt = data["prompt_token_ids"]
            for ch in data.get("choices") or []:
                if isinstance(ch, dict):
                    completion += ch.get("token_ids") or []
                    finish = ch.get("finish_reason") or finish
        yield part
    remember(prompt, completion, finish)


def short_request_id() -> str:
    """A fresh request id whose tool-call ids survive a client's id sanitizing (see above)."""
    return "chatcmpl" + secrets.token_hex(8)


def _wrap_handle_request(stock):
    async def handle_request(self, body, request_id):
        from fastapi.responses import JSONResponse, StreamingResponse

        want = body.get("return_token_ids") is True
        resp = await stock(self, body, short_request_id())
        if not want:
            return resp
        if isinstance(resp, StreamingResponse):
            resp.body_iterator = _remembering_stream(resp.body_iterator)
        elif isinstance(resp, JSONResponse) and resp.status_code == 200:
            try:
                data = json.loads(resp.body)
                ch = data["choices"][0]
                remember(data.get("prompt_token_ids"), ch.get("token_ids"), ch.get("finish_reason"))
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        return resp

    handle_request._clawgym_stock = stock
    return handle_request


_PATCH = Patch(__name__, TRANSFORMERS_VERSION, lambda: chat_handler_replacements(_wrap_handle_request, _reusing))


def install_served_prefix() -> None:
    """Generate re-sent conversations from the served tokens in this process's `transformers serve` (see above)."""
    _PATCH.install()


def uninstall_served_prefix() -> None:
    """Undo `install_served_prefix` (tests)."""
    _PATCH.uninstall()

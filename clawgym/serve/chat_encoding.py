"""Chat encoding that knows who placed a control token, shared by the engine-side id splice (clawgym.agent.tito)
and the SFT rows (clawgym.trajectories.sft).

A row's only control ids are those the chat template placed or the model emitted as control ids. `encode_chat`
renders and tokenizes a conversation so that content carrying a control-token string (``<|im_end|>`` in the
model's text, ``<|im_start|>assistant`` in a file the agent read) is encoded as ordinary text pieces;
`control_text_count` counts such strings; a conversation where that cannot be exact raises `ControlTextError`
(reason ``control_text_in_content``).
"""

from __future__ import annotations

import re
from typing import Any

TOKENS_KEY = "clawgym_tokens"  # = clawgym.agent.loop.TOKENS_KEY: an assistant message's sampled tokens
_QWEN_IDENTITY = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SMOL_IDENTITY = "You are a helpful AI assistant named SmolLM, trained by Hugging Face."


CONTROL_TEXT = "control_text_in_content"  # the reason a row is re-tokenized / rejected for control text
_MANGLE = "\ue000"  # a private-use character: stands in (same length) for control text in the mangled rendering


class ControlTextError(ValueError):
    """A conversation whose content carries control-token text that cannot be encoded as ordinary text exactly."""

    reason = CONTROL_TEXT


def control_tokens(tok) -> tuple[str, ...]:
    """The strings the tokenizer turns into control ids: its special tokens and the added tokens the chat template
    writes (the same set as transformers' ``sanitize_control_tokens``), longest first."""
    tpl = tok.chat_template if isinstance(getattr(tok, "chat_template", None), str) else ""
    out = {t.content for t in (getattr(tok, "added_tokens_decoder", None) or {}).values()
           if t.content and (t.special or (t.content in tpl and not t.content.isspace()))}
    out |= {t for t in (getattr(tok, "all_special_tokens", None) or []) if t}
    return tuple(sorted(out, key=len, reverse=True))


_RX_CACHE: dict[tuple[str, ...], re.Pattern] = {}


def _control_re(tok) -> re.Pattern:
    key = control_tokens(tok)
    rx = _RX_CACHE.get(key)
    if rx is None:
        rx = _RX_CACHE[key] = re.compile("|".join(map(re.escape, key)) or "(?!)")
    return rx


def _count_control(obj: Any, rx: re.Pattern) -> int:
    if isinstance(obj, str):
        return sum(1 for _ in rx.finditer(obj))
    if isinstance(obj, dict):  # keys too: a template renders a tool schema's property names, arguments' keys
        return sum(_count_control(k, rx) + _count_control(v, rx) for k, v in obj.items() if k != TOKENS_KEY)
    if isinstance(obj, (list, tuple)):
        return sum(_count_control(v, rx) for v in obj)
    return 0


def _mangle(obj: Any, rx: re.Pattern) -> Any:
    if isinstance(obj, str):
        return rx.sub(lambda m: _MANGLE * len(m.group()), obj)
    if isinstance(obj, dict):
        return {_mangle(k, rx): _mangle(v, rx) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_mangle(v, rx) for v in obj]
    return obj


def control_text_count(tok, messages: list[dict], tools: list | None = None) -> int:
    """How many control-token strings the conversation's content (messages and tool schemas) carries as text."""
    rx = _control_re(tok)
    return _count_control(messages, rx) + _count_control([t for t in tools or [] if isinstance(t, dict)], rx)


def encode_chat(tok, messages: list[dict], tools: list | None = None, *, add_generation_prompt: bool = False,
                chat_template: str | None = None, assistant_mask: bool = False, **template_kwargs) -> dict[str, Any]:
    """The conversation rendered by the chat template and tokenized so that the only control ids are those the
    template placed: content (system/user/tool text, assistant text, tool-call arguments, tool schemas) that
    contains a control-token string is encoded as ordinary text pieces (``split_special_tokens``), never as the
    control id. Returns ``{"input_ids", "control_text"}`` (+ ``"assistant_masks"`` with `assistant_mask`, the
    same mask transformers computes from the template's ``{% generation %}`` spans).

    A conversation without control text is exactly ``tok.apply_chat_template`` (the call TRL makes). Otherwise the
    template is rendered twice, with the content as is and with every control string in it replaced by
    same-length private-use text: a control string at the same place in both renderings is the template's own,
    the others are content. The text between the template's control tokens is encoded with special tokens split.
    Raises `ControlTextError` where that cannot be exact (a template whose output length depends on the content's
    characters, or an added token the tokenizer still matches inside split text)."""
    n = control_text_count(tok, messages, tools)
    if not n:
        enc = tok.apply_chat_template(messages, tools=tools or None, tokenize=True, return_dict=True,
                                      add_generation_prompt=add_generation_prompt, chat_template=chat_template,
                                      return_assistant_tokens_mask=assistant_mask, **template_kwargs)
        out: dict[str, Any] = {"input_ids": list(enc["input_ids"]), "control_text": 0}
        if assistant_mask:
            out["assistant_masks"] = list(enc["assistant_masks"])
        return out
    from transformers.utils import get_json_schema
    from transformers.utils.chat_template_utils import render_jinja_template

    rx = _control_re(tok)
    schemas = None if not tools else [t if isinstance(t, dict) else get_json_schema(t) for t in tools]
    conv = [{k: v for k, v in m.items() if v is not None and k != TOKENS_KEY} for m in messages]
    kw = {**tok.special_tokens_map, **template_kwargs}
    tpl = tok.get_chat_template(chat_template, schemas)

    def render(c, t, mask):
        text, gen = render_jinja_template(conversations=[c], tools=t, chat_template=tpl,
                                          return_assistant_tokens_mask=mask,
                                          add_generation_prompt=add_generation_prompt, **kw)
        return text[0], (gen[0] if mask and gen else [])

    text, spans = render(conv, schemas, assistant_mask)
    plain, _ = render(_mangle(conv, rx), _mangle(schemas, rx), False)
    if len(plain) != len(text):
        raise ControlTextError("the chat template's output length depends on the content's characters")
    placed = [m.span() for m in rx.finditer(text) if plain[m.start():m.end()] == m.group()]
    control_ids = {tok.convert_tokens_to_ids(t) for t in control_tokens(tok)}
    ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    pos = 0
    for s, e in placed + [(len(text), len(text))]:
        if s > pos:
            enc = tok(text[pos:s], add_special_tokens=False, split_special_tokens=True,
                      return_offsets_mapping=assistant_mask)
            seg = list(enc["input_ids"])
            if control_ids.intersection(seg):
                raise ControlTextError("the tokenizer matches an added token inside text encoded as text")
            ids += seg
            if assistant_mask:
                offsets += [(a + pos, b + pos) for a, b in enc["offset_mapping"]]
        if e > s:
            ids.append(tok.convert_tokens_to_ids(text[s:e]))
            offsets.append((s, e))
        pos = e
    out = {"input_ids": ids, "control_text": n}
    if assistant_mask:  # transformers' rule: every token overlapping a generation span
        mask = [0] * len(ids)
        j = 0
        for i, (a, b) in enumerate(offsets):
            while j < len(spans) and a >= spans[j][1]:
                j += 1
            if j == len(spans):
                break
            if b > spans[j][0]:
                mask[i] = 1
        out["assistant_masks"] = mask
    return out


def apply_tool_chat_template(tokenizer):
    """Give a ChatML tokenizer the tool-calling chat template (with generation markers) and a response parser.

    Returns the same tokenizer. Rendering is TRL's Qwen2.5 template with SmolLM's own default system line.
    """
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        has_generation_markers,
        qwen2_5_chat_template,
    )

    tokenizer.chat_template = qwen2_5_chat_template
    add_response_schema(tokenizer)  # keyed on the exact Qwen2.5 template text
    training = get_training_chat_template(tokenizer) or qwen2_5_chat_template
    training = training.replace(_QWEN_IDENTITY, SMOL_IDENTITY)
    if not has_generation_markers(training):  # pragma: no cover - TRL contract
        raise RuntimeError("TRL's training chat template lacks {% generation %} markers")
    tokenizer.chat_template = training
    # a distinct pad token keeps the end-of-turn token trainable; SmolLM2 has <|endoftext|>
    if (tokenizer.pad_token is None or tokenizer.pad_token == tokenizer.eos_token) \
            and "<|endoftext|>" in tokenizer.get_vocab():
        tokenizer.pad_token = "<|endoftext|>"
    return tokenizer


def load_tokenizer(path: str):
    """The HF tokenizer at `path`, given the tool-calling chat template when its own cannot render tool calls."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if not tok.chat_template or "tool_call" not in tok.chat_template:
        apply_tool_chat_template(tok)
    return tok


__all__ = ["CONTROL_TEXT", "ControlTextError", "control_tokens", "control_text_count", "encode_chat", "TOKENS_KEY",
           "apply_tool_chat_template", "SMOL_IDENTITY",
           "load_tokenizer"]

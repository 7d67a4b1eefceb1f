"""Token in, token out: a re-sent conversation is generated from the tokens the model sampled, not from a
re-tokenization of their text.

An agent client (OpenClaw, the builtin loop) keeps text, not tokens: each turn it re-sends the whole history, and
the engine renders and tokenizes it again. What the model sampled need not be what the chat template renders for
the message the client keeps: another tokenization of the same text (a BPE merge the sampler did not take), or
other text for the same call (the model wrote ``{ "path" : "a" }``, the client re-sends the arguments as compact
JSON, the template renders them its own way). The next turn's prompt would then not start with the ids the model
produced: the model would be conditioned on a history it never wrote, and a trajectory built from the served tokens
would not be one sequence (clawgym.trajectories.sft.token_exact_row: "drift"), so it would be re-tokenized.

The caller that holds the served tokens (the builtin loop for its rollout, the recording proxy for each session)
keeps each finished generation whose ids came back and that ended by itself (with its end-of-turn id) as the
conversation it answered plus the reply it returned, with prompt + sampled ids (the last SERVED_MAX, least recently
used dropped). A new request whose messages start with such a conversation, message for message as `_message_key`
compares them (a tool call by name and parsed arguments, ids as OpenClaw rewrites them, a tool result by its whole
text), is sent as that sequence's ids followed by the template's rendering of the messages after it (the longest
such conversation wins). The ids go to the engine in the request (vLLM's ``kv_transfer_params.prompt_token_ids``:
the engine generates from them and still parses tool calls from the messages); where nothing matched, or the
template's rendering of the request does not begin with its rendering of the matched conversation, nothing is sent
and the engine renders itself.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from typing import Any, cast

SERVED_MAX = 256  # served sequences kept per rollout / session
KV_FIELD = "kv_transfer_params"  # the request field that carries the prompt ids (vLLM)


def _message_key(m: dict) -> tuple:
    """What a re-sent message must share with the one answered to count as it: its role and text (a reply's text
    without surrounding whitespace: a client may trim it), a tool call by its id as OpenClaw rewrites it, its name
    and its parsed arguments, a tool result by its call's id and its whole text."""
    from clawgym.agent.messages import text_of
    from clawgym.agent.proxy_log import _calls_of, _cargs, _cid

    role, text = m.get("role"), text_of(m.get("content"))
    if role == "assistant":
        calls = tuple((_cid(tc.get("id")), tc["function"].get("name"), _cargs(tc["function"].get("arguments")))
                      for tc in _calls_of(m.get("tool_calls")))
        return ("assistant", text.strip(), calls)
    if role == "tool":
        return ("tool", _cid(m.get("tool_call_id")), text)
    return (str(role), text)


def _conversation_key(messages: list[dict]) -> tuple:
    return tuple(_message_key(m) for m in messages)


class ServedSequences:
    """The served sequences: conversation key (the canonical messages answered, then the reply) -> prompt + sampled
    ids (ending with the end-of-turn id), most recently used last."""

    def __init__(self, max_items: int = SERVED_MAX):
        self.max_items = max_items
        self._items: OrderedDict[tuple, tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, key: tuple, ids: list[int]) -> None:
        with self._lock:
            self._items.pop(key, None)
            self._items[key] = tuple(int(i) for i in ids)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)

    def longest_prefix(self, conv: tuple) -> tuple[int, tuple[int, ...]] | None:
        """(how many messages, the ids) of the longest served conversation that `conv` extends (one message more at
        least), or None."""
        with self._lock:
            best = None
            for key, ids in self._items.items():
                if len(key) < len(conv) and conv[:len(key)] == key and (best is None or len(key) > best[0]):
                    best = (len(key), ids, key)
            if best is None:
                return None
            self._items.move_to_end(best[2])
            return best[0], best[1]


@functools.lru_cache(maxsize=8)
def _tokenizer(path: str):
    from clawgym.serve.chat_encoding import load_tokenizer

    return load_tokenizer(path)


def template_messages(messages: list[dict]) -> list[dict]:
    """The messages as the chat template renders them: clawgym's own keys dropped, a tool call's JSON-string
    arguments as the object they encode (what the engine renders, and the trainer)."""
    out = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        m = {k: v for k, v in m.items() if not str(k).startswith("clawgym_")}
        calls = m.get("tool_calls")
        if isinstance(calls, list) and calls:
            fixed = []
            for tc in calls:
                fn = tc.get("function") if isinstance(tc, dict) else None
                args = fn.get("arguments") if isinstance(fn, dict) else None
                if isinstance(args, str):
                    try:
                        tc = {**tc, "function": {**cast(dict, fn), "arguments": json.loads(args)}}  # args: fn is a dict
                    except ValueError:
                        pass
                fixed.append(tc)
            m["tool_calls"] = fixed
        out.append(m)
    return out


class PromptIds:
    """The served sequences of one rollout or session and the prompt ids of its next request."""

    def __init__(self, tokenizer: Any, max_items: int = SERVED_MAX):
        self.tok = _tokenizer(str(tokenizer)) if isinstance(tokenizer, str) else tokenizer
        self.served = ServedSequences(max_items)
        self.reused = 0  # requests sent with the served ids of an earlier turn

    def remember(self, prompt: Any, completion: Any, finish: Any, messages: Any = None, reply: Any = None) -> bool:
        """Keep prompt + completion as the served sequence of `messages` (the conversation the request carried)
        answered by `reply` (the assistant message the client got), when the turn ended by itself (not cut at the
        length bound) with the end-of-turn id and both are id lists; True when kept."""
        if finish not in ("stop", "tool_calls") or not isinstance(prompt, list) or not isinstance(completion, list):
            return False
        if not isinstance(messages, list) or not isinstance(reply, dict):
            return False
        if not prompt or not completion or not all(type(i) is int for i in prompt + completion):
            return False
        if completion[-1] not in self._ends():
            return False  # a stop string, not the end-of-turn id: the template's turn would not end where it did
        try:
            key = _conversation_key(template_messages([*messages, reply]))
        except Exception:  # noqa: BLE001 - messages of any shape (a client's): nothing to match later
            return False
        self.served.add(key, prompt + completion)
        return True

    def remember_response(self, resp: Any, messages: Any = None) -> bool:
        """`remember` for a chat completion's JSON (non-streamed, or a merged stream) answering `messages`."""
        try:
            ch = resp["choices"][0]
            return self.remember(resp.get("prompt_token_ids"), ch.get("token_ids"), ch.get("finish_reason"),
                                 messages, ch.get("message"))
        except (KeyError, IndexError, TypeError, AttributeError):
            return False

    @functools.cached_property
    def _end_ids(self) -> frozenset:
        ids = set()
        for t in ("<|im_end|>", getattr(self.tok, "eos_token", None)):
            if isinstance(t, str):
                i = self.tok.convert_tokens_to_ids(t)
                if isinstance(i, int) and i >= 0 and i != getattr(self.tok, "unk_token_id", None):
                    ids.add(i)
        eid = getattr(self.tok, "eos_token_id", None)
        if isinstance(eid, int):
            ids.add(eid)
        return frozenset(ids)

    def _ends(self) -> frozenset:
        return self._end_ids

    def prompt_ids(self, messages: list[dict], tools: list | None) -> list[int] | None:
        """The ids the engine should generate from for this request, or None where the engine's own rendering is
        the same (no earlier turn of this rollout matched and no control-token text in the content, or it cannot
        be rendered here)."""
        from clawgym.serve.chat_encoding import control_text_count, encode_chat

        try:
            msgs = template_messages(messages)
            hit = self.served.longest_prefix(_conversation_key(msgs)) if len(self.served) else None
            if hit is None:
                # the engine's own rendering turns control-token text in the content (a tool result holding
                # "<|im_start|>assistant") into control ids; ours encodes it as text, as the record will read it
                if control_text_count(self.tok, msgs, tools or None):
                    return list(encode_chat(self.tok, msgs, tools or None, add_generation_prompt=True)["input_ids"])
                return None
            n, served = hit
            full = encode_chat(self.tok, msgs, tools or None, add_generation_prompt=True)["input_ids"]
            head = encode_chat(self.tok, msgs[:n], tools or None, add_generation_prompt=False)["input_ids"]
        except Exception:  # noqa: BLE001 - a template that cannot render (control text, odd shapes): the engine's own
            return None
        # the matched conversation's rendering ends with its reply's end-of-turn id (a newline may follow it)
        e = max((k for k, i in enumerate(head) if i == served[-1]), default=-1)
        if e < 0 or list(full[:e + 1]) != list(head[:e + 1]):
            return None
        new = list(served) + list(full[e + 1:])
        if new == list(full):
            return None
        self.reused += 1
        return new


def prompt_ids_for(endpoint: Any) -> PromptIds | None:
    """A PromptIds for `endpoint` when it returns token ids and names its tokenizer (`Endpoint.tokenizer`: a local
    checkpoint's folder, or an openai endpoint's `extra.tokenizer`), else None."""
    tok = getattr(endpoint, "tokenizer", None)
    if not tok or not getattr(endpoint, "token_ids", False):
        return None
    try:
        return PromptIds(tok)
    except Exception:  # noqa: BLE001 - no tokenizer here: the engine renders every request itself
        return None


__all__ = ["ServedSequences", "PromptIds", "prompt_ids_for", "template_messages", "KV_FIELD", "SERVED_MAX"]

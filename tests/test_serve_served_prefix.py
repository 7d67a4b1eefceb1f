"""Re-sent conversations are generated from the tokens the server sampled (clawgym.serve.served_prefix): a history
whose text is a served sequence's gets that sequence's ids back, whatever its re-tokenization; and the tool-call ids
the server names survive a client that keeps only 40 letters and digits. The embedded model's tokenizer, no server."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from clawgym.serve import served_prefix as sp

MODEL = Path(os.environ.get("CLAWGYM_BASE_MODEL_DIR",
                            Path(__file__).resolve().parents[1] / "data" / "models" / "smollm2-135m-instruct"))


@pytest.fixture(scope="module")
def tok():
    if not (MODEL / "tokenizer.json").exists():
        pytest.skip("the embedded model's tokenizer is not prepared (clawgym.train.base_model)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MODEL))


def _render(tok, messages):
    return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]


def test_resent_history_gets_the_sampled_ids_back(tok):
    ask = [{"role": "user", "content": "Say hello."}]
    prompt = _render(tok, ask)
    reply = "Hello there, friend"
    canonical = tok.encode(reply, add_special_tokens=False)
    sampled = [i for ch in reply for i in tok.encode(ch, add_special_tokens=False)]  # one token per character
    assert sampled != canonical and tok.decode(sampled) == reply
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    served = sp.ServedSequences(max_items=2)
    assert sp.ServedSequences().reuse(tok, prompt) == prompt  # nothing served yet
    served.add(prompt + sampled + [eos])
    again = _render(tok, ask + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Again."}])
    assert again[:len(prompt) + len(sampled) + 1] != prompt + sampled + [eos]  # re-tokenized: drift
    got = served.reuse(tok, again)
    assert got[:len(prompt) + len(sampled) + 1] == prompt + sampled + [eos]
    assert tok.decode(got) == tok.decode(again)  # the same text: only the model's own turn is tokenized as sampled
    other = _render(tok, ask + [{"role": "assistant", "content": "Goodbye"}, {"role": "user", "content": "Again."}])
    assert served.reuse(tok, other) == other  # another history: as rendered
    served.add([1, 2, eos])
    served.add([3, 4, eos])  # the oldest is dropped past max_items
    assert len(served) == 2 and served.reuse(tok, again) == again


def test_only_finished_turns_with_ids_are_remembered(monkeypatch):
    store = sp.ServedSequences()
    monkeypatch.setattr(sp, "SERVED", store)
    assert not sp.remember([1, 2], [3], "length")  # cut at the bound: the client's re-render ends the turn itself
    assert not sp.remember(None, [3], "stop") and not sp.remember([1], [], "stop")
    assert not sp.remember([1], [True], "stop")
    assert sp.remember([1, 2], [3, 2], "tool_calls") and len(store) == 1

    async def stream():
        chunks = [{"prompt_token_ids": [5, 6], "choices": [{"delta": {"role": "assistant"}}]},
                  {"choices": [{"delta": {"content": "x"}, "token_ids": [7]}]},
                  {"choices": [{"delta": {}, "finish_reason": "stop", "token_ids": [2]}]}]
        for c in chunks:
            yield f"data: {json.dumps(c)}\n\n"
        yield "data: [DONE]\n\n"

    async def drain():
        return [p async for p in sp._remembering_stream(stream())]

    parts = asyncio.run(drain())
    assert len(parts) == 4 and len(store) == 2  # relayed unchanged, and kept once the stream ended
    assert (5, 6, 7, 2) in store._items


def test_tool_call_ids_survive_openclaws_sanitizing():
    rid = sp.short_request_id()
    assert rid != sp.short_request_id()
    ids = [f"{rid}_tool_call_{i}" for i in (0, 1, 12)]
    kept = [re.sub(r"[^A-Za-z0-9]", "", i)[:40] for i in ids]  # OpenClaw's openai-completions id rule
    assert kept == [re.sub(r"[^A-Za-z0-9]", "", i) for i in ids] and len(set(kept)) == 3
    uuid_id = "bd231974-928d-4f76-9b50-50fa0152b414_tool_call_0"  # the stock id: its call index was cut
    assert re.sub(r"[^A-Za-z0-9]", "", uuid_id)[:40] != re.sub(r"[^A-Za-z0-9]", "", uuid_id)


def test_swapped_inputs_keep_their_form():
    import torch

    lst = sp._with_ids({"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1]}, [1, 2, 3, 4])
    assert lst == {"input_ids": [1, 2, 3, 4], "attention_mask": [1, 1, 1, 1]}
    t = sp._with_ids({"input_ids": torch.tensor([[1, 2]]), "attention_mask": torch.tensor([[1, 1]])}, [7, 8, 9])
    assert t["input_ids"].tolist() == [[7, 8, 9]] and t["attention_mask"].tolist() == [[1, 1, 1]]

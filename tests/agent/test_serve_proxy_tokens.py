"""The recording proxy keeps the sampled tokens of a streamed response (vLLM's chunk fields), merged
incrementally as it relays, and the trajectory rebuild puts them on the assistant turn (clawgym_tokens)."""

from __future__ import annotations

from clawgym.agent.loop import TOKENS_KEY
from clawgym.agent.proxy import _as_chunk, merge_stream
from clawgym.agent.proxy_log import _reply_of


def _chunks():
    return [
        {"id": "r", "model": "m", "prompt_token_ids": [1, 2, 3],
         "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"id": "r", "choices": [{"index": 0, "delta": {"content": "He"}, "token_ids": [10],
                                 "logprobs": {"content": [{"token": "He", "logprob": -0.5}]}}]},
        {"id": "r", "choices": [{"index": 0, "delta": {"content": "llo"}, "token_ids": [11, 12],
                                 "logprobs": {"content": [{"token": "l", "logprob": -0.1},
                                                          {"token": "lo", "logprob": -0.2}]}}]},
        {"id": "r", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "token_ids": [2],
                                 "logprobs": {"content": [{"token": "<|im_end|>", "logprob": -0.01}]}}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
    ]


def test_merge_stream_keeps_token_ids_and_logprobs_incrementally():
    whole = merge_stream(_chunks())
    assert whole["prompt_token_ids"] == [1, 2, 3]
    assert whole["choices"][0]["token_ids"] == [10, 11, 12, 2]
    assert [e["logprob"] for e in whole["choices"][0]["logprobs"]["content"]] == [-0.5, -0.1, -0.2, -0.01]
    assert whole["choices"][0]["message"]["content"] == "Hello"
    ch = _chunks()  # the relay merges as it goes: merged-so-far as one chunk, then the rest
    step = merge_stream([_as_chunk(merge_stream(ch[:2])), *ch[2:]])
    assert step == whole
    plain = merge_stream([{"id": "r", "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}])
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]


def test_rebuilt_assistant_turn_carries_the_recorded_tokens():
    e = {"status": 200, "response": merge_stream(_chunks())}
    reply = _reply_of(e)
    assert reply[TOKENS_KEY] == {"prompt_token_ids": [1, 2, 3], "token_ids": [10, 11, 12, 2],
                                 "logprobs": [-0.5, -0.1, -0.2, -0.01]}
    assert TOKENS_KEY not in _reply_of({**e, "limit": "reply size limit: cut"})  # a cut reply: text != tokens
    assert TOKENS_KEY not in _reply_of({"status": 200, "response": merge_stream(_chunks()[1:2])})  # no prompt ids

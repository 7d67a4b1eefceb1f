"""Learning shows through the real serving path: SFT of a tiny model (the real SmolLM2 tokenizer and tool chat
template) on ONE agent trajectory, then the checkpoint served by `ModelServer` (the launcher, continuous batching,
the response parser) and driven by the builtin agent loop, greedy, in a real sandbox:

- it reproduces the trajectory's tool calls (the first one exactly) and stops on its own (no completion cut at the
  token cap: finish_reason is tool_calls / stop, the rollout ends `ok`);
- the served prompt is token for token the prompt the trainer rendered (same chat template, tool schemas, system
  prompt) and the sampled completion is token for token the trained assistant turn (<|im_end|> included);
- the rollout records the sampled token ids and log-probabilities, and they form the same sequence the trainer
  would build from the text (no drift), which `token_exact_dataset` then trains on as is.
"""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _trajectory():
    from clawgym import DEFAULT_WORKSPACE
    from clawgym.agent.loop import SYSTEM_PROMPT
    from clawgym.agent.tools import TOOL_SCHEMAS

    def call(cid, name, args):
        return {"type": "function", "id": cid, "function": {"name": name, "arguments": args}}

    msgs = [
        {"role": "system", "content": SYSTEM_PROMPT.format(workspace=DEFAULT_WORKSPACE)},
        {"role": "user", "content": "Count the lines of notes/todo.txt and write the number to output/count.txt."},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "read", {"path": "notes/todo.txt"})]},
        {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "buy milk\ncall bob\nfix bike\n"},
        {"role": "assistant", "content": "", "tool_calls": [call("c2", "write", {"path": "output/count.txt",
                                                                                 "content": "3\n"})]},
        {"role": "tool", "tool_call_id": "c2", "name": "write", "content": "Successfully wrote 2 bytes to "
                                                                           "output/count.txt"},
        {"role": "assistant", "content": "Done: output/count.txt holds 3."},
    ]
    return msgs, TOOL_SCHEMAS


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from clawgym.train.base_model import make_tiny_model
    from clawgym.train.sft import SFTRunConfig, run_sft
    from clawgym.trajectories.sft import save_hf_dataset

    d = tmp_path_factory.mktemp("learns")
    msgs, tools = _trajectory()
    base = make_tiny_model(d / "tiny", hidden_size=64, num_layers=2)
    ds = save_hf_dataset([{"messages": msgs, "tools": tools, "sample_id": "s1", "task_id": "count-1",
                           "category": "c", "n_tokens": 0}], d / "ds")
    rec = run_sft(SFTRunConfig(base_model=str(base), dataset_path=str(ds), output_dir=str(d / "ckpt"), resume=False,
                               sft_config={"max_steps": 60, "learning_rate": 5e-3, "max_length": 4096,
                                           "logging_steps": 10, "save_steps": 1000}))
    return {"dir": d, "ckpt": d / "ckpt", "rec": rec, "msgs": msgs, "tools": tools}


def test_trained_model_reproduces_the_trajectory_through_the_server(trained):
    import httpx
    from transformers import AutoTokenizer

    from clawgym.agent.loop import TOKENS_KEY, Limits, run_builtin
    from clawgym.agent.policies import PolicySpec, open_endpoint
    from clawgym.sandbox import get_factory
    from clawgym.tasks.model import File, Task
    from clawgym.trajectories.sft import token_exact_sequence

    rec, msgs, tools = trained["rec"], trained["msgs"], trained["tools"]
    assert rec.loss_curve[-1]["loss"] < 0.05, rec.loss_curve
    assert rec.hyperparams["tokens"]["tokenized_by"] == "trl"  # text rows: TRL renders them (and says so)
    tok = AutoTokenizer.from_pretrained(str(trained["ckpt"]))
    # the training sequence (TRL's own call) and its loss mask
    enc = tok.apply_chat_template(msgs, tools=tools, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    train_ids, train_mask = enc["input_ids"], enc["assistant_masks"]

    task = Task(task_id="count-1", instruction=msgs[1]["content"],
                files=[File(path="notes/todo.txt", content=b"buy milk\ncall bob\nfix bike\n")])
    spec = PolicySpec(name="tiny-sft", kind="local", model=str(trained["ckpt"]),
                      extra={"device": "cpu", "startup_timeout_s": 120})
    with open_endpoint(spec) as ep:
        assert ep.token_ids  # the embedded server is asked for the sampled tokens
        # one raw request: the first turn ends by itself with a tool call
        r = httpx.post(ep.base_url + "/chat/completions", timeout=120, json={
            "model": ep.model, "messages": msgs[:2], "tools": tools, "max_tokens": 200, "temperature": 0,
            "return_token_ids": True, "logprobs": True}).json()
        choice = r["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice
        (tc,) = choice["message"]["tool_calls"]
        assert tc["function"]["name"] == "read" and json.loads(tc["function"]["arguments"]) == {
            "path": "notes/todo.txt"}
        # served prompt == the trainer's prompt, sampled completion == the trained turn, token for token
        prompt = tok.apply_chat_template(msgs[:2], tools=tools, tokenize=True, add_generation_prompt=True,
                                         return_dict=True)["input_ids"]
        assert r["prompt_token_ids"] == prompt == train_ids[:len(prompt)]
        out = choice["token_ids"]
        assert out[-1] == tok.convert_tokens_to_ids("<|im_end|>")  # it stopped at the end-of-turn token
        assert out == train_ids[len(prompt):len(prompt) + len(out)]
        assert all(train_mask[len(prompt):len(prompt) + len(out)])  # ... which the loss was on
        lps = [c["logprob"] for c in choice["logprobs"]["content"]]
        assert len(lps) == len(out) and all(lp <= 0 for lp in lps) and sum(lps) > -5  # greedy and confident

        # the whole agent loop, greedy, in a real sandbox
        with get_factory("local").open(task.files) as sb:
            res = run_builtin(task, ep, sb, Limits(max_turns=6, max_completion_tokens=200, max_wall_s=300))
            written = sb.read_file("output/count.txt")
    assert res.failure_class == "ok", (res.error, res.messages[-1])
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for m in res.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert calls == [("read", {"path": "notes/todo.txt"}), ("write", {"path": "output/count.txt", "content": "3\n"})]
    assert written == b"3\n"
    assert res.messages[-1]["content"] == msgs[-1]["content"]

    # the rollout recorded the sampled tokens; they are the trainer's sequence (no re-tokenization drift)
    assistant = [m for m in res.messages if m["role"] == "assistant"]
    assert all(TOKENS_KEY in m and m[TOKENS_KEY]["logprobs"] for m in assistant)
    seq = token_exact_sequence(res.messages)
    assert not isinstance(seq, str), seq
    ids, mask = seq
    assert ids == train_ids[:len(ids)] and len(train_ids) - len(ids) == 1  # only the template's trailing "\n"
    assert sum(mask) == sum(len(m[TOKENS_KEY]["token_ids"]) for m in assistant)
    assert all(train_mask[i] for i, k in enumerate(mask) if k)  # sampled tokens = trained tokens (less "\n"s)

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


def _tools():
    """The loop's own tool schemas, cut to the two the trajectory uses (a shorter sequence: a faster test)."""
    from clawgym.agent.tools import TOOL_SCHEMAS

    return [t for t in TOOL_SCHEMAS if t["function"]["name"] in ("read", "write")]


TODO_FILE = b"buy milk\ncall bob\nfix bike\n"


def _trajectory():
    """A real trajectory: the loop's system prompt, the tool calls' results as the real tools answer them."""
    from clawgym import DEFAULT_WORKSPACE
    from clawgym.agent.loop import SYSTEM_PROMPT
    from clawgym.agent.tools import execute_tool
    from clawgym.sandbox import get_factory
    from clawgym.tasks.model import File

    calls = [("c1", "read", {"path": "notes/todo.txt"}), ("c2", "write", {"path": "output/count.txt",
                                                                           "content": "3\n"})]
    msgs = [{"role": "system", "content": SYSTEM_PROMPT.format(workspace=DEFAULT_WORKSPACE)},
            {"role": "user", "content": "Count the lines of notes/todo.txt and write the number to output/count.txt."}]
    with get_factory("local").open([File(path="notes/todo.txt", content=TODO_FILE)]) as sb:
        for cid, name, args in calls:
            msgs.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "id": cid, "function": {"name": name, "arguments": args}}]})
            msgs.append({"role": "tool", "tool_call_id": cid, "name": name,
                         "content": execute_tool(sb, name, args).content})
    msgs.append({"role": "assistant", "content": "Done: output/count.txt holds 3."})
    return msgs, _tools()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    import torch

    from clawgym.train.base_model import make_tiny_model
    from clawgym.train.sft import SFTRunConfig, run_sft
    from clawgym.trajectories.sft import save_hf_dataset

    d = tmp_path_factory.mktemp("learns")
    msgs, tools = _trajectory()
    base = make_tiny_model(d / "tiny", hidden_size=64, num_layers=2)
    ds = save_hf_dataset([{"messages": msgs, "tools": tools, "sample_id": "s1", "task_id": "count-1",
                           "category": "c", "n_tokens": 0}], d / "ds")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a small shared CPU one thread trains this tiny model faster than several
    try:
        rec = run_sft(SFTRunConfig(base_model=str(base), dataset_path=str(ds), output_dir=str(d / "ckpt"),
                                   resume=False, sft_config={"max_steps": 75, "learning_rate": 5e-3,
                                                             "max_length": 4096, "logging_steps": 15,
                                                             "save_steps": 1000}))
    finally:
        torch.set_num_threads(threads)
    return {"dir": d, "ckpt": d / "ckpt", "rec": rec, "msgs": msgs, "tools": tools}


def test_trained_model_reproduces_the_trajectory_through_the_server(trained, monkeypatch):
    import httpx
    from transformers import AutoTokenizer

    from clawgym.agent.loop import TOKENS_KEY, Limits, run_builtin
    from clawgym.agent.policies import PolicySpec, open_endpoint
    from clawgym.sandbox import get_factory
    from clawgym.tasks.model import File, Task
    from clawgym.trajectories.sft import token_exact_sequence

    rec, msgs, tools = trained["rec"], trained["msgs"], trained["tools"]
    assert rec.loss_curve[-1]["loss"] < 0.1, rec.loss_curve
    assert rec.hyperparams["tokens"]["tokenized_by"] == "trl"  # text rows: TRL renders them (and says so)
    tok = AutoTokenizer.from_pretrained(str(trained["ckpt"]))
    # the training sequence (TRL's own call) and its loss mask
    enc = tok.apply_chat_template(msgs, tools=tools, tokenize=True, return_dict=True,
                                  return_assistant_tokens_mask=True)
    train_ids, train_mask = enc["input_ids"], enc["assistant_masks"]

    import clawgym.agent.loop as loop

    monkeypatch.setattr(loop, "TOOL_SCHEMAS", tools)  # the loop offers the trained schemas
    task = Task(task_id="count-1", instruction=msgs[1]["content"],
                files=[File(path="notes/todo.txt", content=TODO_FILE)])
    spec = PolicySpec(name="tiny-sft", kind="local", model=str(trained["ckpt"]),
                      extra={"device": "cpu", "startup_timeout_s": 600})
    with open_endpoint(spec) as ep:
        assert ep.token_ids  # the embedded server is asked for the sampled tokens
        # one raw request: the first turn ends by itself with a tool call
        from clawgym.agent.servers import server_token

        r = httpx.post(ep.base_url + "/chat/completions", timeout=120,  # the server's bearer token
                       headers={"Authorization": f"Bearer {server_token()}"}, json={
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
            # the trained system prompt names the isolating backends' workspace; the local backend's is a temp dir
            res = run_builtin(task, ep, sb, Limits(max_turns=6, max_completion_tokens=200, max_wall_s=300),
                              system_prompt=msgs[0]["content"])
            files = sb.list_files()
            written = sb.read_file("output/count.txt") if "output/count.txt" in files else None
    assert res.failure_class == "ok", (res.error, res.messages[2:])
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for m in res.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert calls == [("read", {"path": "notes/todo.txt"}), ("write", {"path": "output/count.txt", "content": "3\n"})]
    assert written == b"3\n", (files, res.messages[2:])
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

    # the SFT set keeps the sampled tokens; the trainer trains on them as they are (and says which it re-tokenized)
    from clawgym.agent.rollout import Rollout
    from clawgym.train.sft import SFTRunConfig, run_sft, token_exact_dataset
    from clawgym.trajectories.sft import build_sft_dataset, save_hf_dataset, to_hf_dataset

    ro = Rollout(task_id=task.task_id, policy="tiny-sft", messages=res.messages, tools=tools, score=1.0)
    built = build_sft_dataset([ro.to_row()], [task], [], tokenizer=tok).rows
    assert len(built) == 1 and all(TOKENS_KEY in m for m in built[0]["messages"] if m["role"] == "assistant")
    drifted = json.loads(json.dumps(built[0]))
    later = [m for m in drifted["messages"] if m["role"] == "assistant"][1][TOKENS_KEY]
    later["prompt_token_ids"][5] += 1  # a re-rendered history that is not what was sampled before
    drifted["sample_id"] = "drifted"
    ds, stats = token_exact_dataset(to_hf_dataset([built[0], drifted]).select_columns(["messages", "tools"]), tok)
    # a record that disagrees with its messages is never trained as the model's text: dropped, counted
    assert stats == {"token_exact": 1, "retokenized": 0, "retokenize_reasons": {}, "dropped": {"drift": 1},
                     "tokenized_by": "clawgym"}
    assert len(ds) == 1 and ds[0]["input_ids"] == ids and ds[0]["assistant_masks"] == mask
    out_dir = trained["dir"] / "exact"
    rec2 = run_sft(SFTRunConfig(base_model=str(trained["ckpt"]), output_dir=str(out_dir), resume=False,
                                dataset_path=str(save_hf_dataset(built, trained["dir"] / "ds-exact")),
                                sft_config={"max_steps": 1, "max_length": 4096, "save_steps": 1000}))
    assert rec2.hyperparams["tokens"] == {"token_exact": 1, "retokenized": 0, "retokenize_reasons": {},
                                          "tokenized_by": "clawgym"}
    assert rec2.tokens_seen == len(ids) and rec2.steps == 1
    assert rec2.hyperparams["sft_config"]["assistant_only_loss"] is False  # the mask column carries the loss mask

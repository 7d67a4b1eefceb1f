"""The real OpenClaw (openclaw@2026.9.6) with the embedded model (SmolLM2-135M, a context window of 8,192 tokens)
behind the recording proxy: the trajectory carries the sampled token ids of every assistant turn and its SFT row
is token-exact, nothing re-tokenized.

OpenClaw's full prompt is ~9,200 tokens, over the model's whole window; told the model's real window
(clawgym.agent.openclaw.model_context_window), OpenClaw runs with the lean config (no bootstrap files, no skills,
read/write/edit/exec only, no Tool Search) and its prompt fits with the completion bound. The embedded server
refuses a request over the window at once (clawgym.serve.context_limit). The base model answers the task in prose
(one turn); `tool_choice: "required"` (OpenClaw's per-model extra body) makes it call a tool every turn, so OpenClaw
runs the tools and re-sends the grown history: the turns after the first check that what OpenClaw re-sends is what
the server rendered before (no drift). Needs scripts/install_openclaw.sh and the prepared base model."""

import os
import time
from pathlib import Path

import httpx
import pytest

from clawgym.agent.demo import demo_tasks
from clawgym.agent.loop import Limits
from clawgym.agent.openclaw import LEAN_TOOLS, openclaw_installed
from clawgym.agent.policies import PolicySpec, open_endpoint, over_context_window
from clawgym.agent.proxy import read_log
from clawgym.agent.rollout import RolloutSettings, run_rollout
from clawgym.sandbox import get_factory

pytestmark = [pytest.mark.openclaw, pytest.mark.model, pytest.mark.slow]

_ok, _why = openclaw_installed()
if not _ok:
    pytest.skip(f"OpenClaw is not installed: {_why}", allow_module_level=True)

MODEL = Path(os.environ.get("CLAWGYM_BASE_MODEL_DIR",
                            Path(__file__).resolve().parents[2] / "data" / "models" / "smollm2-135m-instruct"))
WINDOW = 8192  # SmolLM2-135M's max_position_embeddings
MAX_COMPLETION = 256
FULL_PROMPT = 9161  # OpenClaw's first request with its default config, measured in this model's tokens


def _backend() -> str:
    from clawgym.sandbox.bwrap.backend import available

    return "bwrap" if available()[0] else "local"


def test_openclaw_rollout_with_the_embedded_model_is_token_exact(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    if not (MODEL / "config.json").exists():  # the real embedded model, prepared once (idempotent, ~1 min)
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(MODEL)
    # a loaded 2-core box: GNU OpenMP's spinning workers decode at ~1 tok/s there, passive ones at ~10
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    spec = PolicySpec(name="smollm2-base", kind="local", model=str(MODEL), extra={"model_path": str(MODEL)})
    task = demo_tasks()[0]
    tok = AutoTokenizer.from_pretrained(str(MODEL))
    factory = get_factory(_backend())
    t0 = time.monotonic()
    turns = []
    malformed = 0
    try:
        with open_endpoint(spec) as ep:
            assert ep.token_ids  # the embedded server returns the sampled ids: the proxy asks for them
            # over the window: a 400 naming the model, its window and the prompt, at once (not a long prefill)
            t = time.monotonic()
            r = httpx.post(ep.base_url + "/chat/completions", timeout=120,
                           headers={"Authorization": f"Bearer {ep.api_key}"},
                           json={"model": ep.model, "stream": True, "max_tokens": 8,
                                 "messages": [{"role": "user", "content": "word " * 9000}]})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            # the engine's words for it (vLLM: code 400, "maximum context length is N"), read by the agent's client
            # as the same typed limit as OpenAI's context_length_exceeded
            assert over_context_window(err.get("code"), err["message"]), err
            assert f"maximum context length is {WINDOW}" in err["message"] and time.monotonic() - t < 60
            # the 135M model sometimes loops inside its first forced call until the completion bound (then OpenClaw
            # stops after one turn), or writes a call whose arguments are not JSON (the engine streams them as
            # written; OpenClaw repairs them when it re-sends the history). Each rollout's prompt differs
            # (OpenClaw's timestamp and session id), so another one is tried for the multi-turn check. About 1 in 4
            # rollouts is clean and multi-turn here (12 stressed: 3), so up to 16 are tried (all malformed: ~1%).
            # Every rollout is either token-exact or, with a malformed call, classified as such.
            for attempt in range(16):
                ro = run_rollout(task, ep, factory, RolloutSettings(
                    limits=Limits(max_turns=3, max_completion_tokens=MAX_COMPLETION, max_wall_s=900),
                    runtime="openclaw", attempts=1,
                    runtime_options={"log_dir": str(tmp_path / f"log{attempt}"),
                                     "tools_dir": str(tmp_path / "no-install"),
                                     "request_params": {"tool_choice": "required"}}))
                if ro.meta.get("divergence") or any(_malformed(a) for a in _served_arguments(ro)):
                    malformed += _check_malformed(ro, tok)
                    continue
                turns.append(_check_token_exact(ro, task, tok))
                if len(turns[-1][0]) >= 2:
                    break
    finally:
        factory.close()
    wall = time.monotonic() - t0
    assert turns, f"every rollout had a malformed call ({malformed})"
    prompts, outs = turns[-1]
    assert len(prompts) >= 2, turns  # forced tool calls: OpenClaw ran them and re-sent the history
    print(f"openclaw + embedded model: rollouts {len(turns)} (+{malformed} with a malformed call), "
          f"last: {len(prompts)} turns, "
          f"prompt tokens {prompts}, completion tokens {outs}; wall {wall:.0f} s")


def _check_token_exact(ro, task, tok) -> tuple[list[int], list[int]]:
    """Assert the rollout's trajectory and SFT row are token-exact; (prompt, completion token counts per turn)."""
    from clawgym.train.sft import token_exact_dataset
    from clawgym.trajectories.sft import (
        TOKENS_KEY,
        drop_noise_turns,
        normalise_messages,
        to_hf_dataset,
        token_exact_row,
    )

    assert ro.runtime == "openclaw" and ro.failure_class != "infra", (ro.failure_class, ro.error)
    assert sorted(t["function"]["name"] for t in ro.tools) == sorted(LEAN_TOOLS)  # the lean config
    entries = [e for e in read_log(ro.proxy_log) if not e.get("kind")]
    assert entries and all(e["request"].get("return_token_ids") is True for e in entries)
    # OpenClaw's re-sent history extends the answered chain (its rewritten call ids included)
    assert ro.meta["divergence"] == [] and ro.meta["side_requests"] == 0, ro.meta

    asst = [m for m in ro.messages if m["role"] == "assistant"]
    toks = [m.get(TOKENS_KEY) for m in asst]
    assert asst and all(isinstance(t, dict) and t["prompt_token_ids"] and t["token_ids"] for t in toks), toks
    prompts = [len(t["prompt_token_ids"]) for t in toks]
    outs = [len(t["token_ids"]) for t in toks]
    assert prompts[0] + MAX_COMPLETION <= WINDOW < FULL_PROMPT  # the lean prompt fits with the completion
    assert prompts == sorted(prompts) and all(o <= MAX_COMPLETION for o in outs)

    res = token_exact_row(ro.messages, tok, ro.tools)
    assert not isinstance(res, str), res  # every later prompt starts with the served tokens: no drift
    ids, mask, fixed = res
    assert fixed == 0 and sum(mask) == sum(outs)
    assert ids[:prompts[-1]] == toks[-1]["prompt_token_ids"]  # the row is the served tokens themselves

    # the SFT row as the pipeline builds it (clawgym.trajectories.sft: noise dropped, messages normalised, an HF
    # dataset with JSON columns), trained from the sampled tokens: 0 re-tokenized
    msgs = normalise_messages(drop_noise_turns(ro.messages)[0])
    ds = to_hf_dataset([{"messages": msgs, "tools": ro.tools, "sample_id": "s", "task_id": task.task_id,
                         "category": task.category, "n_tokens": len(ids)}]).select_columns(["messages", "tools"])
    out, stats = token_exact_dataset(ds, tok)
    assert stats["token_exact"] == 1 and stats["retokenized"] == 0 and "contexts_fixed" not in stats, stats
    kept = [m[TOKENS_KEY] for m in msgs if m["role"] == "assistant"]
    assert sum(out[0]["assistant_masks"]) == sum(len(t["token_ids"]) for t in kept)
    return prompts, outs


def _served_arguments(ro) -> list:
    return [tc["function"].get("arguments") for m in ro.messages if m["role"] == "assistant"
            for tc in m.get("tool_calls") or []]


def _malformed(args) -> bool:
    """Arguments that are not a JSON object (the model wrote them so; the engine streams them as written)."""
    import json

    try:
        return not isinstance(json.loads(args), dict)
    except (TypeError, ValueError):
        return True


def _check_malformed(ro, tok) -> int:
    """A rollout with a call whose arguments are not a JSON object. Its re-sent history may differ from what was
    served only there (OpenClaw repairs such a call), recorded as ``rewritten_history``; its token record is named
    (``malformed_call``, or ``drift`` where the repaired call went upstream as text), and the SFT set keeps it out
    as malformed. 1."""
    from clawgym.trajectories.sft import drop_noise_turns, normalise_messages, token_exact_row

    div = ro.meta["divergence"]
    assert {d["kind"] for d in div} <= {"rewritten_history"}, div
    assert any(_malformed(a) for a in _served_arguments(ro)), (div, _served_arguments(ro))
    res = token_exact_row(ro.messages, tok, ro.tools)
    assert res in ("malformed_call", "drift"), res  # named, never trained as token-exact
    with pytest.raises(ValueError, match="arguments"):
        normalise_messages(drop_noise_turns(ro.messages)[0])
    return 1

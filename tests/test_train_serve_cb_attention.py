"""ModelServer's CPU kernels: the continuous-batching attention (clawgym.serve.cb_attention.cb_sdpa_attention, with the
one-copy cache read of decode steps, cb_cache_update) gives the same result as transformers' block-diagonal sdpa;
the pre-packed oneDNN linear layers (packed_linear_forward) the same as F.linear; the server runs through
clawgym/serve/launcher.py with both installed."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from clawgym.serve import cb_attention, packed_linear
from clawgym.serve import launcher as launcher_module
from clawgym.serve.cb_attention import cb_sdpa_attention, install_cb_attention, uninstall_cb_attention
from clawgym.serve.launcher import CPU_CB_ARGS, MALLOC_ENV, ModelServer
from clawgym.serve.packed_linear import install_packed_linear, uninstall_packed_linear

HEADS, KV_HEADS, DIM = 6, 2, 16


class _Attn(torch.nn.Module):  # what the attention function reads from the module
    num_key_value_groups = HEADS // KV_HEADS
    is_causal = True


def _reference(query, key, value, cu_q, cu_k):
    """Every query of the step against every key of the step, through a block-diagonal causal mask (CB's sdpa)."""
    mask = torch.full((cu_q[-1], cu_k[-1]), float("-inf"))
    for i in range(len(cu_q) - 1):
        q_len, k_len = cu_q[i + 1] - cu_q[i], cu_k[i + 1] - cu_k[i]
        for r in range(q_len):  # a query sees its own sequence's keys up to its position (bottom-right aligned)
            mask[cu_q[i] + r, cu_k[i]: cu_k[i] + k_len - q_len + r + 1] = 0
    rep = HEADS // KV_HEADS
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1), attn_mask=mask)
    return out.transpose(1, 2), mask


def _step(q_lens, k_lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    cu_q, cu_k = [0], [0]
    for q, k in zip(q_lens, k_lens):
        cu_q.append(cu_q[-1] + q)
        cu_k.append(cu_k[-1] + k)
    # the layouts CB hands over: [1, heads, tokens, dim] views of [tokens, heads, dim] tensors
    query = torch.randn(cu_q[-1], HEADS, DIM, generator=g).transpose(0, 1).unsqueeze(0)
    key = torch.randn(cu_k[-1], KV_HEADS, DIM, generator=g).transpose(0, 1).unsqueeze(0)
    value = torch.randn(cu_k[-1], KV_HEADS, DIM, generator=g).transpose(0, 1).unsqueeze(0)
    return query, key, value, cu_q, cu_k


@pytest.mark.parametrize("q_lens,k_lens", [
    ([1] * 5, [7, 30, 12, 1, 64]),                # decode only, unequal contexts (padded batch)
    ([9, 1, 4, 1], [9, 20, 10, 33]),              # mixed: a fresh prefill, decodes, a chunk after cached tokens
    ([17, 5], [17, 5]),                           # prefill only
])
def test_matches_block_diagonal_sdpa(q_lens, k_lens):
    query, key, value, cu_q, cu_k = _step(q_lens, k_lens)
    want, mask = _reference(query, key, value, cu_q, cu_k)
    got, weights = cb_sdpa_attention(_Attn(), query, key, value, mask[None, None], scaling=DIM ** -0.5,
                                     cu_seq_lens_q=torch.tensor(cu_q, dtype=torch.int32),
                                     cu_seq_lens_k=torch.tensor(cu_k, dtype=torch.int32))
    assert weights is None
    assert got.shape == (1, cu_q[-1], HEADS, DIM)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def _padded(key, value, cu_k):  # what cb_cache_update hands over for a decode-only step
    lens = [cu_k[i + 1] - cu_k[i] for i in range(len(cu_k) - 1)]
    l_max = max(lens)
    kp = torch.zeros(len(lens), KV_HEADS, l_max, DIM)
    vp = torch.zeros(len(lens), KV_HEADS, l_max, DIM)
    for i, n in enumerate(lens):
        kp[i, :, :n] = key[0, :, cu_k[i]:cu_k[i + 1]]
        vp[i, :, :n] = value[0, :, cu_k[i]:cu_k[i + 1]]
    valid = (torch.arange(l_max)[None, :] < torch.tensor(lens)[:, None])[:, None, None, :]
    return kp, vp, valid


@pytest.mark.parametrize("causal_module", [True, False])
def test_decode_step_read_padded_from_the_cache(causal_module):
    """The one-copy decode path (keys padded by cb_cache_update), and its unpadding fallback for a module the
    per-sequence path does not handle (here: non-causal, which goes to transformers' sdpa with the CB mask)."""
    query, key, value, cu_q, cu_k = _step([1] * 4, [5, 19, 1, 11], seed=3)
    want, mask = _reference(query, key, value, cu_q, cu_k)
    module = _Attn()
    module.is_causal = causal_module
    dummy = torch.full_like(key[:, :, :4], float("nan"))  # what the cache update returns: must not be read
    got, _ = cb_sdpa_attention(module, query, dummy if causal_module else key[:, :, :0], dummy, mask[None, None],
                               scaling=DIM ** -0.5, cu_seq_lens_q=torch.tensor(cu_q, dtype=torch.int32),
                               cu_seq_lens_k=torch.tensor(cu_k, dtype=torch.int32),
                               **{cb_attention._PADDED_KV: _padded(key, value, cu_k)})
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_chunk_after_cache_without_mask_is_causal_bottom_right():
    query, key, value, cu_q, cu_k = _step([4, 1], [10, 6], seed=1)
    want, _ = _reference(query, key, value, cu_q, cu_k)
    got, _ = cb_sdpa_attention(_Attn(), query, key, value, None, scaling=DIM ** -0.5,
                               cu_seq_lens_q=torch.tensor(cu_q), cu_seq_lens_k=torch.tensor(cu_k))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_without_cb_boundaries_it_is_transformers_sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, h, 8, DIM, generator=g) for h in (HEADS, KV_HEADS, KV_HEADS))
    want, _ = sdpa_attention_forward(_Attn(), q, k, v, None, scaling=0.3)
    got, _ = cb_sdpa_attention(_Attn(), q, k, v, None, scaling=0.3)
    torch.testing.assert_close(got, want)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from clawgym.train.base_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("cbattn") / "tiny", hidden_size=64, num_layers=2)


def test_continuous_batching_generates_the_same_tokens(tiny):
    """A real CB run (prefix sharing, chunked prefill, mixed steps): greedy tokens identical with and without it."""
    from transformers import AttentionInterface, AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(str(tiny), attn_implementation="sdpa")
    prefix = list(range(100, 160))  # a shared 60-token prefix, like a rollout's system prompt + tool schemas
    prompts = [prefix + [200 + i] * (3 + 7 * i) for i in range(6)]
    gen = GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=-1)
    cfg = ContinuousBatchingConfig(num_blocks=64, block_size=16, max_batch_tokens=48,  # forces chunked prefill
                                   return_logprobs=True)

    def run():
        out = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cfg, warmup=False)
        return sorted((o.prompt_ids, o.generated_tokens, o.logprobs) for o in out.values())

    from transformers.generation.continuous_batching.cache import PagedAttentionCache

    stock_update = PagedAttentionCache.update
    want = run()
    padded_steps = []
    try:
        install_cb_attention()
        assert AttentionInterface._global_mapping["sdpa"] is cb_sdpa_attention
        assert PagedAttentionCache.update is cb_attention.cb_cache_update

        def counting(self, k, v, layer_idx, kwargs):  # count the decode-only steps read padded from the cache
            out = cb_attention.cb_cache_update(self, k, v, layer_idx, kwargs)
            padded_steps.append(cb_attention._PADDED_KV in kwargs)
            return out

        PagedAttentionCache.update = counting
        got = run()
    finally:
        uninstall_cb_attention()
    assert PagedAttentionCache.update is stock_update
    assert AttentionInterface._global_mapping["sdpa"] is not cb_sdpa_attention
    assert any(padded_steps) and not all(padded_steps)  # both the one-copy decode path and the stock path ran
    assert [len(t) for _, t, _ in got] == [12] * 6
    assert [(p, t) for p, t, _ in got] == [(p, t) for p, t, _ in want]
    torch.testing.assert_close(torch.tensor([lp for *_, lp in got]), torch.tensor([lp for *_, lp in want]),
                               atol=1e-4, rtol=1e-4)  # the log-probabilities of every generated token too


def test_command_and_environment(tiny, monkeypatch):
    launcher = str(Path(launcher_module.__file__).resolve())
    cb = ModelServer(tiny, port=1234, device="cpu")
    cmd = cb.command()
    assert cmd[:10] == [sys.executable, launcher, "--safe-tool-parsing", "--token-ids", "--structured",
                        "--context-limit", "--served-prefix", "--cb-attention", "--packed-linear", "serve"]
    assert "--continuous-batching" in cmd and cmd[-6:] == list(CPU_CB_ARGS)
    assert ModelServer(tiny, port=1, device="cpu", per_sequence_attention=False, token_ids=False,
                       structured_output=False).command()[:6] == [  # no token ids: nothing served to reuse
        sys.executable, launcher, "--safe-tool-parsing", "--context-limit", "--packed-linear", "serve"]
    assert launcher not in ModelServer(tiny, port=1, device="cpu", per_sequence_attention=False, token="",
                                       packed_linear=False, safe_tool_parsing=False, token_ids=False,
                                       structured_output=False, context_limit=False).command()
    assert launcher in ModelServer(tiny, port=1, device="cpu", per_sequence_attention=False,  # auth: the launcher
                                   packed_linear=False, safe_tool_parsing=False, token_ids=False,
                                   structured_output=False, context_limit=False).command()
    assert ModelServer(tiny, port=1, device="cpu", per_sequence_attention=False, packed_linear=False,
                       token_ids=False, structured_output=False, context_limit=False).command()[:4] == [
        sys.executable, launcher, "--safe-tool-parsing", "serve"]
    assert ModelServer(tiny, port=1, device="cpu", per_sequence_attention=False, packed_linear=False,
                       safe_tool_parsing=False, served_prefix=False).command()[:6] == [
        sys.executable, launcher, "--token-ids", "--structured", "--context-limit", "serve"]
    assert "--packed-linear" not in ModelServer(tiny, port=1, device="cuda").command()  # CPU kernels only
    plain = ModelServer(tiny, port=1, device="cpu", continuous_batching=False).command()
    assert "--no-continuous-batching" in plain and plain[2:9] == [
        "--safe-tool-parsing", "--token-ids", "--structured", "--context-limit", "--served-prefix", "--packed-linear",
        "serve"]
    env = cb.environment()
    assert all(env[k] == v for k, v in MALLOC_ENV.items()) and env["HF_HUB_OFFLINE"] == "1"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" or os.environ.get("OMP_WAIT_POLICY")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "12345")  # the caller's settings win
    assert cb.environment()["MALLOC_TRIM_THRESHOLD_"] == "12345"
    given = ModelServer(tiny, port=1, device="cpu", env={"MALLOC_TRIM_THRESHOLD_": "7", "A": "b"}).environment()
    assert given == {"MALLOC_TRIM_THRESHOLD_": "7", "A": "b",  # an explicit env, not this process's
                     "MALLOC_MMAP_THRESHOLD_": MALLOC_ENV["MALLOC_MMAP_THRESHOLD_"], "OMP_WAIT_POLICY": "PASSIVE",
                     "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


def test_launcher_runs_transformers_serve_cli():
    r = subprocess.run([sys.executable, launcher_module.__file__, "--safe-tool-parsing", "--token-ids", "--structured",
                        "--cb-attention", "--packed-linear", "serve", "--help"],
                       capture_output=True, text=True,
                       timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--continuous-batching" in r.stdout and "--cb-max-batch-tokens" in r.stdout


def test_server_answers_concurrent_requests(tiny):
    import openai

    with ModelServer(tiny, device="cpu", startup_timeout_s=120) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key=srv.token or "none", timeout=120, max_retries=0)

        def ask(i):
            r = client.chat.completions.create(model=srv.model_name, max_tokens=8, temperature=0,
                                               messages=[{"role": "system", "content": "You are an agent."},
                                                         {"role": "user", "content": f"Say {i}."}])
            return r.usage.completion_tokens

        with ThreadPoolExecutor(4) as ex:
            toks = list(ex.map(ask, range(4)))
        assert all(1 <= t <= 8 for t in toks), toks
        assert "Traceback" not in srv.log_tail(20000)


@pytest.fixture
def packed():
    if not install_packed_linear():
        pytest.skip("this torch build has no oneDNN (mkldnn) linear ops")  # pragma: no cover - the pinned CPU build has
    yield
    uninstall_packed_linear()


def test_packed_linear_matches_f_linear(packed):
    g = torch.Generator().manual_seed(4)
    lin = torch.nn.Linear(96, 200)
    with torch.no_grad():
        for x in (torch.randn(5, 96, generator=g), torch.randn(1, 16, 96, generator=g),
                  torch.randn(7, 3, 96, generator=g).transpose(0, 1)):  # 2-D, CB's [1, tokens, hidden], strided
            got = lin(x)
            # the oneDNN path ran
            assert packed_linear._PACKED in lin.__dict__ and lin.__dict__[packed_linear._PACKED] is not False
            torch.testing.assert_close(got, torch.nn.functional.linear(x, lin.weight, lin.bias), atol=1e-5, rtol=1e-5)
        nobias = torch.nn.Linear(96, 8, bias=False)
        x = torch.randn(3, 96, generator=g)
        torch.testing.assert_close(nobias(x), x @ nobias.weight.T, atol=1e-5, rtol=1e-5)
        lin.weight.mul_(-2)  # an in-place edit (a reloaded checkpoint, a training step) is packed again
        torch.testing.assert_close(lin(x[:, :96]), torch.nn.functional.linear(x, lin.weight, lin.bias),
                                   atol=1e-5, rtol=1e-5)
    # training and other dtypes take the stock forward: gradients flow, float64 stays float64
    y = lin(torch.randn(2, 96, generator=g))
    y.sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0
    assert lin.double()(torch.randn(2, 96, dtype=torch.float64)).dtype == torch.float64


def test_packed_linear_generates_like_stock(tiny, packed):
    """The whole model through continuous batching with both CPU kernels: the same greedy tokens as stock, the
    log-probabilities to float32 rounding."""
    from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(str(tiny), attn_implementation="sdpa")
    prompts = [list(range(100, 140)) + [300 + i] * (2 + 5 * i) for i in range(5)]
    gen = GenerationConfig(max_new_tokens=10, do_sample=False, eos_token_id=-1)
    cfg = ContinuousBatchingConfig(num_blocks=64, block_size=16, max_batch_tokens=64, return_logprobs=True)

    def run():
        out = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cfg, warmup=False)
        return sorted((o.prompt_ids, o.generated_tokens, o.logprobs) for o in out.values())

    got = run()
    assert all(packed_linear._PACKED in m.__dict__ for m in model.modules() if isinstance(m, torch.nn.Linear))
    uninstall_packed_linear()
    want = run()
    install_packed_linear()
    install_cb_attention()
    try:
        both = run()
    finally:
        uninstall_cb_attention()
    for run_ in (got, both):
        assert [(p, t) for p, t, _ in run_] == [(p, t) for p, t, _ in want]
        torch.testing.assert_close(torch.tensor([lp for *_, lp in run_]), torch.tensor([lp for *_, lp in want]),
                                   atol=1e-4, rtol=1e-4)

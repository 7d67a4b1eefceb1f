"""bf16 training: on where the hardware computes in bfloat16 (AVX512-BF16 / AMX on CPU), TRL's own
`bf16` field overrides it; bf16 weights train with optimi's Kahan-summed AdamW and learn like float32; the
assistant-only loss masks survive TRL's padding-free and packed batches, and packed rows do not see each other."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOOLS = [{"type": "function", "function": {
    "name": "write", "description": "Create or overwrite a file in the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}]


def _conv(i: int) -> list[dict]:
    return [
        {"role": "user", "content": f"Write {'hi ' * (i + 1)}to out{i}.txt"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "id": f"c{i}",
             "function": {"name": "write", "arguments": {"path": f"out{i}.txt", "content": "hi " * (i + 1)}}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"Wrote {3 * (i + 1)} bytes to out{i}.txt"},
        {"role": "assistant", "content": "Done." + " Really." * i},
    ]


AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16 amx_int8\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from clawgym.train.base_model import make_tiny_model
    from clawgym.trajectories.sft import save_hf_dataset

    d = tmp_path_factory.mktemp("bf16")
    base = make_tiny_model(d / "tiny", hidden_size=32, num_layers=1)
    rows = [{"messages": _conv(i), "tools": TOOLS, "sample_id": f"s{i}", "task_id": f"t{i}", "category": "c",
             "n_tokens": 0} for i in range(3)]
    return {"dir": d, "base": str(base), "ds": str(save_hf_dataset(rows, d / "ds"))}


def test_cpu_bf16_detection_from_cpuinfo_flags():
    from clawgym.train.config import cpu_bf16_flags, cpu_bf16_supported

    assert cpu_bf16_flags(AVX512_BF16) == ["avx512_bf16"] and cpu_bf16_supported(AVX512_BF16)
    assert cpu_bf16_flags(AMX) == ["amx_bf16"] and cpu_bf16_supported(AMX)
    assert cpu_bf16_flags(AVX2) == [] and not cpu_bf16_supported(AVX2)
    assert not cpu_bf16_supported("flags\t: avx512f avx512bw\n")  # AVX512 without BF16: emulated, slower
    # this machine: the flags /proc/cpuinfo reports decide
    with open("/proc/cpuinfo") as f:
        flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    assert cpu_bf16_supported() == bool({"avx512_bf16", "amx_bf16"} & set(flags))


@pytest.mark.parametrize("has_bf16", [True, False])
def test_default_follows_hardware_and_trl_bf16_field_overrides(monkeypatch, has_bf16, tmp_path):
    import torch
    from trl import GRPOConfig, SFTConfig

    import clawgym.train.config as config
    from clawgym.train.grpo import GRPORunConfig
    from clawgym.train.sft import SFTRunConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(config, "cpu_bf16_supported", lambda cpuinfo=None: has_bf16)
    sft, grpo = SFTRunConfig().trl_fields(), GRPORunConfig().trl_fields()
    assert sft["use_cpu"] is True and sft["bf16"] is has_bf16 and grpo["bf16"] is has_bf16
    assert SFTConfig(output_dir=str(tmp_path), **sft).bf16 is has_bf16  # TRL takes the resolved value as is
    assert GRPOConfig(output_dir=str(tmp_path), **grpo).bf16 is has_bf16
    # TRL's own field, set either way, wins over the detection
    for forced in (True, False):
        assert SFTRunConfig(sft_config={"bf16": forced}).trl_fields()["bf16"] is forced
        assert GRPORunConfig(grpo_config={"bf16": forced}).trl_fields()["bf16"] is forced
    assert SFTRunConfig(sft_config={"bf16": None}).trl_fields()["bf16"] is has_bf16
    p = config.precision(sft)
    assert p["bf16"] is has_bf16 and p["weights"] == ("bfloat16" if has_bf16 else "float32")


def test_weights_dtype_and_optimizer_by_trl_fields():
    import optimi
    import torch

    from clawgym.train.config import TrainConfigError, bf16_optimizer, weights_dtype

    on = {"bf16": True, "learning_rate": 3e-5, "adam_beta2": 0.95, "weight_decay": 0.1}
    assert weights_dtype(on) is torch.bfloat16 and weights_dtype({"bf16": False}) is torch.float32
    cls, kw = bf16_optimizer(on, torch.bfloat16)
    assert cls is optimi.AdamW and kw["kahan_sum"] is True
    assert (kw["lr"], kw["betas"], kw["weight_decay"]) == (3e-5, (0.9, 0.95), 0.1)  # the Trainer's AdamW settings
    # fp32 master weights with bf16 autocast, by TRL's model_init_kwargs: the Trainer's own optimizer
    auto = {**on, "model_init_kwargs": {"dtype": "float32"}}
    assert weights_dtype(auto) is torch.float32 and bf16_optimizer(auto, torch.float32) is None
    assert bf16_optimizer({**on, "optim": "adamw_torch"}, torch.bfloat16) is None  # an explicit optim is kept
    with pytest.raises(TrainConfigError, match=r"model_init_kwargs: field 'dtype': 'bf16' is not a torch dtype"):
        weights_dtype({"model_init_kwargs": {"dtype": "bf16"}})


def test_bf16_sft_learns_like_float32(setup):
    """Same rows, same seed: bf16 weights + Kahan AdamW against float32. Could fail: bf16 weights with a plain
    AdamW lose small updates to rounding."""
    from clawgym.train.sft import SFTRunConfig, run_sft

    recs = {}
    for name, extra in [("fp32", {"bf16": False}), ("bf16", {"bf16": True})]:
        recs[name] = run_sft(SFTRunConfig(
            base_model=setup["base"], dataset_path=setup["ds"], output_dir=str(setup["dir"] / name), resume=False,
            sft_config={"learning_rate": 2e-3, "max_steps": 6, "logging_steps": 2, "save_steps": 10**6,
                        "max_length": 1024, "seed": 0, **extra}))
    fp, bf = recs["fp32"], recs["bf16"]
    assert bf.hyperparams["precision"]["weights"] == "bfloat16"
    assert bf.hyperparams["precision"]["optimizer"] == "optimi.AdamW(kahan_sum=True)"
    assert fp.hyperparams["precision"]["weights"] == "float32"
    drop_fp = fp.loss_curve[0]["loss"] - fp.loss_curve[-1]["loss"]
    drop_bf = bf.loss_curve[0]["loss"] - bf.loss_curve[-1]["loss"]
    assert drop_fp > 0.2, fp.loss_curve
    assert abs(drop_bf - drop_fp) < 0.15 * drop_fp, (fp.loss_curve, bf.loss_curve)
    assert abs(bf.loss_curve[-1]["loss"] - fp.loss_curve[-1]["loss"]) < 0.05 * fp.loss_curve[-1]["loss"]


def _segments(batch) -> list[tuple]:
    """(input ids, labelled ids) of every row of a collated batch, split at position-id resets when packed."""
    ids, labels = batch["input_ids"], batch["labels"]
    out = []
    for b in range(ids.shape[0]):
        if "position_ids" in batch:
            pos = batch["position_ids"][b].tolist()
            starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]
            spans = [(s, e) for s, e in zip(starts, starts[1:])]
        else:
            n = int(batch["attention_mask"][b].sum())
            spans = [(0, n)]
        for s, e in spans:
            row = ids[b, s:e].tolist()
            out.append((tuple(row), tuple(t for t in labels[b, s:e].tolist() if t != -100)))
    return out


@pytest.mark.parametrize("mode", ["plain", "padding_free", "packing"])
def test_assistant_masks_survive_padding_free_and_packing(setup, mode, tmp_path):
    """The labels of TRL's collated batches are exactly each row's assistant tokens (the chat template's
    generation markers), padded, padding-free or packed; packed rows attend only within themselves."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from clawgym.train.sft import SFTRunConfig, load_sft_dataset

    tok = AutoTokenizer.from_pretrained(setup["base"])
    ds = load_sft_dataset(setup["ds"])
    extra = {"plain": {"per_device_train_batch_size": 3},
             "padding_free": {"per_device_train_batch_size": 3, "padding_free": True, "max_length": None},
             "packing": {"per_device_train_batch_size": 1, "packing": True, "packing_strategy": "bfd",
                         "max_length": 4096}}[mode]
    fields = SFTRunConfig(sft_config={"bf16": False, **extra}).trl_fields()
    model = AutoModelForCausalLM.from_pretrained(setup["base"], dtype=torch.float32)
    tr = SFTTrainer(model=model, args=SFTConfig(output_dir=str(tmp_path), **fields), train_dataset=ds,
                    processing_class=tok)
    batch = next(iter(tr.get_train_dataloader()))
    if mode != "plain":
        assert "position_ids" in batch and "attention_mask" not in batch and batch["input_ids"].shape[0] == 1
    # expected: each conversation rendered by the chat template, labelled exactly where its assistant mask is 1
    want = []
    for r in ds:
        enc = tok.apply_chat_template(r["messages"], tools=r["tools"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
        assert 0 < sum(mask) < len(ids)
        want.append((tuple(ids), tuple(t for t, m in zip(ids, mask) if m)))
    got = _segments(batch)
    assert sorted(got) == sorted(want)
    if mode == "packing":  # no row sees another: its packed logits are its logits alone
        with torch.no_grad():
            packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0]
            pos = batch["position_ids"][0].tolist()
            starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]
            assert len(starts) - 1 == len(want)
            for s, e in zip(starts, starts[1:]):
                alone = model(input_ids=batch["input_ids"][:, s:e]).logits[0]
                torch.testing.assert_close(packed[s:e], alone, atol=2e-4, rtol=1e-4)

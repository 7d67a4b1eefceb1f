"""bf16 training on CPU: SFT tokens/s bf16 over float32, padding-free / packed over plain, GRPO steps/s bf16 over
float32 — interleaved in one run on the same rows and seed, with the loss after N steps of every arm.

    python benchmarks/train_bf16.py [--steps 6] [--rows 8] [--max-length 1024] [--repeats 2] [--grpo-steps 2]
                                    [--base data/models/smollm2-135m-instruct | tiny:HIDDEN:LAYERS] [--skip sft,pack,grpo]

Every arm is clawgym's own training path (clawgym.train.sft.run_sft / clawgym.train.grpo.run_grpo), in this process,
fresh model each arm, settings by TRL's own field names:
  SFT   fp32      {"bf16": False}                                     float32 weights, the Trainer's AdamW
        bf16      {"bf16": True}                                      bf16 weights + optimi AdamW (Kahan summation)
        autocast  {"bf16": True, "model_init_kwargs": {"dtype": "float32"}}  fp32 master weights, bf16 autocast
  pack  plain     per_device_train_batch_size B, padded to the longest row of the batch
        padfree   the same batches, {"padding_free": True, "max_length": None}   (rows all fit --max-length)
        packed    {"packing": True, "packing_strategy": "bfd"}, batch 1: rows packed into --max-length bins
  GRPO  fp32 / bf16 on procedural tasks (local sandboxes), completions sampled by the model, steps/s = steps / runtime
The precision arms of SFT run in ABBA order with --repeats 2 (the box is shared: ratios of interleaved runs).
The pack arms run in the precision this machine picks by default (bf16 where the CPU has AVX512-BF16 / AMX).
Data: oracle trajectories of procedural tasks (local sandbox), cleaned by build_sft_dataset, rows <= --max-length.
tokens/s = non-padding tokens seen / Trainer train_runtime. A 'tiny:H:L' base is a random Llama with the real
tokenizer (for a box without bf16 hardware, where bf16 arms are slow).
"""  # noqa: E501 -- usage lines are shell commands, kept whole

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRECISION_ARMS = {
    "fp32": {"bf16": False},
    "bf16": {"bf16": True},
    "autocast": {"bf16": True, "model_init_kwargs": {"dtype": "float32"}},
}


def make_data(out: Path, n_rows: int, base: str, max_length: int) -> dict:
    from clawgym.agent.rollout import run_rollout
    from clawgym.sandbox import SandboxConfig, get_factory, host_settings
    from clawgym.synth.families import generate_procedural
    from clawgym.trajectories.sft import SFTCleanConfig, build_sft_dataset, save_hf_dataset

    tasks = generate_procedural(n_rows * 3, seed=3)
    f = get_factory("local", SandboxConfig(**host_settings(os.environ)))
    rows = [run_rollout(t, "oracle", f).to_row() for t in tasks]
    # rows longer than max_length are dropped, so padding-free (which does not truncate) sees the same tokens
    res = build_sft_dataset(rows, tasks, [], SFTCleanConfig(tokenizer=base, max_tokens=max_length))
    if not res.rows:
        raise SystemExit(f"no SFT rows survived cleaning: {res.stats}")
    keep = res.rows[:n_rows]
    save_hf_dataset(keep, out, res.stats, tokenizer=base)
    toks = [r.get("n_tokens") or 0 for r in keep]
    return {"rows": len(keep), "tokens_mean": round(sum(toks) / max(1, len(toks)), 1), "tokens_max": max(toks)}


def sft_arm(base: str, data: Path, work: Path, steps: int, max_length: int, extra: dict) -> dict:
    from clawgym.train.sft import SFTRunConfig, run_sft

    cfg = {"max_steps": steps, "learning_rate": 1e-5, "max_length": max_length, "save_steps": 10**9, "seed": 0,
           "lr_scheduler_type": "constant", "logging_steps": 1, **extra}
    t = time.time()
    rec = run_sft(SFTRunConfig(base_model=base, dataset_path=str(data), output_dir=str(work), resume=False,
                               sft_config=cfg))
    return {"tokens": rec.tokens_seen, "runtime": rec.train_runtime_s, "tokens_per_s": rec.tokens_per_s,
            "steps": rec.steps, "loss": [round(c["loss"], 4) for c in rec.loss_curve], "final_loss": rec.final_loss,
            "precision": rec.hyperparams["precision"], "wall_s": round(time.time() - t, 1)}


def grpo_arm(base: str, tasks, work: Path, steps: int, extra: dict) -> dict:
    from clawgym.sandbox import SandboxConfig, get_factory, host_settings
    from clawgym.train.grpo import GRPORunConfig, run_grpo

    cfg = {"num_generations": 2, "per_device_train_batch_size": 2, "max_steps": steps, "learning_rate": 1e-6,
           "max_completion_length": 64, "max_tool_calling_iterations": 2, "seed": 0, **extra}
    t = time.time()
    rec = run_grpo(GRPORunConfig(base_model=base, output_dir=str(work), score_workers=2, resume=False,
                                 grpo_config=cfg), tasks,
                   get_factory("local", SandboxConfig(**host_settings(os.environ))))
    return {"steps": rec.steps, "runtime": rec.train_runtime_s, "steps_per_s": rec.steps / rec.train_runtime_s,
            "loss": [round(c["loss"], 4) for c in rec.loss_curve],
            "reward": [round(c["reward"], 3) for c in rec.reward_curve],
            "precision": rec.hyperparams["precision"], "wall_s": round(time.time() - t, 1)}


def _interleaved(names: list[str], repeats: int, run) -> dict[str, list]:
    """Each arm's results, run in the order A B … (repeats 1) or A B … … B A (ABBA: drift cancels); run(arm, i)."""
    order = names if repeats == 1 else names + names[::-1]
    out: dict[str, list] = {n: [] for n in names}
    for i, arm in enumerate(order):
        out[arm].append(run(arm, i))
    return out


def _mean(rs: list[dict], k: str) -> float:
    return sum(r[k] for r in rs) / len(rs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4, help="rows per step of the plain / padding-free arms")
    ap.add_argument("--repeats", type=int, default=2, help="2 = ABBA order of the precision arms")
    ap.add_argument("--grpo-steps", type=int, default=2)
    ap.add_argument("--autocast", action="store_true", help="also the fp32-master-weights autocast arm")
    ap.add_argument("--base", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--skip", default="", help="comma list of sft,pack,grpo")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    from clawgym.train.base_model import DEFAULT_BASE_DIR, make_tiny_model, prepare_base_model
    from clawgym.train.config import bf16_supported, cpu_bf16_flags

    out: dict = {"cpu_bf16_flags": cpu_bf16_flags(), "bf16_default": bf16_supported(True), "steps": args.steps,
                 "max_length": args.max_length}
    print(f"CPU bf16 flags: {out['cpu_bf16_flags'] or 'none'}; bf16 by default: {out['bf16_default']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bf16-bench-") as d:
        d = Path(d)
        if args.base.startswith("tiny:"):
            _, h, n = args.base.split(":")
            base = str(make_tiny_model(d / "tiny", hidden_size=int(h), num_layers=int(n)))
        else:
            base = str(prepare_base_model(args.base) if args.base == DEFAULT_BASE_DIR else args.base)
        out["base"] = args.base
        if not {"sft", "pack"} <= skip:
            out["data"] = make_data(d / "data", args.rows, base, args.max_length)
            print(f"data: {out['data']}", flush=True)

        if "sft" not in skip:
            names = ["fp32", "bf16"] + (["autocast"] if args.autocast else [])

            def sft_run(arm, i):
                r = sft_arm(base, d / "data", d / f"sft-{arm}{i}", args.steps, args.max_length, PRECISION_ARMS[arm])
                print(f"SFT {arm:8s} tokens={r['tokens']} runtime={r['runtime']:.1f}s tokens/s={r['tokens_per_s']:.1f}"
                      f" loss={r['loss']} ({r['precision']['weights']}, {r['precision']['optimizer']})", flush=True)
                return r

            res = _interleaved(names, args.repeats, sft_run)
            tp = {n: _mean(res[n], "tokens_per_s") for n in names}
            out["sft"] = {"tokens_per_s": {n: round(v, 2) for n, v in tp.items()},
                          "bf16_over_fp32": round(tp["bf16"] / tp["fp32"], 3), "goal": 1.8,
                          "final_loss": {n: res[n][0]["final_loss"] for n in names}, "runs": res}
            if args.autocast:
                out["sft"]["autocast_over_fp32"] = round(tp["autocast"] / tp["fp32"], 3)

        if "pack" not in skip:
            arms = {"plain": {"per_device_train_batch_size": args.batch},
                    "padfree": {"per_device_train_batch_size": args.batch, "padding_free": True, "max_length": None},
                    "packed": {"per_device_train_batch_size": 1, "packing": True, "packing_strategy": "bfd"}}

            def pack_run(arm, i):
                r = sft_arm(base, d / "data", d / f"pack-{arm}{i}", args.steps, args.max_length, arms[arm])
                print(f"pack {arm:8s} tokens={r['tokens']} steps={r['steps']} runtime={r['runtime']:.1f}s "
                      f"tokens/s={r['tokens_per_s']:.1f} loss={r['loss']}", flush=True)
                return r

            pres = _interleaved(list(arms), args.repeats, pack_run)
            tp = {n: _mean(pres[n], "tokens_per_s") for n in arms}
            out["pack"] = {"tokens_per_s": {n: round(v, 2) for n, v in tp.items()},
                           "padfree_over_plain": round(tp["padfree"] / tp["plain"], 3),
                           "packed_over_plain": round(tp["packed"] / tp["plain"], 3),
                           "final_loss": {n: pres[n][0]["final_loss"] for n in arms}, "runs": pres}

        if "grpo" not in skip:
            from clawgym.synth.families import generate_procedural

            tasks = generate_procedural(2, seed=5)
            gres: dict[str, list] = {"fp32": [], "bf16": []}
            order = ["fp32", "bf16"] if args.repeats == 1 else ["fp32", "bf16", "bf16", "fp32"]
            for i, arm in enumerate(order):
                r = grpo_arm(base, tasks, d / f"grpo-{arm}{i}", args.grpo_steps, {"bf16": arm == "bf16"})
                gres[arm].append(r)
                print(f"GRPO {arm:8s} steps={r['steps']} runtime={r['runtime']:.1f}s steps/s={r['steps_per_s']:.4f} "
                      f"loss={r['loss']} reward={r['reward']}", flush=True)
            sp = {n: _mean(gres[n], "steps_per_s") for n in gres}
            out["grpo"] = {"steps_per_s": {n: round(v, 5) for n, v in sp.items()},
                           "bf16_over_fp32": round(sp["bf16"] / sp["fp32"], 3), "runs": gres}
    print(json.dumps(out))
    if "sft" in out:
        print(f"SFT tokens/s bf16/fp32 = {out['sft']['bf16_over_fp32']:.3f} (goal >= 1.8); final loss "
              f"{out['sft']['final_loss']}")
    if "pack" in out:
        print(f"padding-free/plain = {out['pack']['padfree_over_plain']:.3f}, packed/plain = "
              f"{out['pack']['packed_over_plain']:.3f}; final loss {out['pack']['final_loss']}")
    if "grpo" in out:
        print(f"GRPO steps/s bf16/fp32 = {out['grpo']['bf16_over_fp32']:.3f}")


if __name__ == "__main__":
    main()

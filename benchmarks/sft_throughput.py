"""SFT throughput: the checkpoints path (Dagster Pipes subprocess → clawgym.train.pipes_sft → TRL) against a
plain TRL script, on the same data and settings, in one run. Prints tokens/s of both and their ratio
(goal ≥ 0.95).

    python benchmarks/sft_throughput.py [--steps 4] [--max-length 2048] [--rows 8] [--repeats 2] [--base data/models/smollm2-135m-instruct]

Data: real oracle trajectories of procedural tasks (local sandbox), cleaned by build_sft_dataset.
Both arms run in a fresh subprocess; tokens/s = non-padding tokens seen / Trainer train_runtime.
The arms alternate (plain, pipes, pipes, plain) when --repeats 2, to cancel drift on a shared machine.
"""  # noqa: E501 -- the usage line is one shell command, kept whole

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAIN = r'''
import json, sys, time, torch
from datasets import load_from_disk
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer
a = json.loads(sys.argv[1])
tok = AutoTokenizer.from_pretrained(a["base"])
model = AutoModelForCausalLM.from_pretrained(a["base"], dtype=torch.float32)
ds = load_from_disk(a["data"]).select_columns(["messages", "tools"])
args = SFTConfig(output_dir=a["out"], max_steps=a["steps"], learning_rate=1e-5, per_device_train_batch_size=1,
                 gradient_accumulation_steps=1, lr_scheduler_type="constant", logging_steps=1, save_steps=10**9,
                 seed=0, data_seed=0, use_cpu=not torch.cuda.is_available(), assistant_only_loss=True,
                 max_length=a["max_length"], packing=False, report_to=[], disable_tqdm=True, activation_checkpointing=False,
                 include_num_input_tokens_seen="non_padding", dataloader_num_workers=0,
                 # the pipes arm is pinned to the same precision (bf16 only on a CUDA device that has it; TRL's
                 # SFTConfig would otherwise turn bf16 autocast on); bf16 on CPU: benchmarks/train_bf16.py
                 bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported())
tr = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
r = tr.train()
rt = r.metrics["train_runtime"]
print("RESULT " + json.dumps({"tokens": tr.state.num_input_tokens_seen, "runtime": rt,
                              "tokens_per_s": tr.state.num_input_tokens_seen / rt}))
'''  # noqa: E501 -- PLAIN is a script run as-is; its text is kept unchanged


def make_data(out: Path, n_rows: int, base: str, max_tokens: int) -> dict:
    from clawgym.agent.rollout import run_rollout
    from clawgym.sandbox import SandboxConfig, get_factory, host_settings
    from clawgym.synth.families import generate_procedural
    from clawgym.trajectories.sft import SFTCleanConfig, build_sft_dataset, save_hf_dataset

    tasks = generate_procedural(n_rows, seed=3)
    f = get_factory("local", SandboxConfig(**host_settings(os.environ)))
    rows = [run_rollout(t, "oracle", f).to_row() for t in tasks]
    # rows longer than --max-length are kept and truncated by the trainer (identically in both arms)
    res = build_sft_dataset(rows, tasks, [], SFTCleanConfig(tokenizer=base, max_tokens=max(max_tokens, 16384)))
    if not res.rows:
        raise SystemExit(f"no SFT rows survived cleaning: {res.stats}")
    save_hf_dataset(res.rows, out, res.stats, tokenizer=base)
    return res.stats


def run_plain(base, data, work, steps, max_length) -> dict:
    a = {"base": base, "data": str(data), "out": str(work), "steps": steps, "max_length": max_length}
    t = time.time()
    p = subprocess.run([sys.executable, "-c", PLAIN, json.dumps(a)], capture_output=True, text=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if p.returncode or line is None:
        raise SystemExit(f"plain TRL run failed:\n{p.stderr[-3000:]}")
    return {**json.loads(line[7:]), "wall_s": time.time() - t}


def run_pipes(base, data, work, steps, max_length) -> dict:
    import dagster as dg
    import torch

    cfg = {"base_model": base, "dataset_path": str(data), "output_dir": str(work), "resume": False,
           "sft_config": {"max_steps": steps, "learning_rate": 1e-5, "max_length": max_length, "save_steps": 10**9,
                          "seed": 0, "lr_scheduler_type": "constant",
                          # the plain arm's precision (clawgym's default would be bf16 on a CPU with AVX512-BF16)
                          "bf16": bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())}}

    @dg.asset
    def checkpoints(context: dg.AssetExecutionContext, pipes_subprocess_client: dg.PipesSubprocessClient):
        return pipes_subprocess_client.run(command=[sys.executable, "-m", "clawgym.train.pipes_sft"], context=context,
                                           extras={"sft_run": cfg},
                                           env={**os.environ, "HF_HUB_OFFLINE": "1"}).get_materialize_result()

    t = time.time()
    res = dg.materialize([checkpoints], instance=dg.DagsterInstance.ephemeral(),
                         resources={"pipes_subprocess_client": dg.PipesSubprocessClient()}, raise_on_error=True)
    md = res.asset_materializations_for_node("checkpoints")[0].metadata
    return {"tokens": md["tokens_seen"].value, "runtime": md["train_runtime_s"].value,
            "tokens_per_s": md["tokens_per_s"].value, "wall_s": time.time() - t}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1, help="2 = ABBA order")
    ap.add_argument("--base", default="data/models/smollm2-135m-instruct")
    args = ap.parse_args()
    from clawgym.train.base_model import DEFAULT_BASE_DIR, prepare_base_model

    base = str(prepare_base_model(args.base) if args.base == DEFAULT_BASE_DIR else args.base)
    with tempfile.TemporaryDirectory(prefix="sft-bench-") as d:
        d = Path(d)
        stats = make_data(d / "data", args.rows, base, args.max_length)
        plain, pipes = [], []
        order = ["plain", "pipes"] if args.repeats == 1 else ["plain", "pipes", "pipes", "plain"]
        for i, arm in enumerate(order):
            fn = run_plain if arm == "plain" else run_pipes
            r = fn(base, d / "data", d / f"{arm}{i}", args.steps, args.max_length)
            (plain if arm == "plain" else pipes).append(r)
            print(f"{arm:6s} tokens={r['tokens']} train_runtime={r['runtime']:.1f}s tokens/s={r['tokens_per_s']:.1f} "
                  f"wall={r['wall_s']:.1f}s", flush=True)
    tp = sum(r["tokens_per_s"] for r in plain) / len(plain)
    tq = sum(r["tokens_per_s"] for r in pipes) / len(pipes)
    out = {"base": base, "rows": stats["rows"], "tokens_mean": stats["tokens_mean"], "steps": args.steps,
           "max_length": args.max_length, "plain_tokens_per_s": round(tp, 2), "pipes_tokens_per_s": round(tq, 2),
           "ratio": round(tq / tp, 3), "goal": 0.95, "plain": plain, "pipes": pipes}
    print(json.dumps(out))
    print(f"ratio pipes/plain = {tq / tp:.3f} (goal >= 0.95)")


if __name__ == "__main__":
    main()

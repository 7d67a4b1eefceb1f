"""Base SmolLM2 vs an SFT checkpoint on the procedural suite, per category, plus ClawGym-style statistics of
the oracle trajectories the SFT set is built from. End to end, with the library pieces only (no Dagster):

    procedural tasks (clawgym.synth) -> split by held-out family (bench / train)
    -> oracle rollouts on train tasks (bwrap) -> trajectory statistics vs ClawGym's
    -> SFT set (clawgym.trajectories.sft) -> TRL SFT of the base model (clawgym.train.sft) -> data/checkpoints/<name>
    -> base and SFT scored on the bench tasks, builtin runtime, the engine (vLLM)
    -> per-category 0-100 scores with bootstrap CIs, paired SFT-minus-base delta, tool-call parse rates.

    python benchmarks/bench_models.py [--bench-per-category 2] [--train-tasks 48] [--sft-steps 20]
        [--max-length 1536] [--lr 5e-5] [--max-turns 4] [--max-tokens 160] [--workers 12]
        [--name bench-sft] [--out data/bench_models/figures.json] [--skip-sft]

Defaults fit a shared 2-core CPU box (~25 min). On a GPU box raise --bench-per-category, --train-tasks,
--sft-steps, --max-length, --max-turns and --max-tokens. Figures go to --out (JSON, under data/: not committed).
"""

import argparse
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# ClawGym paper, statistics of its synthesized trajectories (means per trajectory).
CLAWGYM = {"turns": 13.00, "tokens": 18670, "tool_calls": 15.82, "tool_types": 3.25}
BAD_RESULT = ("Unknown tool", "Invalid arguments")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_tasks(bench_per_category: int, train_tasks: int, seed: int):
    """Bench = `bench_per_category` tasks of one held-out family per category; train = `train_tasks` tasks of
    the other families (round-robin over them, distinct seeds). Made by the one synthesis pipeline
    (clawgym.synth.pipeline.synthesize: generate -> dedupe -> split; the gates are skipped here, the families'
    own tests and the `synthetic_tasks` asset run them)."""
    from clawgym.synth.families import all_families
    from clawgym.synth.pipeline import synthesize

    n_fam = len(all_families())
    n_train_fams = n_fam - 6
    k = max(bench_per_category, math.ceil(train_tasks / max(1, n_train_fams)))
    tasks = synthesize(n_fam * k, seed=seed, held_out_per_category=1, validate=False).tasks
    bench_all = [t for t in tasks if t.split == "bench"]
    train_all = [t for t in tasks if t.split == "train"]
    per_cat: dict[str, list] = defaultdict(list)
    for t in bench_all:
        if len(per_cat[t.category]) < bench_per_category:
            per_cat[t.category].append(t)
    bench = [t for c in sorted(per_cat) for t in per_cat[c]]
    # round-robin order is already family-interleaved: the first n cover as many families as possible
    train = train_all[:train_tasks]
    bench_fams, train_fams = {t.family for t in bench}, {t.family for t in train}
    assert not bench_fams & train_fams, "bench and train families overlap"
    return bench, train


def trajectory_stats(rollouts, tok) -> dict:
    from clawgym.trajectories.sft import count_tokens

    ok = [r for r in rollouts if r.failure_class == "ok"]
    if not ok:
        return {"n": 0}
    n = len(ok)
    rendered = [count_tokens(tok, r.messages, r.tools) for r in ok]
    assistant_turns = [sum(1 for m in r.messages if m.get("role") == "assistant") for r in ok]
    return {
        "n": n,
        "turns": sum(assistant_turns) / n,
        "tokens_rendered": sum(rendered) / n,  # the whole trajectory (system, tools, all turns) in SmolLM2's template
        "tokens_api": sum(r.prompt_tokens + r.completion_tokens for r in ok) / n,  # summed over requests
        "tool_calls": sum(r.tool_calls for r in ok) / n,
        "tool_types": sum(len(r.tool_types) for r in ok) / n,
        "tool_type_counts": dict(Counter(tt for r in ok for tt in r.tool_types)),
        "oracle_score_mean": sum(r.score or 0 for r in ok) / n,
    }


def call_stats(rollouts) -> dict:
    """How many assistant turns produced parseable tool calls, and how many of those calls ran."""
    turns = with_calls = calls = valid = text_tool_markup = 0
    for r in rollouts:
        results = {m.get("tool_call_id"): m for m in r.messages if m.get("role") == "tool"}
        for m in r.messages:
            if m.get("role") != "assistant":
                continue
            turns += 1
            tcs = m.get("tool_calls") or []
            if tcs:
                with_calls += 1
            elif "<tool_call>" in (m.get("content") or "") or '"name"' in (m.get("content") or ""):
                text_tool_markup += 1
            for tc in tcs:
                calls += 1
                res = str((results.get(tc.get("id")) or {}).get("content") or "")
                if not res.startswith(BAD_RESULT):
                    valid += 1
    return {"assistant_turns": turns, "turns_with_tool_calls": with_calls, "tool_calls": calls,
            "tool_calls_valid": valid, "turns_with_unparsed_tool_markup": text_tool_markup}


def score_model(label: str, model_dir: str, bench, factory, limits, workers: int, serve_args: list[str],
                retry_timeout_s: float = 3600.0) -> dict:
    from clawgym.agent import PolicySpec, RetryPolicy, RolloutSettings, run_rollouts
    from clawgym.bench.stats import summarize

    log(f"{label}: scoring {len(bench)} bench tasks with {model_dir} (workers={workers})")
    spec = PolicySpec(name=label, kind="local", model=str(model_dir),
                      extra={"device": "cpu" if not _cuda() else "auto",
                             "startup_timeout_s": 600.0, "extra_args": serve_args})
    t = time.time()
    ros = run_rollouts(bench, spec, factory, workers=workers,
                       settings=RolloutSettings(limits=limits, attempts=2,
                                                retry=RetryPolicy(attempts=2, timeout_s=retry_timeout_s)))
    wall = time.time() - t
    scored = [r for r in ros if r.score is not None]
    rows = summarize([{"task_id": r.task_id, "category": r.category, "score": r.score} for r in scored])
    out = {
        "label": label, "model": str(model_dir), "wall_s": round(wall, 1), "n_tasks": len(ros),
        "n_scored": len(scored), "failure_classes": dict(Counter(r.failure_class for r in ros)),
        "errors": sorted({(r.error or "")[:160] for r in ros if r.error})[:8],
        "scores": [x.to_dict() for x in rows],
        "task_scores": {r.task_id: r.score for r in ros},
        "completion_tokens": sum(r.completion_tokens for r in ros),
        "prompt_tokens": sum(r.prompt_tokens for r in ros),
        "calls": call_stats(ros),
        "rollouts": [r.to_row() for r in ros],
    }
    log(f"{label}: done in {wall:.0f}s; failure classes {out['failure_classes']}; calls {out['calls']}")
    return out


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def print_table(base: dict, sft: dict | None, cmp: dict | None) -> None:
    def by_cat(res):
        return {r["category"]: r for r in res["scores"]} if res else {}

    b, s = by_cat(base), by_cat(sft)
    cats = [c for c in b if c != "overall"] + ["overall"]
    print(f"\n{'category':30s} {'n':>3s} {'base':>22s} {'sft':>22s}")
    def cell(d, c):
        r = d.get(c)
        return f"{r['mean']:6.1f} [{r['ci_low']:5.1f},{r['ci_high']:5.1f}]" if r else "-"

    for c in cats:
        print(f"{c:30s} {b[c]['n'] if c in b else 0:3d} {cell(b, c):>22s} {cell(s, c):>22s}")
    for res in (base, sft):
        if res:
            cs = res["calls"]
            print(f"{res['label']}: {cs['turns_with_tool_calls']}/{cs['assistant_turns']} assistant turns with parsed "
                  f"tool calls, {cs['tool_calls_valid']}/{cs['tool_calls']} calls valid, "
                  f"{cs['turns_with_unparsed_tool_markup']} turns with unparsed tool-call text; wall {res['wall_s']}s")
    if cmp:
        print(f"paired delta sft-base over {cmp['n_common']} tasks: {cmp['delta']:+.1f} "
              f"[{cmp['ci_low']:+.1f}, {cmp['ci_high']:+.1f}]")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-per-category", type=int, default=2)
    ap.add_argument("--train-tasks", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sandbox", default="bwrap")
    ap.add_argument("--oracle-workers", type=int, default=4)
    ap.add_argument("--sft-steps", type=int, default=20)
    ap.add_argument("--max-length", type=int, default=1536)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=160, help="per completion")
    ap.add_argument("--max-wall-s", type=float, default=900.0, help="per rollout")
    ap.add_argument("--workers", type=int, default=12, help="concurrent bench rollouts")
    ap.add_argument("--serve-args", default="", help="extra engine (vLLM) flags, e.g. '--max-num-seqs 16'")
    ap.add_argument("--request-timeout-s", type=float, default=3600.0,
                    help="per chat request; the library default (300 s) made a CPU-starved server re-receive "
                         "every request up to 4 times")
    ap.add_argument("--base", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--name", default="bench-sft")
    ap.add_argument("--out", default="data/bench_models/figures.json")
    ap.add_argument("--parallel-score", action="store_true", help="score base and SFT at the same time, after SFT")
    ap.add_argument("--serial", action="store_true", help="train SFT after base scoring, not during it")
    ap.add_argument("--skip-sft", action="store_true", help="reuse data/checkpoints/<name> if it exists")
    a = ap.parse_args()
    os.chdir(ROOT)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run atexit hooks: stop model servers

    from clawgym.agent import Limits, run_rollouts
    from clawgym.bench.stats import compare
    from clawgym.sandbox import SandboxConfig, get_factory, host_settings
    from clawgym.train.base_model import DEFAULT_BASE_DIR, prepare_base_model
    from clawgym.trajectories.sft import SFTCleanConfig, build_sft_dataset, load_tokenizer, save_hf_dataset

    T0 = time.time()
    walls: dict[str, float] = {}
    base = str(prepare_base_model(a.base) if a.base == DEFAULT_BASE_DIR else a.base)
    factory = get_factory(a.sandbox, SandboxConfig(**host_settings(os.environ)))

    # 1. tasks
    t = time.time()
    bench, train = make_tasks(a.bench_per_category, a.train_tasks, a.seed)
    walls["tasks"] = time.time() - t
    log(f"{len(bench)} bench tasks ({sorted({x.family for x in bench})}), {len(train)} train tasks "
        f"from {len({x.family for x in train})} other families")

    # 2. oracle rollouts on train tasks + statistics
    t = time.time()
    oracle = run_rollouts(train, "oracle", factory, workers=a.oracle_workers)
    walls["oracle_rollouts"] = time.time() - t
    tok = load_tokenizer(base)
    ostats = trajectory_stats(oracle, tok)
    ostats["failure_classes"] = dict(Counter(r.failure_class for r in oracle))
    log(f"oracle: {len(oracle)} rollouts in {walls['oracle_rollouts']:.0f}s, {ostats['failure_classes']}")
    print(f"\n{'oracle trajectory stat':26s} {'clawgym-procedural':>18s} {'ClawGym':>9s}")
    for k, lab in (("turns", "turns"), ("tokens_rendered", "tokens"), ("tool_calls", "tool calls"),
                   ("tool_types", "tool types")):
        ref = CLAWGYM["tokens" if k == "tokens_rendered" else k]
        print(f"{lab:26s} {ostats.get(k, float('nan')):18.2f} {ref:9.2f}")
    print(f"{'tokens (API, summed)':26s} {ostats.get('tokens_api', float('nan')):18.2f}")

    # 3. SFT set + training
    ckpt = ROOT / "data" / "checkpoints" / a.name
    sft_row, sft_stats = None, None
    t = time.time()
    data_dir = ROOT / "data" / "bench_models" / f"{a.name}-sft-hf"
    res = build_sft_dataset([r.to_row() for r in oracle], train, bench,
                            SFTCleanConfig(tokenizer=base, max_tokens=8192))
    sft_stats = {k: v for k, v in res.stats.items() if k != "config"}
    if not res.rows:
        raise SystemExit(f"no SFT rows survived cleaning: {res.stats}")
    save_hf_dataset(res.rows, data_dir, res.stats, tokenizer=tok)
    walls["sft_dataset"] = time.time() - t
    log(f"SFT set: {len(res.rows)} rows, tokens_mean {sft_stats.get('tokens_mean')}, "
        f"rejected {sft_stats.get('rejected')}")
    from clawgym.train.sft import SFTRunConfig, read_registry_row, run_sft

    def train_sft() -> dict | None:
        if a.skip_sft and (ckpt / "config.json").exists():
            log(f"reusing {ckpt}")
            return read_registry_row(ckpt)
        t = time.time()
        log(f"SFT: {a.sft_steps} steps, max_length {a.max_length}, lr {a.lr} -> {ckpt}")
        row = run_sft(SFTRunConfig(base_model=base, dataset_path=str(data_dir), output_dir=str(ckpt),
                                   name=a.name, resume=False,
                                   sft_config={"max_steps": a.sft_steps, "learning_rate": a.lr,
                                               "max_length": a.max_length, "save_steps": 10**9,
                                               "seed": a.seed})).to_dict()
        walls["sft_train"] = time.time() - t
        log(f"SFT done in {walls['sft_train']:.0f}s: loss {row['loss_curve'][0]['loss']:.3f} -> "
            f"{row['final_loss']:.3f}, {row['tokens_seen']} tokens, {row['tokens_per_s']:.1f} tok/s")
        return row

    # SFT training and base scoring overlap (a thread: torch releases the GIL; the model server is a process)
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    sft_future = pool.submit(train_sft) if not a.serial else None

    # 4a. score the base model (while SFT trains)
    serve_args = a.serve_args.split()
    limits = Limits(max_turns=a.max_turns, max_completion_tokens=a.max_tokens, max_wall_s=a.max_wall_s,
                    max_total_tokens=400_000)
    both = None
    if a.parallel_score:  # train (or reuse) first, then score both models at the same time
        if sft_future is not None:
            sft_future.result()
        t = time.time()
        with ThreadPoolExecutor(2) as ex:
            both = [ex.submit(score_model, lab, m, bench, factory, limits, a.workers, serve_args,
                              a.request_timeout_s) for lab, m in (("base", base), ("sft", str(ckpt)))]
            base_res = both[0].result()
        walls["score_base"] = time.time() - t
    else:
        t = time.time()
        base_res = score_model("base", base, bench, factory, limits, a.workers, serve_args, a.request_timeout_s)
        walls["score_base"] = time.time() - t
    early = ROOT / a.out
    early = early.with_name(early.stem + "-base.json")
    early.parent.mkdir(parents=True, exist_ok=True)
    early.write_text(json.dumps({"oracle_stats": ostats, "base": {k: v for k, v in base_res.items() if k != "rollouts"},
                                 "rollouts": base_res["rollouts"]}, indent=1, default=str))
    sft_row = sft_future.result() if sft_future is not None else train_sft()
    pool.shutdown()

    # 4b. score the SFT checkpoint on the bench tasks
    t = time.time()
    if both is not None:
        sft_res = both[1].result()
        walls["score_sft"] = walls["score_base"]
    else:
        sft_res = score_model("sft", str(ckpt), bench, factory, limits, a.workers, serve_args, a.request_timeout_s)
        walls["score_sft"] = time.time() - t
    common = {k: v for k, v in base_res["task_scores"].items() if v is not None}
    cur = {k: v for k, v in sft_res["task_scores"].items() if v is not None}
    c = compare(cur, common)
    cmp = {"n_common": c.n_common, "delta": c.delta, "ci_low": c.ci_low, "ci_high": c.ci_high}
    walls["total"] = time.time() - T0

    # 5. table + JSON
    print_table(base_res, sft_res, cmp)
    print("walls (s): " + ", ".join(f"{k}={v:.0f}" for k, v in walls.items()))
    fig = {
        "command": "python " + " ".join([sys.argv[0]] + sys.argv[1:]), "args": vars(a),
        "bench_tasks": [x.task_id for x in bench], "bench_families": sorted({x.family for x in bench}),
        "train_tasks": len(train), "train_families": sorted({x.family for x in train}),
        "oracle_stats": ostats, "clawgym_reference": CLAWGYM, "sft_dataset": sft_stats,
        "sft": {k: v for k, v in (sft_row or {}).items() if not k.endswith("_json")},
        "serve_args": serve_args,
        "limits": {"max_turns": a.max_turns, "max_completion_tokens": a.max_tokens, "max_wall_s": a.max_wall_s},
        "base": {k: v for k, v in base_res.items() if k != "rollouts"},
        "sft_scores": {k: v for k, v in sft_res.items() if k != "rollouts"},
        "paired_delta": cmp, "walls_s": {k: round(v, 1) for k, v in walls.items()},
        "cuda": _cuda(), "cpu_count": os.cpu_count(), "loadavg_at_end": os.getloadavg(),
    }
    out = ROOT / a.out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(fig, indent=1, default=str))
    os.replace(tmp, out)
    roll = out.with_name(out.stem + "-rollouts.jsonl")
    with open(roll.with_suffix(".tmp"), "w") as f:
        for r in base_res["rollouts"] + sft_res["rollouts"]:
            f.write(json.dumps(r, default=str) + "\n")
    os.replace(roll.with_suffix(".tmp"), roll)
    log(f"figures -> {out}; rollouts -> {roll}")


if __name__ == "__main__":
    main()

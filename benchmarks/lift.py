"""Does training on synthesized trajectories lift the agent, and does it transfer? Base vs SFT (vs SFT+GRPO),
paired, on new seeds of trained tasks, on held-out compositions of the shared operations and on held-out families.

    python benchmarks/lift.py --work data/lift                      # CPU: composed curriculum, ≈ 61 min on 2 cores
    python benchmarks/lift.py --work data/lift --grpo-steps 20      # + the GRPO arm from the SFT checkpoint
    python benchmarks/lift.py --work data/lift-fam --curriculum families   # the hand-written families only

Curricula (--curriculum):
  composed   (default) tasks composed from shared atomic operations (clawgym.synth.compose): --train-compositions
             training compositions (seed 0 each; the composer's split, a rule on names fixed before training);
             bench suites: `new_seeds` (--bench-compositions trained compositions at seed 1000),
             `heldout_compositions` (--bench-compositions held-out compositions: new combinations of seen
             operations) and `heldout_families` (hand-written families no composition is, seeds 1000..)
  families   the hand-written procedural families split by category (the first --families-per-category train,
             the next held out); bench `new_seeds` and `heldout`

Stages, each resumable (a stage's output in --work is reused; a killed run picks up where it stopped, bench
rollouts task by task; the training compositions are recorded in <work>/train_compositions.json):
  1. tasks      as the curriculum says
  2. oracle     teacher rollouts of the train tasks in sandboxes (real verifier scores). --teacher program (default):
                the `program` policy replaying each task's program_reference (one exec of its program: the family's
                program solution, or the program composed with the task) and a short answer; --teacher reference:
                the reference calls (they write answers the generator computed)
  3. sft set    build_sft_dataset (score filter, decontamination against every bench suite)
  4. sft        run_sft: full fine-tuning (or --lora) of the embedded SmolLM2, TRL's SFTTrainer, loss curve
  5. bench      base and SFT checkpoint served by ModelServer, builtin agent loop, greedy, same sandboxes
  5b. grpo      (--grpo-steps N > 0) GRPO from the SFT checkpoint (clawgym.train.grpo: the verifier's score, per-part
                credit included, in a clean room) on new seeds of training compositions, then its bench
  6. report     paired bootstrap 95% CIs of the delta (clawgym.bench.stats.compare) overall / per category /
                per family, per-part credit means, how rollouts ended (token cap = finish_reason length), loss and
                reward curves -> report.json/.md

GPU recipe (not run: the lent H200 has no sandbox engine under gVisor, neither TRL nor vLLM, and its 64 MiB carry
limit is below the 135M base model's 270 MB): on a GPU box with this project's environment and a bigger base model
in a local folder (--base-model, e.g. a 1.5B instruct model in HF format with a tool-calling chat template):
    python benchmarks/lift.py --work data/lift-gpu --gpu --base-model /models/instruct-1.5b \
        --train-compositions 433 --bench-compositions 60 --max-steps 900 --num-train-epochs 2 \
        --per-device-train-batch-size 4 --gradient-accumulation-steps 2 --max-length 8192 \
        --workers 16 --grpo-steps 200 --grpo-num-generations 8 --grpo-learning-rate 1e-6
with vLLM serving the rollouts once the `local` endpoint runs on vLLM. --gpu: bf16, no CPU kernels in the server.
Everything the run did is in <work>/report.json (with the exact command line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _log(msg: str) -> None:
    print(f"[lift {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _jsonl_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append(path: Path, row: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def split_families(per_category: int, heldout_per_category: int):
    from clawgym.synth.families import all_families

    by_cat: dict[str, list] = defaultdict(list)
    for f in sorted(all_families(), key=lambda f: f.name):
        by_cat[f.category].append(f.name)
    train, held = [], []
    for cat in sorted(by_cat):
        names = by_cat[cat]
        train += names[:per_category]
        held += names[per_category:per_category + heldout_per_category]
    return train, held


def make_tasks(families: list[str], seeds: range):
    from clawgym.synth.families import get_family

    return [get_family(f).generate(s) for s in seeds for f in families]


def composed_suites(a, work: Path) -> tuple[list, dict[str, list]]:
    """The composed curriculum: training tasks from training compositions (seeds [0, --train-seeds)), and three
    bench suites: new seeds of training compositions, held-out compositions (new compositions of the same
    operations; clawgym.synth.compose's split, made before and without any training) and held-out hand-written
    families. The held-out names are read here for the bench only; training sees train_c. The training
    compositions are recorded in <work>/train_compositions.json at the first run and read back on a resumed one
    (the held-in suite must be compositions the checkpoint trained on, whatever the composer's code is now)."""
    from clawgym.synth.compose import parse, split_compositions
    from clawgym.synth.compose import sample_compositions as pick

    train_names, held_names = split_compositions()
    rec = work / "train_compositions.json"
    if rec.exists():
        trained = json.loads(rec.read_text())
    else:
        trained = pick(train_names, a.train_compositions, "train")
        rec.write_text(json.dumps(trained, indent=1))

    def buildable(n: str) -> bool:
        try:
            parse(n)
            return True
        except KeyError:
            return False

    train_c = [n for n in trained if buildable(n)]  # a composition the composer no longer makes is not benched
    # held-in: training compositions the student trained on, at seeds it never saw
    heldin_c = pick(train_c, a.bench_compositions, "heldin")
    held_c = pick(held_names, a.bench_compositions, "heldout")
    _, held_f = split_families(a.families_per_category, a.heldout_per_category)
    bench_seeds = range(1000, 1000 + a.bench_seeds)
    suites = {"new_seeds": make_tasks(heldin_c, range(1000, 1001)),
              "heldout_compositions": make_tasks(held_c, range(1000, 1001)),
              "heldout_families": make_tasks(held_f, bench_seeds)}
    return make_tasks(train_c, range(a.train_seeds)), suites


def _add_time(work: Path, stage: str, seconds: float) -> None:
    """Add `seconds` to `stage` in <work>/timings.json (stage wall times summed over resumed runs)."""
    p = work / "timings.json"
    t = json.loads(p.read_text()) if p.exists() else {}
    t[stage] = round(t.get(stage, 0.0) + seconds, 1)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(t, indent=1))
    os.replace(tmp, p)


def rollout_rows(tasks, policy, factory, out: Path, limits, workers: int, tag: str) -> list[dict]:
    """Rollouts of `tasks` (skipping those already in `out`), appended to `out` as they finish."""
    from concurrent.futures import ThreadPoolExecutor

    from clawgym.agent.policies import open_endpoint
    from clawgym.agent.rollout import RolloutSettings, run_rollout

    done = {r["task_id"] for r in _jsonl_rows(out)}
    todo = [t for t in tasks if t.task_id not in done]
    if todo:
        t0 = time.time()
        _log(f"{tag}: {len(todo)} rollouts to run ({len(done)} done)")
        with open_endpoint(policy, tasks=todo) as ep:
            ep.policy = policy.name

            def one(t):
                ro = run_rollout(t, ep, factory, settings=RolloutSettings(limits=limits))
                row = ro.to_row()
                row["finish"] = _how_it_ended(ro)
                _append(out, row)
                _log(f"{tag}: {t.task_id} score={ro.score} {ro.failure_class} ({row['finish']}) {ro.wall_s:.0f}s")
                return row

            with ThreadPoolExecutor(max(1, workers)) as ex:
                list(ex.map(one, todo))
        _add_time(out.parent, tag, time.time() - t0)
    rows = _jsonl_rows(out)
    keep = {t.task_id for t in tasks}
    return [r for r in rows if r["task_id"] in keep]


def _how_it_ended(ro) -> str:
    err = ro.error or ""
    if ro.failure_class == "ok":
        return "answered"
    if "max_completion_tokens" in err:
        return "token_cap"
    if "turn limit" in err:
        return "turn_limit"
    return ro.failure_class


def _wrote_program(row: dict, programs: dict[str, str]) -> bool:
    """Whether the rollout's first tool call is exactly the program teacher's exec for its task (`programs`:
    task id -> the teacher's command)."""
    want = programs.get(row["task_id"])
    for m in json.loads(row.get("messages_json") or "[]"):
        for c in m.get("tool_calls") or []:
            try:
                cmd = json.loads(c["function"]["arguments"]).get("command")
            except (ValueError, KeyError, AttributeError):
                return False
            # the program itself (the first line carries the task's instruction arguments, if any)
            return want is not None and isinstance(cmd, str) and cmd.startswith("python3 - ") and \
                cmd.split("\n", 1)[-1] == want.split("\n", 1)[-1]
    return False


def _teacher_commands(tasks) -> dict[str, str]:
    from clawgym.synth.solutions import with_program

    out = {}
    for t in tasks:
        ref = with_program(t).program_reference
        if ref:
            out[t.task_id] = ref[0].arguments.get("command", "")
    return out


def _parts(rows: list[dict]) -> dict[str, float]:
    """Mean of each grade() part over `rows` (the per-part credit: keys, values, fields, ids, order ...)."""
    sums: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        try:
            v = json.loads(r.get("verification_json") or "{}")
        except ValueError:
            continue
        for k, x in (v.get("checks") or v.get("subscores") or {}).items():
            if isinstance(x, (int, float)):
                sums[k].append(float(x))
    return {k: round(100 * sum(v) / len(v), 1) for k, v in sorted(sums.items())}


def compare_rows(sft_rows: list[dict], base_rows: list[dict], key: str | None = None) -> list[dict]:
    from clawgym.bench.stats import compare, task_means

    groups = sorted({r.get(key) or "" for r in base_rows}) if key else [None]
    out = []
    for g in groups:
        def sel(rs, g=g):
            return [r for r in rs if (r.get(key) or "") == g] if key else rs

        cur, par = task_means(sel(sft_rows)), task_means(sel(base_rows))
        c = compare(cur, par, n_boot=2000, seed=0)
        out.append({"group": g or "overall", "n": c.n_common, "base": 100 * _mean(par), "sft": 100 * _mean(cur),
                    "delta": c.delta, "ci_low": c.ci_low, "ci_high": c.ci_high})
    return out


def _mean(d: dict) -> float:
    return sum(d.values()) / len(d) if d else float("nan")


def run_grpo_arm(a, work: Path, sft_dir: Path, train_tasks, factory):
    """GRPO (clawgym.train.grpo: the verifier's score, per-part credit included, as reward, in a clean room)
    from the SFT checkpoint on new seeds of training compositions only; resumable; the record at <work>/grpo."""
    from clawgym.synth.families import get_family
    from clawgym.train.grpo import GRPORunConfig, run_grpo
    from clawgym.train.record import CheckpointRecord

    gdir = work / "grpo"
    rec = CheckpointRecord.load(gdir) if (gdir / "model.safetensors").exists() else None
    if rec is not None and rec.steps >= a.grpo_steps:
        return rec
    fams = sorted({t.family for t in train_tasks})
    tasks = [get_family(f).generate(2000 + i) for i, f in enumerate(fams[:a.grpo_tasks])]
    n = a.grpo_num_generations
    cfg = GRPORunConfig(base_model=str(sft_dir), output_dir=str(gdir), name="lift-grpo", score_workers=n,
                        grpo_config={"max_steps": a.grpo_steps, "learning_rate": a.grpo_learning_rate,
                                     "num_generations": n, "per_device_train_batch_size": n,
                                     "max_completion_length": a.grpo_max_completion_length,
                                     "max_tool_calling_iterations": 3, "logging_steps": 1,
                                     "save_steps": max(5, a.grpo_steps // 2)})
    t0 = time.time()

    def on_log(d):
        if "reward" in d or "loss" in d:
            _log(f"grpo: step {d.get('step', '?')} reward {d.get('reward')} loss {d.get('loss')}")

    rec = run_grpo(cfg, tasks, factory, on_log=on_log)
    _add_time(work, "grpo", time.time() - t0)
    _log(f"GRPO: {rec.steps} steps")
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="data/lift")
    ap.add_argument("--curriculum", choices=["composed", "families"], default="composed",
                    help="composed: tasks composed from shared operations (clawgym.synth.compose), benched on new "
                         "seeds, held-out compositions and held-out families; families: the hand-written families")
    ap.add_argument("--train-compositions", type=int, default=300)
    ap.add_argument("--bench-compositions", type=int, default=30)
    ap.add_argument("--families-per-category", type=int, default=1)
    ap.add_argument("--heldout-per-category", type=int, default=1)
    ap.add_argument("--train-seeds", type=int, default=None, help="default: 1 (composed), 4 (families)")
    ap.add_argument("--bench-seeds", type=int, default=3)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--teacher", choices=["program", "reference"], default="program")
    ap.add_argument("--workers", type=int, default=8,
                    help="rollouts in flight per model (the server batches them: continuous batching)")
    ap.add_argument("--bench-models", default="base,sft", help="which models to bench (base alone needs no SFT)")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-completion-tokens", type=int, default=768)
    ap.add_argument("--max-wall-s", type=float, default=900.0)
    # trl.SFTConfig fields
    ap.add_argument("--max-steps", type=int, default=None, help="default: 300 (composed: one epoch), 160 (families)")
    ap.add_argument("--learning-rate", type=float, default=2e-4)
    ap.add_argument("--num-train-epochs", type=float, default=None, help="default: 1 (composed), 20 (families)")
    ap.add_argument("--per-device-train-batch-size", type=int, default=1)
    ap.add_argument("--gradient-accumulation-steps", type=int, default=1)
    ap.add_argument("--max-length", type=int, default=4096)
    ap.add_argument("--base-model", default="", help="an HF model folder (default: the embedded SmolLM2-135M)")
    ap.add_argument("--lora", action="store_true")
    ap.add_argument("--packing", action="store_true", help="TRL SFTConfig packing (padding-free, bfd)")
    ap.add_argument("--gpu", action="store_true", help="bf16 training, no CPU kernels in the server")
    # the GRPO arm: trl.GRPOConfig fields of a run from the SFT checkpoint on training compositions (0 steps: off)
    ap.add_argument("--grpo-steps", type=int, default=0)
    ap.add_argument("--grpo-tasks", type=int, default=48, help="training-composition tasks (new seeds) GRPO samples")
    ap.add_argument("--grpo-learning-rate", type=float, default=5e-6)
    ap.add_argument("--grpo-num-generations", type=int, default=4)
    ap.add_argument("--grpo-max-completion-length", type=int, default=512)
    ap.add_argument("--stop-after", choices=["tasks", "oracle", "sft_set", "sft", "bench"], default=None)
    a = ap.parse_args(argv)

    from clawgym.agent.loop import Limits
    from clawgym.agent.policies import PolicySpec
    from clawgym.sandbox import SandboxConfig, get_factory, host_settings
    from clawgym.train.base_model import prepare_base_model

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    # 1. tasks
    composed = a.curriculum == "composed"
    if a.train_seeds is None:
        a.train_seeds = 1 if composed else 4
    if a.max_steps is None:
        a.max_steps = 300 if composed else 160
    if a.num_train_epochs is None:
        a.num_train_epochs = 1.0 if composed else 20.0
    if a.curriculum == "composed":
        train_tasks, suites = composed_suites(a, work)
        train_f = sorted({t.family for t in train_tasks})
        held_f = sorted({t.family for k in suites if k != "new_seeds" for t in suites[k]})
    else:
        train_f, held_f = split_families(a.families_per_category, a.heldout_per_category)
        train_tasks = make_tasks(train_f, range(a.train_seeds))
        suites = {"new_seeds": make_tasks(train_f, range(1000, 1000 + a.bench_seeds)),
                  "heldout": make_tasks(held_f, range(1000, 1000 + a.bench_seeds))}
    all_bench = [t for ts in suites.values() for t in ts]
    _log(f"{len(train_f)} train families, {len(train_tasks)} train tasks; bench "
         + ", ".join(f"{k} {len(v)}" for k, v in suites.items()))
    if a.stop_after == "tasks":
        return 0
    factory = get_factory(a.backend, SandboxConfig(**host_settings(os.environ)))
    models = [m.strip() for m in a.bench_models.split(",") if m.strip()]
    base_dir = Path(a.base_model) if a.base_model else prepare_base_model()
    limits = Limits(max_turns=a.max_turns, max_completion_tokens=a.max_completion_tokens, max_wall_s=a.max_wall_s)
    server = {"device": "cuda" if a.gpu else "cpu", "startup_timeout_s": 600}
    if "sft" not in models:  # the base model's rollouts only (they need no teacher, no SFT)
        for suite, tasks in suites.items():
            spec = PolicySpec(name="lift-base", kind="local", model=str(base_dir), extra=server)
            rollout_rows(tasks, spec, factory, work / f"bench_base_{suite}.jsonl", limits, a.workers, f"base/{suite}")
        return 0
    # 2. teacher trajectories
    # each task carries its references as synthesis records them (Task.program_reference: the family's program);
    # the `program` policy replays it, `oracle` the reference
    from clawgym.synth.solutions import with_program

    train_tasks = [with_program(t) for t in train_tasks]
    teacher = PolicySpec(name="program", kind="oracle", model="program") if a.teacher == "program" else \
        PolicySpec(name="oracle", kind="oracle", model="oracle")
    oracle = rollout_rows(train_tasks, teacher, factory, work / f"teacher_{a.teacher}.jsonl", Limits(), 2, "teacher")
    if any((r["score"] or 0.0) < 1.0 for r in oracle):
        _log(f"teacher below 1.0 on {[r['task_id'] for r in oracle if (r['score'] or 0.0) < 1.0]} (score-filtered)")
    if a.stop_after == "oracle":
        return 0
    # 3. the SFT set
    from clawgym.trajectories.sft import SFTCleanConfig, build_sft_dataset, save_hf_dataset

    ds_dir = work / "sft_hf"
    if not (ds_dir / "clawgym_stats.json").exists():
        # new seeds of a training family share its instruction text by construction (same template, other
        # workspace data), so the SFT set's decontamination (same instruction / embedding near-duplicates) would
        # reject every row: here a training task is contaminated only when it IS a bench task (same id, or same
        # workspace and instruction fingerprint)
        bench_keys = {t.task_id for t in all_bench} | {t.fingerprint() for t in all_bench}
        clean = [t for t in train_tasks if t.task_id not in bench_keys and t.fingerprint() not in bench_keys]
        ids = {t.task_id for t in clean}
        res = build_sft_dataset([r for r in oracle if r["task_id"] in ids], clean, [],
                                SFTCleanConfig(max_tokens=a.max_length, tokenizer=str(base_dir)))
        res.stats["rejected"]["contaminated"] = len(train_tasks) - len(clean)
        if not res.rows:
            raise SystemExit(f"no SFT rows: rejected {res.stats['rejected']}")
        save_hf_dataset(res.rows, ds_dir, stats=res.stats, tokenizer=str(base_dir))
    sft_stats = json.loads((ds_dir / "clawgym_stats.json").read_text())
    _log(f"SFT set: {sft_stats['rows']} rows, {sft_stats['tokens_total']} tokens, rejected {sft_stats['rejected']}")
    if a.stop_after == "sft_set":
        return 0
    # 4. SFT
    from clawgym.train.record import CheckpointRecord
    from clawgym.train.sft import SFTRunConfig, run_sft

    ckpt = work / "sft"
    sft = {"max_steps": a.max_steps, "learning_rate": a.learning_rate, "num_train_epochs": a.num_train_epochs,
           "per_device_train_batch_size": a.per_device_train_batch_size, "max_length": a.max_length,
           "gradient_accumulation_steps": a.gradient_accumulation_steps, "logging_steps": 1,
           "save_steps": max(5, a.max_steps // 4), "lr_scheduler_type": "cosine", "warmup_steps": 2}
    if a.gpu:
        sft["bf16"] = True
    if a.packing:
        sft["packing"] = True
    marker = ckpt / "_lift_sft.json"
    if ckpt.exists() and (not marker.exists() or json.loads(marker.read_text()) != {**sft, "lora": a.lora}):
        import shutil

        _log("SFT settings changed: training from scratch")
        shutil.rmtree(ckpt)  # a resumed Trainer would keep the old schedule
    ckpt.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({**sft, "lora": a.lora}))
    rec = CheckpointRecord.load(ckpt) if (ckpt / "model.safetensors").exists() else None
    if rec is None or rec.steps < a.max_steps:
        t_sft = time.time()
        rec = run_sft(SFTRunConfig(base_model=str(base_dir), dataset_path=str(ds_dir), output_dir=str(ckpt),
                                   name="lift-sft", lora=a.lora, sft_config=sft))
        _add_time(work, "sft", time.time() - t_sft)
    _log(f"SFT: {rec.steps} steps, loss {rec.loss_curve[0]['loss'] if rec.loss_curve else None} -> {rec.final_loss}")
    if a.stop_after == "sft":
        return 0
    # 5. bench: base vs SFT, same tasks, greedy
    rows = {}
    for suite, tasks in suites.items():                  # suite by suite: a paired result as early as possible
        for name, path in (("base", base_dir), ("sft", ckpt)):
            spec = PolicySpec(name=f"lift-{name}", kind="local", model=str(path), extra=server)
            rows[(name, suite)] = rollout_rows(tasks, spec, factory, work / f"bench_{name}_{suite}.jsonl", limits,
                                               a.workers, f"{name}/{suite}")
    # 5b. GRPO from the SFT checkpoint on training compositions (new seeds), then its bench
    grpo_rec = None
    if a.grpo_steps > 0:
        grpo_rec = run_grpo_arm(a, work, ckpt, train_tasks, factory)
        gdir = work / "grpo"
        for suite, tasks in suites.items():
            spec = PolicySpec(name="lift-grpo", kind="local", model=str(gdir), extra=server)
            rows[("grpo", suite)] = rollout_rows(tasks, spec, factory, work / f"bench_grpo_{suite}.jsonl", limits,
                                                 a.workers, f"grpo/{suite}")
    # 6. report
    report = {"command": " ".join(["python", *sys.argv]), "args": vars(a), "train_families": train_f,
              "heldout_families": held_f, "n_train_tasks": len(train_tasks),
              "oracle_mean": _mean({r["task_id"]: r["score"] or 0.0 for r in oracle}), "sft_set": sft_stats,
              "checkpoint": {"steps": rec.steps, "loss_curve": rec.loss_curve, "final_loss": rec.final_loss,
                             "train_runtime_s": rec.train_runtime_s, "tokens": rec.hyperparams.get("tokens")},
              "suites": {}, "wall_s_this_invocation": time.time() - t0,
              "stage_wall_s": json.loads(tp.read_text()) if (tp := work / "timings.json").exists() else {}}
    programs = _teacher_commands(all_bench)
    for suite in suites:
        b, s = rows[("base", suite)], rows[("sft", suite)]
        ends = {m: dict(sorted({e: sum(1 for r in rows[(m, suite)] if r["finish"] == e)
                                for e in {r["finish"] for r in rows[(m, suite)]}}.items())) for m in ("base", "sft")}
        report["suites"][suite] = {"overall": compare_rows(s, b)[0], "per_category": compare_rows(s, b, "category"),
                                   "per_family": compare_rows(s, b, "family"), "ended": ends,
                                   "program_exact": sum(_wrote_program(r, programs) for r in s), "n": len(s),
                                   "parts": {"base": _parts(b), "sft": _parts(s)}}
        if ("grpo", suite) in rows:
            g = rows[("grpo", suite)]
            report["suites"][suite].update(grpo_vs_base=compare_rows(g, b)[0], grpo_vs_sft=compare_rows(g, s)[0])
            report["suites"][suite]["parts"]["grpo"] = _parts(g)
    if grpo_rec is not None:
        report["grpo"] = {"steps": grpo_rec.steps, "reward_curve": grpo_rec.reward_curve,
                          "loss_curve": grpo_rec.loss_curve, "train_runtime_s": grpo_rec.train_runtime_s}
    report["stage_wall_s_total"] = round(sum(report["stage_wall_s"].values()), 1)
    (work / "report.json").write_text(json.dumps(report, indent=1, default=str))
    lines = [f"# lift report ({time.strftime('%Y-%m-%d %H:%M')})", "", f"`{report['command']}`", "",
             f"stage wall times (s, summed over resumed runs): {report['stage_wall_s']} = "
             f"{report['stage_wall_s_total'] / 60:.1f} min", ""]
    for suite, r in report["suites"].items():
        o = r["overall"]
        lines.append(f"## {suite}: base {o['base']:.1f} -> SFT {o['sft']:.1f}, delta {o['delta']:+.1f} "
                     f"[{o['ci_low']:+.1f}, {o['ci_high']:+.1f}] (n={o['n']}); ended {r['ended']}; SFT wrote the "
                     f"teacher's program exactly in {r['program_exact']}/{r['n']}")
        lines.append(f"per-part credit (mean %), base {r['parts']['base']}; SFT {r['parts']['sft']}")
        for key, label in (("grpo_vs_base", "SFT+GRPO vs base"), ("grpo_vs_sft", "SFT+GRPO vs SFT")):
            if key in r:
                g = r[key]
                lines.append(f"{label}: {g['base']:.1f} -> {g['sft']:.1f}, delta {g['delta']:+.1f} "
                             f"[{g['ci_low']:+.1f}, {g['ci_high']:+.1f}] (n={g['n']})")
        for key, head in (("per_category", "category"), ("per_family", "family")):
            lines += ["", f"| {head} | n | base | SFT | delta | 95% CI |", "|---|---|---|---|---|---|"]
            lines += [f"| {x['group']} | {x['n']} | {x['base']:.1f} | {x['sft']:.1f} | {x['delta']:+.1f} | "
                      f"[{x['ci_low']:+.1f}, {x['ci_high']:+.1f}] |" for x in r[key]]
        lines.append("")
    curve = report["checkpoint"]["loss_curve"] or []
    if curve:
        pts = [curve[i] for i in sorted({0, len(curve) // 4, len(curve) // 2, 3 * len(curve) // 4, len(curve) - 1})]
        lines.append("SFT loss: " + ", ".join(f"step {p.get('step')}: {p.get('loss'):.3f}" for p in pts))
    (work / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

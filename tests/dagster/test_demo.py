"""The demo's plan and its learning report (clawgym.agent.demo, clawgym_assets.demo): what the main job trains and
benches, and the paired held-in / held-out-composition / held-out-family comparison it prints."""

from __future__ import annotations

import dataclasses
import os

import pytest

from clawgym.train.demo_plan import HELD_IN, HELD_OUT, DemoPlan, learning_rows


def test_the_plan_teaches_with_short_programs_and_holds_families_out():
    from clawgym.synth.compose import heldout_composition, is_composed
    from clawgym.synth.families import get_family
    from clawgym.synth.solutions import program_source

    plan = DemoPlan()
    for f in plan.train_families:
        src = program_source(f)
        assert src is not None and len(src) <= 700, f"{f}: the demo trains on short programs"
    for f in plan.heldout_families:
        get_family(f)  # registered
    train_c, held_c = plan.compositions()
    assert len(train_c) == plan.train_compositions and len(held_c) == plan.heldout_compositions
    assert all(is_composed(f) and not heldout_composition(f) for f in train_c)
    assert all(is_composed(f) and heldout_composition(f) for f in held_c)  # the composer's split, not the plan's
    cfg = plan.synth_config()
    assert cfg["families"] == [*plan.train_families, *train_c, *plan.heldout_families, *held_c]
    assert cfg["n"] == len(cfg["families"]) * plan.train_seeds
    assert cfg["heldout_families"] == [*plan.heldout_families, *held_c]
    assert cfg["new_seed_families"] == [*plan.train_families, *plan.heldout_families]
    assert plan.trained_families == [*plan.train_families, *train_c]
    assert plan.n_bench() == (len(plan.train_families) * plan.bench_new_seeds, len(held_c) * plan.train_seeds,
                              len(plan.heldout_families) * (plan.train_seeds + plan.bench_new_seeds))
    with pytest.raises(ValueError, match="both training and held-out"):
        dataclasses.replace(plan, heldout_families=(plan.train_families[0],))
    with pytest.raises(ValueError, match="bench_new_seeds"):
        dataclasses.replace(plan, bench_new_seeds=0)


def test_the_plan_synthesizes_the_bench_it_promises():
    """synthesize with the plan's config: training seeds train, new seeds of the hand-written families, the
    held-out families and the held-out compositions bench, each task with its program where it has one."""
    from clawgym.synth.pipeline import synthesize
    from clawgym.train.demo_plan import HELD_OUT_COMPOSITIONS, bench_group

    plan = DemoPlan()
    cfg = plan.synth_config()
    res = synthesize(cfg["n"], families=cfg["families"], heldout_families=cfg["heldout_families"],
                     bench_new_seeds=cfg["bench_new_seeds"], new_seed_families=cfg["new_seed_families"],
                     validate=False)
    train = [t for t in res.tasks if t.split == "train"]
    bench = [t for t in res.tasks if t.split == "bench"]
    assert sorted(t.family for t in train) == sorted(plan.trained_families)
    assert all(t.program_reference for t in train)
    groups = [bench_group(t.family, plan.trained_families) for t in bench]
    assert (groups.count(HELD_IN), groups.count(HELD_OUT_COMPOSITIONS), groups.count(HELD_OUT)) == plan.n_bench()
    assert all((t.seed or 0) >= 1000 for t in bench if t.family in plan.train_families)


def _rows(model, scores):
    return [{"model": model, "task_id": t, "score": s, "failure_class": "ok", "repeat": 0} for t, s in scores.items()]


def test_learning_rows_pair_per_task_and_split_held_in_from_held_out():
    from clawgym.train.demo_plan import HELD_OUT_COMPOSITIONS

    comp = "ops_csv_dedupe_feq_gsum_tojson"
    fam = {"a-1": "a", "a-2": "a", "a-3": "a", "a-4": "a", "z-1": "z", "z-2": "z", "c-1": comp, "c-2": comp,
           "c-3": comp}
    base = _rows("base", {"a-1": 0.0, "a-2": 0.0, "a-3": 0.0, "a-4": 0.5, "z-1": 0.0, "z-2": 0.0, "c-1": 0.0,
                          "c-2": 0.0, "c-3": 0.25})
    sft = _rows("sft", {"a-1": 1.0, "a-2": 1.0, "a-3": 1.0, "a-4": 1.0, "z-1": 0.0, "z-2": 0.0, "c-1": 0.5,
                        "c-2": 0.5, "c-3": 0.25})
    sft.append({"model": "sft", "task_id": "z-3", "score": 1.0, "failure_class": "ok", "repeat": 0})  # unpaired
    held_in, held_comp, held_out = learning_rows(base + sft, {**fam, "z-3": "z"}, ["a"], "sft", "base", n_boot=500)
    assert held_in["group"] == HELD_IN and held_out["group"] == HELD_OUT
    assert held_comp["group"] == HELD_OUT_COMPOSITIONS and held_comp["n"] == 3
    assert held_comp["delta"] == pytest.approx(100 / 3) and held_comp["ci_low"] >= 0.0
    assert held_in["n"] == 4 and held_in["parent_mean"] == pytest.approx(12.5)
    assert held_in["model_mean"] == pytest.approx(100.0) and held_in["delta"] == pytest.approx(87.5)
    assert 0 < held_in["ci_low"] <= 87.5 <= held_in["ci_high"] <= 100
    assert held_out["n"] == 2 and held_out["delta"] == 0.0 and held_out["ci_low"] == held_out["ci_high"] == 0.0


def test_learning_rows_leave_infra_out_and_say_when_nothing_pairs():
    fam = {"a-1": "a", "a-2": "a"}
    base = _rows("base", {"a-1": 0.0, "a-2": 0.0})
    sft = [{"model": "sft", "task_id": "a-1", "score": None, "failure_class": "infra", "repeat": 0},
           *_rows("sft", {"a-2": 1.0})]
    held_in, held_comp, held_out = learning_rows(base + sft, fam, ["a"], "sft", "base", n_boot=200)
    assert held_in["n"] == 1 and held_in["delta"] == 100.0  # the infra rollout is not a 0
    assert held_out["n"] == 0 and held_out["delta"] is None
    assert held_comp["n"] == 0 and held_comp["delta"] is None  # the row is there, saying the bench has none


def test_the_demo_says_what_it_shows_and_how_long():
    from clawgym_assets.demo import EXPECTED_S, describe

    text = describe(DemoPlan())
    assert "min" in text and "held-out" in text and "sft-demo" in text and "95% CI" in text
    assert f"≈ {sum(EXPECTED_S.values()) / 60:.0f} min" in text
    assert "smollm2-base" not in describe(DemoPlan(), models=False)


def test_workspace_scope_keeps_new_seed_training_rows():
    """The demo's sft_dataset uses contamination_scope 'workspace': a training task with the same instruction as
    a bench task (a new seed of its family) is kept; the bench task itself (same id or workspace) is not."""
    from clawgym.synth.families import get_family
    from clawgym.trajectories.sft import contaminated_tasks

    fam = get_family("backup_retention")
    train, bench = fam.generate(0), fam.generate(1000)
    assert train.instruction == bench.instruction
    assert train.task_id in contaminated_tasks([train], [bench], scope="family")  # same instruction text
    assert contaminated_tasks([train], [bench], scope="workspace") == {}
    same = bench.model_copy(update={"task_id": "copy-of-bench", "split": "train"})
    assert set(contaminated_tasks([train, same], [bench], scope="workspace")) == {"copy-of-bench"}
    with pytest.raises(ValueError, match="contamination_scope"):
        contaminated_tasks([train], [bench], scope="nearby")


def test_the_demo_without_models_puts_the_oracle_at_100(tmp_path):
    """The scale's ends run at the graph's limits, not the models' 3-turn budget: the reference replay of every
    bench task scores 1.0 (a 3-turn cut of the replay once read as oracle 46.6), noop 0."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "home").mkdir()
    env = {**os.environ, "CLAWGYM_DATA": str(tmp_path / "data"), "DAGSTER_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "DAGSTER_DISABLE_TELEMETRY": "1"}
    r = subprocess.run([sys.executable, "-m", "clawgym.cli", "demo", "--no-models"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"│\s*\d+\s*│\s*(oracle|noop)\s*│\s*([\d.]+)", r.stdout)}
    assert rows == {"oracle": 100.0, "noop": 0.0}, r.stdout[-3000:]

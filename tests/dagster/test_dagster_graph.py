"""Graph tests: the real assets materialized with dg.materialize() on a tiny config (temp lake, temp instance)."""

import json
import os
import shutil
from pathlib import Path

import dagster as dg
import pytest

from clawgym import lake as lk

FIX = Path(os.environ.get("CLAWGYM_FIXTURES") or Path(__file__).resolve().parents[3] / "shared" / "fixtures")
SAMPLE = FIX / "clawgym_train_sample"
NOOP_SCORES = FIX / "clawgym_train_sample_noop_scores.json"


def _families() -> list[str]:
    """Two families from each of three categories (so one family per category can be held out)."""
    from collections import defaultdict

    from clawgym.synth.families import all_families

    by_cat = defaultdict(list)
    for f in all_families():
        by_cat[f.category].append(f.name)
    cats = sorted(c for c in by_cat if len(by_cat[c]) >= 2)[:3]
    return sorted(n for c in cats for n in sorted(by_cat[c])[:2])


FAMILIES = _families()
BACKEND = os.environ.get("CLAWGYM_TEST_SANDBOX") or ("bwrap" if shutil.which("bwrap") else "local")


def _resources(data):
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import (
        JudgeResource,
        ModelEndpointsResource,
        OpenClawResource,
        SandboxResource,
    )

    lake = LakeResource(data_dir=str(data))  # one lake, nested where data paths are needed
    return {"lake": lake, "sandbox": SandboxResource(backend=BACKEND),
            "endpoints": ModelEndpointsResource(lake=lake), "judge": JudgeResource(), "openclaw": OpenClawResource()}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    if not SAMPLE.is_dir():
        pytest.skip(f"ClawGym fixtures not found at {SAMPLE} (set CLAWGYM_FIXTURES)")
    from clawgym_assets.definitions import CHECKS
    from clawgym_assets.defs.bench import assets as bench
    from clawgym_assets.defs.rollouts import assets as rollouts
    from clawgym_assets.defs.synthesis import assets as synthesis

    data = tmp_path_factory.mktemp("data")
    old = os.environ.get("CLAWGYM_DATA")
    os.environ["CLAWGYM_DATA"] = str(data)
    res = _resources(data)
    assets = [synthesis.personas, synthesis.skills, synthesis.imported_tasks, synthesis.synthetic_tasks,
              synthesis.mock_workspaces, synthesis.verifiers, bench.bench_tasks, bench.bench_scores,
              bench.leaderboard, rollouts.trajectories, rollouts.steps, *CHECKS]
    with dg.instance_for_test() as instance:
        r1 = dg.materialize(
            assets, selection=["personas", "skills", "imported_tasks", "synthetic_tasks", "mock_workspaces",
                               "verifiers"],
            resources=res, instance=instance,
            run_config={"ops": {"synthetic_tasks": {"config": {"n": 12, "families": FAMILIES}},
                                "imported_tasks": {"config": {"folder": str(SAMPLE)}}}})
        r2 = dg.materialize(assets, selection=["bench_tasks"], partition_key="procedural", resources=res,
                            instance=instance)
        instance.add_dynamic_partitions("model", ["oracle", "noop"])
        r3 = {m: dg.materialize(assets, selection=["bench_scores"], partition_key=m, resources=res, instance=instance,
                                run_config={"ops": {"bench_scores": {"config": {"repeats": 1}}}})
              for m in ("oracle", "noop")}
        r4 = dg.materialize(assets, selection=["leaderboard"], resources=res, instance=instance)
        yield {"data": data, "instance": instance, "res": res, "assets": assets, "runs": [r1, r2, *r3.values(), r4]}
    if old is None:
        os.environ.pop("CLAWGYM_DATA", None)
    else:
        os.environ["CLAWGYM_DATA"] = old


def test_runs_and_checks_succeed(graph):
    for r in graph["runs"]:
        assert r.success
        for ev in r.get_asset_check_evaluations():
            if ev.check_name != "no_regression_vs_parent":
                assert ev.passed, (ev.check_name, ev.description)


def test_noop_reproduces_clawgym_fixture_scores(graph):
    want = json.loads(NOOP_SCORES.read_text())
    rows = lk.read_table("verifications", root=graph["data"] / "lake").to_pylist()
    got = {r["task_id"]: r["score"] for r in rows if r["route"] == "imported" and r["kind"] == "noop"}
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-12), k


def test_procedural_tasks_validated_and_split(graph):
    root = graph["data"] / "lake"
    tasks = lk.read_table("tasks", {"source": "synthetic"}, root=root).to_pylist()
    assert len(tasks) == 12 and {t["family"] for t in tasks} == set(FAMILIES)
    assert {t["split"] for t in tasks} == {"train", "bench"}
    vals = [v for v in lk.read_table("task_validations", root=root).to_pylist() if v["route"] != "imported"]
    assert len(vals) == 12 and all(v["passed"] for v in vals), [v for v in vals if not v["passed"]]
    # synthetic_tasks gated them already: verifiers re-judged the cached measurements instead of re-running them
    md = graph["runs"][0].asset_materializations_for_node("verifiers")[0].metadata
    assert md["gate_cache_hits"].value == 12 and md["n_validated"].value == 12
    bench = lk.read_table("tasks", {"source": "bench_procedural"}, root=root).to_pylist()
    assert bench and {b["task_id"] for b in bench} == {t["task_id"] for t in tasks if t["split"] == "bench"}
    assert (graph["data"] / "workspaces" / tasks[0]["task_id"]).is_dir()


def test_imported_tasks_get_the_hacker_gate(graph):
    """Every imported ClawGym task meets the hacker gate's exploits in `verifiers`: flagged (never dropped), with
    the exploit and its score; the metadata reports the hackable rate per source."""
    root = graph["data"] / "lake"
    imported = {t["task_id"] for t in lk.read_table("tasks", {"source": "imported"}, root=root).to_pylist()}
    rows = {v["task_id"]: v for v in lk.read_table("task_validations", root=root).to_pylist()
            if v["route"] == "imported"}
    assert set(rows) == imported and all(v["passed"] for v in rows.values())
    flagged = {k: json.loads(v["issues_json"]) for k, v in rows.items() if "hackable" in (v["issues_json"] or "")}
    assert flagged  # ClawGym's existence-style checks give exploits partial credit (docs/figures.md)
    for tid, issues in flagged.items():  # the bar is the untouched score: flagged = scores above it
        for i in issues:
            assert float(i.rsplit("(", 1)[1].rstrip(")")) + 0.005 > (rows[tid]["noop_score"] or 0.0), i  # 2 decimals
    assert imported.isdisjoint(lk.read_rows("rejected_tasks", root=root) and
                               {r["task_id"] for r in lk.read_rows("rejected_tasks", root=root)})
    mat = graph["runs"][0].asset_materializations_for_node("verifiers")[0].metadata
    table = mat["hackable_by_source"].value
    assert f"| imported | {len(imported)} |" in table and f"| {len(flagged)} |" in table
    assert set(mat["hackable"].value) >= set(flagged)


def test_oracle_scores_100_and_noop_0(graph):
    root = graph["data"] / "lake"
    s = {(r["model"], r["category"]): r for r in lk.read_table("bench_scores", root=root).to_pylist()}
    assert s[("oracle", "overall")]["mean"] == pytest.approx(100.0)
    assert s[("noop", "overall")]["mean"] == pytest.approx(0.0)
    assert s[("oracle", "overall")]["pass_at_1"] == 1.0
    res = lk.read_table("bench_results", {"model": "oracle"}, root=root).to_pylist()
    assert res and all(r["rollout_id"] and json.loads(r["verification_json"])["score"] == 1.0 for r in res)
    # the catalog sees the same numbers
    _, rows = lk.query("SELECT model, round(mean) FROM bench_scores WHERE category='overall' ORDER BY 1",
                       graph["data"] / "clawgym.duckdb")
    assert rows == [("noop", 0.0), ("oracle", 100.0)]


def test_leaderboard_metadata(graph):
    inst = graph["instance"]
    ev = inst.get_latest_materialization_event(dg.AssetKey("leaderboard"))
    md = ev.asset_materialization.metadata
    assert md["n_models"].value == 2
    assert "oracle" in md["table"].value and md["plot"].value.startswith("![leaderboard](data:image/png;base64,")
    assert (graph["data"] / "leaderboard.png").stat().st_size > 1000


def test_trajectories_resume_and_steps(graph):
    from clawgym.agent.resume import shard_of
    from clawgym_assets.partitions import DEFAULT_SHARDS

    inst, res, assets = graph["instance"], graph["res"], graph["assets"]
    root = graph["data"] / "lake"
    train = [t["task_id"] for t in lk.read_table("tasks", {"source": "synthetic"}, root=root).to_pylist()
             if t["split"] == "train"]
    shard = max(range(DEFAULT_SHARDS), key=lambda s: sum(shard_of(t, DEFAULT_SHARDS) == s for t in train))
    mine = sorted(t for t in train if shard_of(t, DEFAULT_SHARDS) == shard)
    assert len(mine) >= 2
    part = {"policy": "oracle", "shard": shard}
    # a partially written partition: one rollout already there (as if a run was killed after it)
    lk.append_rows("trajectories", [{"rollout_id": "pre-existing", "task_id": mine[0], "score": 1.0,
                                     "failure_class": "ok", "messages_json": []}], part, root=root)
    inst.add_dynamic_partitions("policy", ["oracle"])
    key = dg.MultiPartitionKey({"policy": "oracle", "shard": str(shard)})
    r = dg.materialize(assets, selection=["trajectories", "steps"], partition_key=key, resources=res, instance=inst)
    assert r.success
    rows = lk.read_table("trajectories", part, root=root).to_pylist()
    assert sorted(x["task_id"] for x in rows) == mine  # nothing run twice
    assert [x["rollout_id"] for x in rows if x["task_id"] == mine[0]] == ["pre-existing"]
    assert all(x["score"] == 1.0 for x in rows)
    md = r.asset_materializations_for_node("trajectories")[0].metadata
    assert md["n_skipped_resume"].value == 1 and md["n_new"].value == len(mine) - 1
    steps = lk.read_table("steps", part, root=root).to_pylist()
    assert steps and {s["tool_name"] for s in steps} <= {"read", "write", "edit", "exec", "ls", "apply_patch"}


def test_sft_dataset_exports_and_gates(graph, tmp_path):
    """sft_dataset from the oracle trajectories written above: lake rows, a load_from_disk folder, blocking GX gate."""
    import datasets

    from clawgym.train.base_model import make_tiny_model
    from clawgym_assets.defs.rollouts import assets as rollouts
    from clawgym_assets.defs.rollouts.checks import sft_gx
    from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource

    inst, res, root = graph["instance"], dict(graph["res"]), graph["data"] / "lake"
    if not lk.read_table("trajectories", root=root).num_rows:  # run alone: write one partition first
        test_trajectories_resume_and_steps(graph)
    tiny = make_tiny_model(tmp_path / "tiny")  # the base model only provides the tokenizer here
    res["endpoints"] = ModelEndpointsResource(lake=res["lake"], base_model_dir=str(tiny))
    base = dg.AssetSpec("base_model")
    r = dg.materialize([rollouts.sft_dataset, sft_gx, base], selection=["sft_dataset"], resources=res, instance=inst,
                       run_config={"ops": {"sft_dataset": {"config": {"max_tokens": 4096}}}})
    assert r.success
    rows = lk.read_table("sft", root=root).to_pylist()
    assert rows and all(r["task_id"] for r in rows)
    checks = r.get_asset_check_evaluations()
    assert [c.passed for c in checks] == [True]
    assert checks[0].metadata["max_tokens"].value == 4096
    ds = datasets.load_from_disk(str(graph["data"] / "datasets" / "sft"))
    assert len(ds) == len(rows)
    msgs = ds[0]["messages"]
    assert any(m["role"] == "assistant" and m.get("tool_calls") for m in msgs)
    assert any(m["role"] == "tool" for m in msgs) and ds[0]["tools"]

"""Trustworthy bench scores: means/CIs over scored rollouts only; infra and unjudged counted per model;
a model above the infra-rate bound is flagged and not ranked; deltas only over tasks scored for both."""

import dagster as dg
import pytest

from clawgym.bench.leaderboard import leaderboard_rows, markdown_table
from clawgym.bench.stats import OVERALL, summarize


def _r(tid, score, fc="ok", cat="c1", repeat=0, model="m"):
    return {"model": model, "suite": "s", "task_id": tid, "category": cat, "repeat": repeat, "score": score,
            "failure_class": fc}


def test_means_over_scored_only_and_counts():
    rows = [_r("a", 1.0), _r("b", 0.0, "agent_error"), _r("c", 0.0, "limit"), _r("d", None, "infra"),
            _r("e", None, "unjudged", cat="c2"), _r("f", 1.0, cat="c2")]
    s = {r.category: r for r in summarize(rows, max_infra_rate=0.5)}
    ov = s[OVERALL]
    assert ov.mean == pytest.approx(100 * 2 / 4)  # a, b, c, f — never d or e as 0
    assert (ov.n_tasks, ov.n, ov.n_rollouts, ov.n_scored, ov.n_infra, ov.n_unjudged) == (6, 4, 6, 4, 1, 1)
    assert ov.infra_rate == pytest.approx(1 / 6) and ov.unjudged_rate == pytest.approx(1 / 6)
    assert s["c1"].mean == pytest.approx(100 / 3) and s["c1"].n_infra == 1
    assert s["c2"].mean == 100.0 and s["c2"].n_unjudged == 1 and s["c2"].n == 1
    assert not ov.flagged
    # CIs over scored tasks: a constant scored set gives a point CI even beside infra/unjudged rows
    only = summarize([_r("a", 1.0), _r("b", 1.0), _r("x", None, "infra"), _r("y", None, "unjudged")])
    assert only[-1].mean == only[-1].ci_low == only[-1].ci_high == 100.0
    # a category with nothing scored has no mean
    none = {r.category: r for r in summarize([_r("a", 1.0), _r("u", None, "unjudged", cat="c9")])}
    assert none["c9"].mean is None and none["c9"].n == 0 and none["c9"].n_unjudged == 1


def test_flag_above_bound():
    ok = [_r(f"t{i}", 1.0) for i in range(19)] + [_r("t19", None, "infra")]  # 5.0%: at the bound
    assert not summarize(ok, max_infra_rate=0.05)[-1].flagged
    bad = [_r(f"t{i}", 1.0) for i in range(18)] + [_r("t18", None, "infra"), _r("t19", None, "infra")]
    rows = summarize(bad, max_infra_rate=0.05)
    assert all(r.flagged for r in rows) and "infra_rate 10.0% > 5.0%" in rows[-1].flag_reason
    assert rows[-1].mean == 100.0  # still the mean of what was scored, but not ranked
    assert summarize([_r("a", None, "infra")])[-1].flagged  # nothing scored: flagged even without a bound
    unj = [_r("a", 1.0), _r("b", None, "unjudged")]
    assert not summarize(unj, max_infra_rate=0.05)[-1].flagged
    assert summarize(unj, max_unjudged_rate=0.25)[-1].flagged


def _scores(model, rows, parent=None, bound=0.05):
    return [{**s.to_dict(), "model": model, "suite": "s", "parent": parent}
            for s in summarize(rows, max_infra_rate=bound) if s.mean is not None]


def test_leaderboard_ranks_unflagged_and_deltas_on_common_scored_tasks():
    parent = [_r(f"t{i}", 1.0, model="base") for i in range(20)]
    # child: t0 infra, t1 unjudged, otherwise 0 on t2..t4 -> flagged? 1/20 = 5% infra: not flagged
    child = [_r("t0", None, "infra", model="child"), _r("t1", None, "unjudged", model="child")] + \
            [_r(f"t{i}", 0.0 if i < 5 else 1.0, model="child") for i in range(2, 20)]
    flaky = [_r(f"t{i}", 1.0, model="flaky") for i in range(10)] + \
            [_r(f"t{i}", None, "infra", model="flaky") for i in range(10, 20)]  # 50% infra, perfect otherwise
    scores = _scores("base", parent) + _scores("child", child, parent="base") + _scores("flaky", flaky)
    board = {b["model"]: b for b in leaderboard_rows(scores, parent + child + flaky, n_boot=200)}
    assert (board["flaky"]["flagged"] and board["flaky"]["rank"] is None
            and "infra_rate 50.0%" in board["flaky"]["flag_reason"])
    assert board["base"]["rank"] == 1 and board["child"]["rank"] == 2
    assert board["flaky"]["overall"] == 100.0 and board["flaky"]["n_infra"] == 10
    c = board["child"]
    assert c["delta_n_common"] == 18  # t0 (infra) and t1 (unjudged) are compared on neither side
    assert c["delta"] == pytest.approx(-100 * 3 / 18)
    assert c["n_infra"] == 1 and c["n_unjudged"] == 1 and c["n_scored"] == 18
    order = [b["model"] for b in leaderboard_rows(scores, [], n_boot=10)]
    assert order == ["base", "child", "flaky"]  # flagged last though its mean is the highest
    # a stricter bound at read time flags the child too
    strict = {b["model"]: b for b in leaderboard_rows(scores, [], max_infra_rate=0.01, n_boot=10)}
    assert strict["child"]["flagged"] and strict["child"]["rank"] is None and strict["base"]["rank"] == 1
    md = markdown_table(scores, "s")
    lines = md.splitlines()
    assert "rank" in lines[0] and "n_infra" in lines[0] and "infra_rate" in lines[0]
    assert lines[2].startswith("| base |") and lines[-1].startswith("| flaky ⚑ |") and "infra_rate 50.0%" in lines[-1]


def _resources(data):
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import (
        JudgeResource,
        ModelEndpointsResource,
        OpenClawResource,
        SandboxResource,
    )

    lake = LakeResource(data_dir=str(data))  # one lake, nested where data paths are needed
    return {"lake": lake, "sandbox": SandboxResource(backend="local"),
            "endpoints": ModelEndpointsResource(lake=lake), "judge": JudgeResource(), "openclaw": OpenClawResource()}


def test_bench_scores_and_leaderboard_flag_a_model_with_infra(tmp_path, monkeypatch):
    from clawgym import lake as lk
    from clawgym.agent.demo import demo_tasks
    from clawgym.agent.servers import shared_policy_server
    from clawgym.lake.records import task_row
    from clawgym_assets.defs.bench import assets as bench

    data = tmp_path / "data"
    monkeypatch.setenv("CLAWGYM_DATA", str(data))
    root = data / "lake"
    tasks = [t.model_copy(update={"suite": "procedural", "split": "bench"}) for t in demo_tasks()]
    lk.write_table("tasks", [task_row(t, "bench_procedural") for t in tasks], {"source": "bench_procedural"}, root=root)
    res = _resources(data)
    assets = [bench.bench_scores, bench.leaderboard]
    fast = {"repeats": 1, "attempts": 1, "request_attempts": 1, "retry_wait_s": 0.0, "n_boot": 200}
    srv = shared_policy_server()
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("model", ["oracle", "noop"])
        srv.fail_next.clear()
        srv.inject_failures(1, 500)  # the first task's only request fails: 1 of 3 oracle rollouts is infra
        try:
            r = dg.materialize(assets, selection=["bench_scores"], partition_key="oracle", resources=res,
                               instance=inst, run_config={"ops": {"bench_scores": {"config": fast}}})
        finally:
            srv.fail_next.clear()
        assert r.success
        md = r.asset_materializations_for_node("bench_scores")[0].metadata
        assert md["procedural/n_infra"].value == 1 and md["procedural/n_scored"].value == 2
        assert md["procedural/infra_rate"].value == pytest.approx(1 / 3, abs=1e-3)
        assert md["procedural/flagged"].value is True and "infra_rate" in md["procedural/flag_reason"].value
        assert md["procedural/overall"].value == 100.0  # the infra rollout is not a 0
        r = dg.materialize(assets, selection=["bench_scores"], partition_key="noop", resources=res, instance=inst,
                           run_config={"ops": {"bench_scores": {"config": fast}}})
        assert r.success
        s = {(x["model"], x["category"]): x for x in lk.read_table("bench_scores", root=root).to_pylist()}
        o = s[("oracle", OVERALL)]
        assert (o["n_tasks"], o["n_scored"], o["n_infra"], o["n_unjudged"], o["flagged"]) == (3, 2, 1, 0, True)
        assert o["mean"] == 100.0 and o["infra_rate"] == pytest.approx(1 / 3)
        n = s[("noop", OVERALL)]
        assert (n["n_infra"], n["flagged"], n["n_scored"]) == (0, False, 3) and n["mean"] < 50
        r = dg.materialize(assets, selection=["leaderboard"], resources=res, instance=inst)
        assert r.success
        lmd = r.asset_materializations_for_node("leaderboard")[0].metadata
        assert lmd["n_models"].value == 2 and lmd["n_ranked"].value == 1 and lmd["n_flagged"].value == 1
        board = {b["model"]: b for b in lmd["board"].value}
        assert board["noop"]["rank"] == 1 and board["oracle"]["rank"] is None and board["oracle"]["flagged"]
        assert "oracle ⚑" in lmd["table"].value
        # the bound is run config: a lenient leaderboard ranks both
        r = dg.materialize(assets, selection=["leaderboard"], resources=res, instance=inst,
                           run_config={"ops": {"leaderboard": {"config": {"max_infra_rate": 0.5}}}})
        board = {b["model"]: b for b in r.asset_materializations_for_node("leaderboard")[0].metadata["board"].value}
        assert board["oracle"]["flagged"]  # bench_scores flagged it at its own bound: the stored flag stands

import math

import pytest

from clawgym.bench import bootstrap_ci, compare, pass_at_k, summarize, task_means


def test_pass_at_k_matches_definition():
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(3, 2, 2) == 1.0  # n-c < k
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def test_bootstrap_ci_seeded_and_sane():
    vals = [0, 100, 50, 25, 75, 100, 0, 0, 100, 50, 33, 12, 91]
    a = bootstrap_ci(vals, seed=1)
    assert a == bootstrap_ci(vals, seed=1)
    assert a != bootstrap_ci(vals, seed=2)
    mean = sum(vals) / len(vals)
    assert a[0] < mean < a[1]
    assert a[0] >= 0 and a[1] <= 100
    assert bootstrap_ci([40.0]) == (40.0, 40.0)
    assert all(math.isnan(v) for v in bootstrap_ci([]))


def test_summarize_categories_overall_and_repeats():
    res = [
        {"task_id": "a", "category": "c1", "score": 1.0, "repeat": 0},
        {"task_id": "a", "category": "c1", "score": 0.0, "repeat": 1},
        {"task_id": "b", "category": "c1", "score": 1.0, "repeat": 0},
        {"task_id": "b", "category": "c1", "score": 1.0, "repeat": 1},
        {"task_id": "c", "category": "c2", "score": 0.5, "repeat": 0},
        {"task_id": "c", "category": "c2", "score": 0.5, "repeat": 1},
    ]
    rows = {r.category: r for r in summarize(res, seed=0)}
    assert list(rows) == ["c1", "c2", "overall"]
    assert rows["c1"].mean == pytest.approx(75.0)
    assert rows["c2"].mean == pytest.approx(50.0) and rows["c2"].ci_low == rows["c2"].ci_high == 50.0
    assert rows["overall"].mean == pytest.approx((50 + 100 + 50) / 3)
    assert rows["overall"].n == 3 and rows["overall"].k == 2
    # pass@1: a 1/2, b 2/2, c 0/2 ; pass@2: a 1, b 1, c 0
    assert rows["overall"].pass_at_1 == pytest.approx((0.5 + 1 + 0) / 3)
    assert rows["overall"].pass_at_k == pytest.approx(2 / 3)
    assert summarize([]) == []


def test_compare_detects_regression():
    parent = {f"t{i}": 1.0 for i in range(20)}
    worse = {f"t{i}": (0.0 if i < 15 else 1.0) for i in range(20)}
    c = compare(worse, parent)
    assert c.n_common == 20 and c.delta == pytest.approx(-75.0) and c.significant_regression
    same = compare(parent, parent)
    assert not same.significant_regression and same.delta == 0
    assert compare({"x": 1.0}, {"y": 1.0}).n_common == 0
    assert task_means([{"task_id": "a", "score": 1}, {"task_id": "a", "score": 0}]) == {"a": 0.5}


def test_task_means_leave_infra_rows_out():
    from clawgym.bench.stats import task_means

    rows = [{"task_id": "a", "score": 1.0}, {"task_id": "a", "score": None}, {"task_id": "a", "score": 0.0},
            {"task_id": "b", "score": None}]
    assert task_means(rows) == {"a": 0.5}

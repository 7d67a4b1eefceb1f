import polars as pl
import pyarrow as pa

from clawgym import quality


def test_good_and_bad_frames():
    good = pl.DataFrame({"rollout_id": ["a", "b"], "task_id": ["t", "t"], "policy": ["p", "p"],
                         "failure_class": ["ok", "limit"], "score": [0.0, 1.0]})
    ok, d = quality.check_table("trajectories", good)
    assert ok, d
    assert d["n_rows"] == 2 and all(e["success"] for e in d["expectations"])

    bad = pa.table({"rollout_id": ["a", "a"], "task_id": ["t", None], "policy": ["p", "p"],
                    "failure_class": ["ok", "weird"], "score": [1.5, 0.5]})
    ok, d = quality.check_table("trajectories", bad)
    assert not ok
    failed = {(e["type"], str(e["column"])) for e in d["expectations"] if not e["success"]}
    assert ("expect_column_values_to_be_unique", "rollout_id") in failed
    assert ("expect_column_values_to_not_be_null", "task_id") in failed
    assert ("expect_column_values_to_be_between", "score") in failed
    assert ("expect_column_values_to_be_in_set", "failure_class") in failed
    assert "weird" in quality.summary(d)


def test_missing_column_and_min_rows():
    ok, d = quality.validate_frame(pl.DataFrame({"x": [1]}), unique=["task_id"])
    assert not ok and d["missing_columns"] == ["task_id"]
    ok, d = quality.validate_frame(pl.DataFrame({"x": [1]}), min_rows=2)
    assert not ok
    ok, d = quality.validate_frame(pl.DataFrame({"x": [1, 2]}), min_rows=2, unique=["x"])
    assert ok

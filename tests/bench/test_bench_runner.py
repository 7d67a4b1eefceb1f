import json

import pytest

from clawgym.agent.resume import shard_of
from clawgym.bench.leaderboard import markdown_table, plot_png
from clawgym.bench.runner import resolve_policy


def test_shard_is_stable_and_spread():
    assert shard_of("task-a", 4) == shard_of("task-a", 4)
    shards = {shard_of(f"t{i}", 4) for i in range(100)}
    assert shards == {0, 1, 2, 3}
    assert shard_of("x", 1) == 0


def test_resolve_policy_sources(tmp_path):
    assert resolve_policy("oracle").kind == "oracle"
    eps = json.dumps([{"name": "gpt", "base_url": "http://h/v1", "model": "m", "api_key_env": "K"}])
    p = resolve_policy("gpt", endpoints_json=eps)
    assert (p.kind, p.base_url, p.api_key_env) == ("openai", "http://h/v1", "K")
    (tmp_path / "ck" / "sft-1").mkdir(parents=True)
    p = resolve_policy("sft-1", checkpoints_dir=tmp_path / "ck", extra={"device": "cpu"})
    assert p.kind == "local" and p.extra == {"model_path": str(tmp_path / "ck" / "sft-1"), "device": "cpu"}
    p = resolve_policy("smollm2-base", base_model_dir=tmp_path / "base")
    assert p.kind == "local" and p.extra["model_path"] == str(tmp_path / "base")
    with pytest.raises(KeyError, match="unknown model/policy 'nope'"):
        resolve_policy("nope", checkpoints_dir=tmp_path / "ck")


def test_leaderboard_table_and_plot():
    rows = [{"model": m, "suite": "s", "category": c, "mean": v, "ci_low": v - 5, "ci_high": v + 5}
            for m, v in (("a", 80.0), ("b", 20.0)) for c in ("analysis_reasoning", "overall")]
    md = markdown_table(rows, "s")
    assert md.splitlines()[0] == "| model | analysis_reasoning | overall |"
    assert md.splitlines()[2].startswith("| a | 80.0 [75.0, 85.0]")
    png = plot_png(rows, "s")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000

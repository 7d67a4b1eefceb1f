"""The batched gates (validate_many: fork-served python3 in the replay, grade code's sys.executable runs served,
work dirs removed in batches) score every variant exactly as the authoritative one-sandbox-per-variant path
(validate_task: apply_reference + verify_task) and as the batch path without the fork server."""

from __future__ import annotations

import pytest

from clawgym.synth.families import get_family
from clawgym.synth.gates import validate_many, validate_task

# families whose references / graders exercise the fast paths: python3 -c / heredoc / -m json.tool / pipelines
# (replay fork server), pytest (pre-imported), a CLI run through sys.executable and `make -n` inside grade()
FAMILIES = ["log_summary_cli", "fix_failing_test", "tests_that_catch_bugs", "makefile_stats_target",
            "contact_merge", "task_board_report", "glossary_rename", "sales_rollup"]


def _scores(v):
    return (v.compiles, v.noop_score, v.scaffold_score, v.oracle_score, v.oracle_score_2, v.mutation_scores,
            v.oracle_checks, v.same_keys, v.passed, v.reason)


@pytest.fixture(scope="module")
def sample():
    return [get_family(name).generate(seed) for seed, name in enumerate(FAMILIES, 11)]


@pytest.fixture(scope="module")
def fast(sample, any_isolating_factory):
    return validate_many(sample, any_isolating_factory, chunk=len(sample), forkserver=True)


def test_fast_path_matches_validate_task(sample, fast, any_isolating_factory):
    assert all(v.passed for v in fast), [(v.task_id, v.reason) for v in fast if not v.passed]
    for t, b in zip(sample, fast):
        a = validate_task(t, any_isolating_factory)
        assert a.task_id == b.task_id
        assert (a.noop_score, a.scaffold_score, a.oracle_score, a.oracle_score_2) == \
            (b.noop_score, b.scaffold_score, b.oracle_score, b.oracle_score_2), t.task_id
        assert a.mutation_scores == b.mutation_scores and len(b.mutation_scores) >= 2, t.task_id
        assert a.oracle_checks == b.oracle_checks, t.task_id
        assert (a.passed, a.reason) == (b.passed, b.reason), t.task_id


def test_fast_path_matches_batch_without_fork_server(sample, fast, any_isolating_factory):
    slow = validate_many(sample, any_isolating_factory, chunk=len(sample), forkserver=False)
    assert [_scores(v) for v in slow] == [_scores(v) for v in fast]


def test_a_failing_mutation_keeps_its_reason(any_isolating_factory):
    """A verifier that a mutation cannot fool any more is rejected with the reason naming that mutation."""
    t = get_family("log_summary_cli").generate(3)
    # drop every check but the CLI ones: a missing/moved output file then still scores 1.0
    code = t.verifier.code
    lazy = t.model_copy(update={"task_id": "lazy", "verifier": t.verifier.model_copy(update={"code": code.replace(
        "def grade(", "def _orig_grade(", 1) + "\ndef grade(transcript, workspace_path):\n"
        "    r = _orig_grade(transcript, workspace_path)\n"
        "    return {k: v for k, v in r.items() if k.startswith('cli_on_hidden')}\n"})})
    [v] = validate_many([lazy], any_isolating_factory)
    assert not v.passed
    assert "mutation missing_file does not lose score" in v.reason
    assert v.oracle_score == 1.0 and v.mutation_scores["missing_file"] == 1.0

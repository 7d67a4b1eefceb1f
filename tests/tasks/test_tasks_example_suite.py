"""Our own example suite in ClawGym format (data/seeds/example_suite): it imports cleanly, round-trips,
scores exactly 0 untouched and 1.0 with a correct solution, in an isolating sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawgym.tasks import import_any
from clawgym.tasks.clawgym_format import export_clawgym_folder, import_clawgym_folder
from clawgym.verify import verify_noop, verify_task

SUITE = Path(__file__).resolve().parents[2] / "data" / "seeds" / "example_suite"

SOLUTIONS = {
    "example_0001": {
        "output/category_totals.csv": "category,total_eur\ntravel,430.50\nmeals,74.95\nsoftware,65.00\n",
        "output/summary.txt": "Grand total: 570.45 EUR\n",
    },
    "example_0002": {
        "output/service.json": '{"name": "orders-api", "port": 8080, "workers": 4, "log_level": "info", '
                               '"database_url": "postgres://db.staging.internal:5432/orders"}\n',
        "output/fix_note.md": "The `port` key held the string \"80a80\"; I changed it to the integer 8080.\n",
    },
    "example_0003": {
        "output/todos.md": "- [ ] Ben to review the billing export PR\n- [ ] Book the room for the Friday demo\n"
                           "- [ ] Draft the Q1 roadmap one-pager\n- [ ] Ask finance about the travel budget\n",
    },
    "example_0004": {
        "output/status_update.md": "Hi! Here is this week's ops status.\n\n## Done\n- OPS-101 Rotate staging TLS "
                                   "certificates\n- OPS-104 Clean up unused S3 buckets\n\n## In progress\n- OPS-102 "
                                   "Migrate cron jobs to the scheduler\n- OPS-105 Add disk alerts for build agents\n\n"
                                   "## Blocked\n- OPS-103 Upgrade Postgres to 16: waiting for vendor approval; "
                                   "could you nudge the vendor?\n\nOpen tickets: 3\n",
    },
}


@pytest.fixture(scope="module")
def tasks():
    rep = import_clawgym_folder(SUITE)
    assert rep.ok, rep.summary()
    return rep.tasks


def test_imports_and_round_trips(tasks, tmp_path):
    assert [t.task_id for t in tasks] == sorted(SOLUTIONS)
    assert {t.category for t in tasks} <= {"analysis_reasoning", "systems_automation", "planning_knowledge",
                                           "productivity_collaboration"}
    hybrid = [t for t in tasks if t.verifier.rubric]
    assert [t.task_id for t in hybrid] == ["example_0004"] and hybrid[0].verifier.rubric[0].proxy is not None
    export_clawgym_folder(tasks, tmp_path / SUITE.name)
    assert import_any(tmp_path / SUITE.name).tasks == tasks


def test_noop_zero_and_solution_one(tasks, any_isolating_factory):
    for t in tasks:
        r0 = verify_noop(t, any_isolating_factory)
        assert r0.score == 0.0 and r0.error is None, (t.task_id, r0)
        with any_isolating_factory.open(t.files) as sb:
            for path, text in SOLUTIONS[t.task_id].items():
                sb.write_file(path, text.encode())
            r = verify_task(t, sb)
        assert r.error is None, (t.task_id, r.error, r.stderr_tail)
        assert r.code_score == 1.0, (t.task_id, r.subscores)
        assert r.score == pytest.approx(1.0), (t.task_id, r.rule_scores)
        if t.verifier.rubric:
            assert r.judge == "offline" and [x["score"] for x in r.rule_scores] == [1.0, 1.0]


def test_partial_solution_scores_between(tasks, any_isolating_factory):
    t = next(t for t in tasks if t.task_id == "example_0001")
    with any_isolating_factory.open(t.files) as sb:
        sb.write_file("output/category_totals.csv", b"category,total_eur\nsoftware,65.00\nmeals,74.95\ntravel,430.50\n")
        r = verify_task(t, sb)
    # exists, header, totals right; not sorted; no summary -> 3 / 5
    assert r.score == pytest.approx(0.6)

"""Procedural bench selection: balanced over categories, difficulty-aware once a strong and a weak policy ran."""

from clawgym.bench.suites import select_balanced, separation
from clawgym.tasks import Task


def _t(tid, cat):
    return Task(task_id=tid, instruction="x", category=cat)


def test_balanced_round_robin_over_categories():
    tasks = ([_t(f"a{i}", "analysis_reasoning") for i in range(10)]
             + [_t(f"s{i}", "systems_automation") for i in range(2)])
    got = select_balanced(tasks, 6)
    cats = [t.category for t in got]
    assert cats.count("systems_automation") == 2 and cats.count("analysis_reasoning") == 4
    assert len({t.task_id for t in got}) == 6
    assert [t.task_id for t in select_balanced(tasks, 6)] == [t.task_id for t in got]  # stable
    assert len(select_balanced(tasks, 100)) == 12


def test_separating_tasks_come_first():
    tasks = [_t(f"t{i}", "analysis_reasoning") for i in range(6)]
    results = []
    for i in range(6):  # strong solves everything; weak solves t0..t3; t5 has no weak rollout yet
        results.append({"model": "strong", "task_id": f"t{i}", "score": 1.0})
        if i < 5:
            results.append({"model": "weak", "task_id": f"t{i}", "score": 1.0 if i < 4 else 0.0})
    results.append({"model": "weak", "task_id": "t0", "score": None})  # infra: ignored
    results.append({"model": "other", "task_id": "t1", "score": 0.0})  # another model: ignored
    sep = separation(results, "strong", "weak")
    assert sep == {f"t{i}": 0.0 for i in range(4)} | {"t4": 1.0}
    got = select_balanced(tasks, 2, sep)
    assert got[0].task_id == "t4"

"""Diversity figures (clawgym.synth.diversity): the O(n) spread equals the pairwise definition, and on real MiniLM
embeddings paraphrases are tighter than unrelated tasks."""

import itertools

import numpy as np
import pytest

from clawgym.synth.diversity import diversity, spread
from clawgym.tasks.model import Task, Verifier


def test_spread_matches_pairwise_definition():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(17, 8))
    n = e / np.linalg.norm(e, axis=1, keepdims=True)
    pair = np.mean([1 - float(n[i] @ n[j]) for i, j in itertools.permutations(range(len(n)), 2)])
    sp, cd = spread(e)
    assert sp == pytest.approx(pair, abs=1e-9)
    c = n.sum(0) / np.linalg.norm(n.sum(0))
    assert cd == pytest.approx(float(np.mean(1 - n @ c)), abs=1e-9)
    assert spread(np.ones((5, 4)))[0] == pytest.approx(0.0, abs=1e-9)  # identical: no spread
    assert spread(np.eye(4))[0] == pytest.approx(1.0)  # orthogonal: distance 1


def _task(i: int, text: str, route: str, cat: str, family: str) -> Task:
    return Task(task_id=f"t{i}", route=route, family=family, category=cat, instruction=text,
                verifier=Verifier(kind="grade", code="def grade(t, w):\n    return {}\n"))


def test_diversity_groups_and_real_embeddings():
    from clawgym.synth.embed import minilm_embedder

    same = ["Sum the amounts in input/orders.csv and write output/total.json.",
            "Add up the amounts in input/orders.csv and save output/total.json.",
            "Total the order amounts from input/orders.csv into output/total.json."]
    diff = ["Rename every draft in notes/ to kebab-case and list the renames in output/renames.md.",
            "Find the failing tests in reports/junit.xml and summarise them in output/failures.md.",
            "Draft a polite reply to the customer email in inbox/complaint.txt as output/reply.md."]
    tasks = [_task(i, t, "procedural", "analysis_reasoning", "sum") for i, t in enumerate(same)] + \
        [_task(10 + i, t, "persona", "analysis_reasoning", "llm_persona") for i, t in enumerate(diff)]
    rows = {(r["route"], r["category"]): r for r in diversity(tasks, minilm_embedder())}
    assert set(rows) == {("persona", "all"), ("persona", "analysis_reasoning"), ("procedural", "all"),
                         ("procedural", "analysis_reasoning")}
    p, q = rows[("procedural", "analysis_reasoning")], rows[("persona", "analysis_reasoning")]
    assert p["n"] == 3 and p["families"] == 1 and q["families"] == 1
    assert 0 < p["spread"] < q["spread"]  # paraphrases are closer than unrelated tasks
    assert rows[("persona", "all")]["spread"] == q["spread"]

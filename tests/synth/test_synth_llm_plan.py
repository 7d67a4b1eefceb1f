"""The LLM route's plan from a run's config (clawgym.synth.llm_plan): endpoint roles, errors naming the field,
the taxonomy and the skills kept — without Dagster."""

import contextlib
from types import SimpleNamespace

import pytest

from clawgym.agent.policies import PolicySpec
from clawgym.synth.llm_plan import PlanError, client_config, llm_plan
from clawgym.synth.taxonomy import SUBCATEGORIES

SPECS = {"gen": PolicySpec(name="gen", base_url="http://127.0.0.1:9/v1", model="m-gen", api_key_env="GEN_KEY"),
         "rev": PolicySpec(name="rev", base_url="http://127.0.0.1:9/v1", extra={"top_k": 5}),
         "tiny": PolicySpec(name="tiny", kind="local", model="/models/tiny"),
         "orc": PolicySpec(name="orc", kind="oracle")}


def _lookup(name):
    if name not in SPECS:
        raise KeyError(f"unknown policy {name!r}")
    return SPECS[name]


def _config(**kw):
    base = dict(generator="gen", reviewer="", auditor="", n_llm=4, skill_fraction=0.5, categories=[],
                max_repairs=2, llm_workers=0, max_in_flight=8, llm_hacker="report", max_tokens=0)
    return SimpleNamespace(**{**base, **kw})


def _plan(config, asset="synthetic_tasks", stack=None, skills=()):
    return llm_plan(config, _lookup, [{"name": "p"}], list(skills), cache_dir="/c/llm", gate_cache_dir="/c/gates",
                    asset=asset, stack=stack)


def test_plan_roles_taxonomy_and_skills():
    skills = [{"name": "a"}, {"name": "b", "usable_offline": False}, {"name": "c", "usable_offline": True}]
    p = _plan(_config(), skills=skills)
    assert p.generator == {"base_url": "http://127.0.0.1:9/v1", "model": "m-gen", "extra": {},
                           "api_key_env": "GEN_KEY", "max_in_flight": 8}
    assert p.reviewer is None and p.auditor is None  # "" = the generator's
    assert [s["name"] for s in p.skills] == ["a", "c"] and p.personas == [{"name": "p"}]
    assert p.taxonomy == dict(SUBCATEGORIES) and p.workers is None and p.n == 4 and p.hacker == "report"
    assert (p.cache_dir, p.gate_cache_dir, p.max_repairs, p.skill_fraction) == ("/c/llm", "/c/gates", 2, 0.5)

    cat = sorted(SUBCATEGORIES)[0]
    q = _plan(_config(reviewer="rev", categories=[cat], max_tokens=300, llm_workers=3))
    assert q.reviewer == {"base_url": "http://127.0.0.1:9/v1", "model": "rev", "extra": {"top_k": 5},
                          "max_tokens": 300, "max_in_flight": 8}
    assert q.auditor == q.reviewer and q.generator["max_tokens"] == 300  # the auditor defaults to the reviewer
    assert q.taxonomy == {cat: SUBCATEGORIES[cat]} and q.workers == 3


@pytest.mark.parametrize("kw, asset, message", [
    ({"categories": ["no-such-category"]}, "llm_candidates", "llm_candidates.config.categories: unknown"),
    ({"max_tokens": -1}, "synthetic_tasks", "synthetic_tasks.config.max_tokens: must be 0"),
    ({"generator": "nobody"}, "synthetic_tasks", "synthetic_tasks.config.generator: unknown policy 'nobody'"),
    ({"reviewer": "orc"}, "synthetic_tasks", "config.reviewer: endpoint 'orc' is not an OpenAI-compatible"),
    ({"auditor": "tiny"}, "synthetic_tasks", "config.auditor: endpoint 'tiny' is a local model"),
])
def test_plan_errors_name_the_field(kw, asset, message):
    with pytest.raises(PlanError, match=message):
        _plan(_config(**kw), asset=asset)


def test_local_model_gets_a_bounded_schema_check_before_it_is_served():
    with contextlib.ExitStack() as stack:  # a budget no task schema fits: refused before any server starts
        with pytest.raises(PlanError, match="synthetic_tasks.config.max_tokens"):
            client_config(_lookup, "tiny", "generator", stack=stack, max_tokens=1)

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

from clawgym.synth.personas import (
    Persona,
    expand_personas,
    expand_personas_llm,
    load_seeds,
    save_personas,
    voice,
)
from clawgym.tasks.model import TaskError


def test_at_least_200_distinct_personas():
    ps = expand_personas()
    assert len(ps) >= 200
    assert len({p.persona_id for p in ps}) == len(ps)
    assert len({(p.role, p.domain, p.seniority, p.tone) for p in ps}) == len(ps)
    assert len({p.role for p in ps}) >= 10 and len({p.domain for p in ps}) >= 30
    for p in ps[:50]:
        assert p.goals and p.tools and p.tone and p.seniority


def test_expansion_is_deterministic():
    a, b = expand_personas(seed=3), expand_personas(seed=3)
    assert [p.to_dict() for p in a] == [p.to_dict() for p in b]
    assert [p.persona_id for p in expand_personas(seed=4)] != [p.persona_id for p in a]
    assert len(expand_personas(limit=17)) == 17


def test_voice_uses_persona_and_tone():
    p = Persona("p-1", "Ana Costa", "data analyst", "retail", "senior", ("a",), ("python",), "urgent")
    s = voice(p, "Summarise input/x.csv into output/y.json.", random.Random(0))
    assert "output/y.json" in s and ("data analyst" in s or "Ana Costa" in s)
    assert voice(None, "Do X.", random.Random(0)) == "Do X."


def test_bad_seed_file_names_file_and_field(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("roles:\n  - role: x\n    domains: [a]\n    goals: [g]\nnames: [A]\n")
    with pytest.raises(TaskError) as e:
        load_seeds(f)
    assert str(f) in str(e.value) and "roles[0].tools" in str(e.value)
    f.write_text("roles: [\n")
    with pytest.raises(TaskError, match="invalid YAML"):
        load_seeds(f)


def test_llm_expansion_dedupes_with_json_schema(tmp_path):
    base = expand_personas(limit=5)
    dup = base[0]
    replies = [
        {"personas": [dup.to_dict(), {"name": "Zed", "role": "beekeeper", "domain": "agriculture",
                                      "seniority": "senior", "goals": ["more honey"], "tools": ["spreadsheets"],
                                      "tone": "casual"}]},
        {"personas": [{"name": "Zed2", "role": "beekeeper", "domain": "agriculture", "seniority": "senior",
                       "goals": ["x"], "tools": ["y"], "tone": "casual"},
                      {"name": "Mo", "role": "pilot", "domain": "aviation", "seniority": "lead", "goals": ["safety"],
                       "tools": ["checklists"], "tone": "terse"}]},
    ]
    seen_kwargs = []

    def create(**kw):
        seen_kwargs.append(kw)
        content = json.dumps(replies[min(len(seen_kwargs) - 1, 1)])
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=content))])

    client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    out = expand_personas_llm(client, "m", base, n=2, batch=2, max_rounds=5)
    assert [p.role for p in out[5:]] == ["beekeeper", "pilot"]
    assert seen_kwargs[0]["response_format"]["type"] == "json_schema"
    save_personas(out, tmp_path / "personas.jsonl")
    assert len((tmp_path / "personas.jsonl").read_text().splitlines()) == 7

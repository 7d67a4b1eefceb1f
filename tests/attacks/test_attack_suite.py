"""The attack suite is one command (`bash scripts/attacks.sh` = `pytest -m attack`): every module it names exists
and every one of them contributes its tests to it; nothing else does. Every attack names the one rule it tests
(tests/attack_rules.py RULES), and every rule has an attack."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from attack_rules import RULES
from conftest import ATTACK_MODULES, ATTACK_RULES_OUT_ENV

TESTS = Path(__file__).resolve().parents[1]


@functools.cache
def _collect_attacks() -> tuple[subprocess.CompletedProcess, dict[str, list[str]]]:
    """`pytest --collect-only -m attack` over tests/, with each collected attack's rule ids (the conftest writes
    them to the file ATTACK_RULES_OUT_ENV names)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rules.json"
        r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "attack", "-p",
                            "no:cacheprovider", str(TESTS)], capture_output=True, text=True, timeout=300,
                           cwd=TESTS.parent, env={**os.environ, ATTACK_RULES_OUT_ENV: str(out)})
        rules = json.loads(out.read_text()) if out.is_file() else {}
    return r, rules


def test_every_attack_module_is_in_the_one_command():
    for m in ATTACK_MODULES:
        assert any(TESTS.rglob(f"{m}.py")), f"tests/conftest.py ATTACK_MODULES names {m}, which does not exist"
    r, _ = _collect_attacks()
    ids = [ln for ln in r.stdout.splitlines() if "::" in ln]
    mods = {ln.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py") for ln in ids}
    assert mods == set(ATTACK_MODULES), r.stdout[-2000:] + r.stderr[-2000:]


def test_every_attack_names_exactly_one_rule_and_every_rule_has_an_attack():
    r, rules = _collect_attacks()
    assert r.returncode == 0 and rules, r.stdout[-2000:] + r.stderr[-2000:]
    ids = {ln.strip() for ln in r.stdout.splitlines() if "::" in ln}
    assert set(rules) == ids, "the rules file and the collection disagree: " + repr(sorted(set(rules) ^ ids)[:10])
    bad = {n: rs for n, rs in rules.items() if len(rs) != 1 or rs[0] not in RULES}
    assert not bad, (f"{len(bad)} attack tests without exactly one rule of tests/attack_rules.py RULES "
                     "(mark them @pytest.mark.rule(...) or add them to their module's ATTACK_RULES): "
                     + "\n".join(f"{n}: {rs}" for n, rs in sorted(bad.items())[:40]))
    used = {rs[0] for rs in rules.values()}
    assert set(RULES) <= used, f"rules no attack tests: {sorted(set(RULES) - used)}"
    assert all(isinstance(t, str) and t.strip() and "\n" not in t for t in RULES.values())


def _load(name: str, path: Path):
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_attack_rules_mappings_name_only_real_attacks():
    """A module's ATTACK_RULES (attack name -> rule) names attacks of that module only, each with a known rule: a
    renamed or removed attack leaves no stale entry behind."""
    for m in ATTACK_MODULES:
        path = next(TESTS.rglob(f"{m}.py"))  # the module by its file (the unit folders are not packages)
        mod = _load(m, path)
        mapping = getattr(mod, "ATTACK_RULES", None)
        if mapping is None:
            continue
        names = {a.name for a in mod.ATTACKS}
        assert set(mapping) <= names, (m, sorted(set(mapping) - names))
        assert set(mapping.values()) <= set(RULES), (m, sorted(set(mapping.values()) - set(RULES)))

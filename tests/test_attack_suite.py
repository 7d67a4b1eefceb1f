"""The attack suite is one command (`bash scripts/attacks.sh` = `pytest -m attack`): every module it names exists
and every one of them contributes its tests to it; nothing else does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ATTACK_MODULES

TESTS = Path(__file__).resolve().parent


def test_every_attack_module_is_in_the_one_command():
    for m in ATTACK_MODULES:
        assert (TESTS / f"{m}.py").is_file(), f"tests/conftest.py ATTACK_MODULES names {m}, which does not exist"
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "attack", "-p",
                        "no:cacheprovider", str(TESTS)], capture_output=True, text=True, timeout=300,
                       cwd=TESTS.parent)
    ids = [ln for ln in r.stdout.splitlines() if "::" in ln]
    mods = {ln.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py") for ln in ids}
    assert mods == set(ATTACK_MODULES), r.stdout[-2000:] + r.stderr[-2000:]

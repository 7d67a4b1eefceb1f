"""Shared test fixtures.

Sandboxes (clawgym.sandbox):
  docker_factory         session: starts dockerd (scripts/start_dockerd.sh) and builds the image
                         (scripts/build_sandbox_image.sh, reuses an existing one) when needed; skips
                         ONLY when a Docker engine truly cannot start here (the reason is shown).
  bwrap_factory          session: bubblewrap on the debootstrapped rootfs (built when missing; host
                         system dirs when debootstrap cannot run); server mode + pool where root.
  bwrap_perexec_factory  session: the same with server=False (a bwrap per exec: the fallback).
  local_factory          session: the unisolated temp-dir backend.
  any_isolating_factory  session: bwrap when it works here, else docker.
Limits of these factories are small (256 MB memory, 128 pids, 64 MB disk) so hostile tests are fast.

At the end of the session every sandbox still open is closed and the run fails if this process
left anything behind (containers, tmpfs mounts, temp dirs, bwrap processes, cgroups).
"""

from __future__ import annotations

import os
import signal

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The attack suite: every test in these modules plays an attacker against a defence (scoring, judging, the
# trajectory record, the proxy, the forwarder, untrusted input). They carry the `attack` marker, so
# `bash scripts/attacks.sh` (= `python3 -m pytest -m attack`) runs them all and nothing else.
ATTACK_MODULES = (
    "test_reward_hacking",          # the clean room, the import guard, reward/ tampering, forged output
    "test_synth_hacker",            # cheap exploits of a task's checks (the hacker gate)
    "test_judge_protocol",          # the rubric judge's nonce-bounded protocol
    "test_sft_control_tokens",      # control-token text in trajectories and SFT rows
    "test_proxy_token_ids_hostile",  # streamed token ids the model server returns
    "test_proxy_call_ids",          # tool-call ids and results paired by the proxy
    "test_openclaw_proxy_hostile",  # OpenClaw behind the recording proxy
    "test_openclaw_forwarder",      # the socket into one sandbox
    "test_rollout_bounds",          # limits an agent could stretch
    "test_untrusted_import",        # hostile task folders and Parquet files
    "test_export_every_path",       # every way a workspace reaches a verifier, the Harbor handover included
)


# Every attack test names the one rule it tests (tests/attack_rules.py RULES): `@pytest.mark.rule("id")` on the test
# or its module, or, for a test parametrized over named attacks (an `attack` argument with a `.name`), the entry of
# its module's ATTACK_RULES (attack name -> rule id). tests/attacks/test_attack_suite.py checks exactly one known
# rule per attack and an attack per rule; scripts/attacks.sh (CLAWGYM_ATTACK_TABLE=1, or `-m attack`) ends with
# the table.
ATTACK_TABLE_ENV = "CLAWGYM_ATTACK_TABLE"
ATTACK_RULES_OUT_ENV = "CLAWGYM_ATTACK_RULES_OUT"  # a path: collection writes {nodeid: [rule ids]} of the attacks

_attack_rules: dict[str, list[str]] = {}  # nodeid -> rule ids, of the attack tests selected to run
_attack_outcome: dict[str, str] = {}  # nodeid -> held | failed | skipped


def pytest_configure(config):
    config.addinivalue_line("markers", "rule(rule_id): the rule (tests/attack_rules.py RULES) an attack test tests")


def rules_of(item) -> list[str]:
    """The rule ids an item carries (marks on the test, its class, its module, its parametrized case)."""
    return [m.args[0] if m.args else m.kwargs.get("rule_id") for m in item.iter_markers("rule")]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in ATTACK_MODULES:
            item.add_marker(pytest.mark.attack)
            by_attack = getattr(item.module, "ATTACK_RULES", None)
            attack = getattr(getattr(item, "callspec", None), "params", {}).get("attack")
            if by_attack and not rules_of(item) and getattr(attack, "name", None) in by_attack:
                item.add_marker(pytest.mark.rule(by_attack[attack.name]))


def pytest_collection_finish(session):
    _attack_rules.clear()
    _attack_rules.update({i.nodeid: rules_of(i) for i in session.items if i.get_closest_marker("attack")})
    out = os.environ.get(ATTACK_RULES_OUT_ENV)
    if out:
        import json

        with open(out, "w") as f:
            json.dump(_attack_rules, f)


def pytest_runtest_logreport(report):
    if report.nodeid not in _attack_rules:
        return
    if report.failed:
        _attack_outcome[report.nodeid] = "failed"
    elif report.skipped and report.nodeid not in _attack_outcome:
        _attack_outcome[report.nodeid] = "skipped"
    elif report.when == "call" and report.passed and report.nodeid not in _attack_outcome:
        _attack_outcome[report.nodeid] = "held"


def _attack_table_wanted(config) -> bool:
    return os.environ.get(ATTACK_TABLE_ENV) == "1" or (config.option.markexpr or "").strip() == "attack"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """With the attack suite (`-m attack`, scripts/attacks.sh): per rule, the attacks selected, held (passed),
    failed, skipped and not run (-x, an interrupt), and the rule's sentence."""
    if not _attack_table_wanted(config) or not _attack_rules or config.option.collectonly:
        return
    from attack_rules import RULES

    rows: dict[str, list[int]] = {r: [0, 0, 0, 0, 0] for r in RULES}
    for nodeid, rules in _attack_rules.items():
        key = rules[0] if len(rules) == 1 else ("(no rule)" if not rules else "(several rules)")
        row = rows.setdefault(key, [0, 0, 0, 0, 0])
        row[0] += 1
        row[{"held": 1, "failed": 2, "skipped": 3}.get(_attack_outcome.get(nodeid), 4)] += 1
    tr = terminalreporter
    tr.write_sep("=", "attacks by rule (tests/attack_rules.py)")
    w = max(len(r) for r in rows)
    tr.write_line(f"{'rule':<{w}}  attacks  held  failed  skipped  not run")
    for r, (n, held, failed, skipped, notrun) in rows.items():
        text = RULES.get(r, "NOT A RULE of tests/attack_rules.py RULES")
        line = f"{r:<{w}}  {n:>7}  {held:>4}  {failed:>6}  {skipped:>7}  {notrun:>7}  {text}"
        tr.write_line(line, red=failed > 0 or r not in RULES, green=n > 0 and held == n)
    tot = [sum(col) for col in zip(*rows.values())]
    tr.write_line(f"{'all':<{w}}  {tot[0]:>7}  {tot[1]:>4}  {tot[2]:>6}  {tot[3]:>7}  {tot[4]:>7}", bold=True)


def _clean_signal_state() -> None:
    """Tests start from a clean signal state whatever launched them: `nohup … &` or a CI runner may hand
    us SIGINT/SIGHUP/SIGTERM ignored (inherited across exec), which would silence Ctrl-C tests and let
    children started with PR_SET_PDEATHSIG=SIGTERM survive. Set the dispositions the tests rely on, and
    unblock every signal (a blocked mask is inherited as well)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
              signal.SIGCHLD):
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


_clean_signal_state()


@pytest.fixture(autouse=True)
def _signal_state():
    """Each test starts with the clean dispositions (a test that changed one cannot leak it)."""
    _clean_signal_state()
    yield

TEST_CONFIG = dict(memory_mb=256, pids=128, disk_mb=64, default_timeout_s=60.0)


def _config():
    from clawgym.sandbox import host_settings
    from clawgym.sandbox.base import SandboxConfig

    return SandboxConfig(**TEST_CONFIG, **host_settings(os.environ))  # the suite is an entry point: the host facts


@pytest.fixture(scope="session", autouse=True)
def _no_sandbox_leftovers():
    yield
    import sys

    if "clawgym.sandbox.host.cleanup" not in sys.modules:  # no sandbox was ever made
        return
    from clawgym.sandbox.host import cleanup

    cleanup.close_all()
    left = cleanup.find_leftovers(pid=os.getpid())
    if left:
        cleanup.remove_leftovers(pid=os.getpid(), orphans_only=False)
        pytest.fail(f"sandboxes leaked: {left.summary()}", pytrace=False)


@pytest.fixture(scope="session")
def sandbox_rootfs():
    """Path of the debootstrapped sandbox root, or None when it cannot be built here."""
    from clawgym.sandbox import images
    from clawgym.sandbox.base import SandboxError

    try:
        return images.ensure_rootfs()
    except SandboxError as e:
        import warnings

        warnings.warn(f"sandbox rootfs not built, bwrap uses the host's system dirs: {e}", stacklevel=1)
        return None


@pytest.fixture(scope="session")
def docker_factory(sandbox_rootfs):
    from clawgym.sandbox import images
    from clawgym.sandbox.base import SandboxError

    try:
        os.environ["DOCKER_HOST"] = images.ensure_docker()  # the suite's docker clients use that engine
    except SandboxError as e:
        pytest.skip(f"no Docker engine can start on this machine: {e}")
    try:
        images.ensure_image()
    except SandboxError as e:
        pytest.fail(f"docker answers but the sandbox image cannot be built: {e}")
    from clawgym.sandbox.docker.backend import DockerFactory

    f = DockerFactory(_config(), pool_size=2)
    f.warm(timeout=60)
    yield f
    f.close()


@pytest.fixture(scope="session")
def bwrap_factory(sandbox_rootfs):
    from clawgym.sandbox.bwrap.backend import BwrapFactory, available

    ok, why = available()
    if not ok:
        pytest.skip(f"bubblewrap cannot run here: {why}")
    f = BwrapFactory(_config())
    yield f
    f.close()


@pytest.fixture(scope="session")
def bwrap_perexec_factory(bwrap_factory):
    """bwrap with a fresh bwrap per exec (the fallback where server mode cannot run)."""
    from clawgym.sandbox.bwrap.backend import BwrapFactory

    f = BwrapFactory(_config(), server=False)
    yield f
    f.close()


@pytest.fixture(scope="session")
def local_factory():
    from clawgym.sandbox.local_backend import LocalFactory

    f = LocalFactory(_config())
    yield f
    f.close()


@pytest.fixture(scope="session")
def any_isolating_factory(request):
    """An isolating sandbox factory: bwrap when it works here (fast, no daemon), else docker."""
    from clawgym.sandbox.bwrap.backend import available

    if available()[0]:
        return request.getfixturevalue("bwrap_factory")
    return request.getfixturevalue("docker_factory")

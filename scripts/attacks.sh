#!/usr/bin/env bash
# The attack suite in one command: every test that plays an attacker against a defence (reward hacking, the hacker
# gate, the judge protocol, control tokens, the proxy's token ids and call ids, OpenClaw's proxy and forwarder,
# rollout bounds, untrusted input; tests/conftest.py ATTACK_MODULES), on docker and bwrap where the test is
# parametrized so. Extra arguments go to pytest (e.g. -k workspace_replaced, -x).
# Every attack names the rule it tests (tests/attack_rules.py); the run ends with the table rule -> attacks,
# held, failed, skipped, not run, and the rule's sentence (tests/conftest.py pytest_terminal_summary).
set -euo pipefail
cd "$(dirname "$0")/.."
set +e
CLAWGYM_ATTACK_TABLE=1 python3 -m pytest -q -ra -m attack "$@"
rc=$?
set -e
[ "$rc" -eq 5 ] && { echo "attacks.sh: no attack test collected" >&2; exit 1; }
exit "$rc"

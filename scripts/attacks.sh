#!/usr/bin/env bash
# The attack suite in one command: every test that plays an attacker against a defence (reward hacking, the hacker
# gate, the judge protocol, control tokens, the proxy's token ids and call ids, OpenClaw's proxy and forwarder,
# rollout bounds, untrusted input; tests/conftest.py ATTACK_MODULES), on docker and bwrap where the test is
# parametrized so. Extra arguments go to pytest (e.g. -k workspace_replaced, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
set +e
python3 -m pytest -q -ra -m attack "$@"
rc=$?
set -e
[ "$rc" -eq 5 ] && { echo "attacks.sh: no attack test collected" >&2; exit 1; }
exit "$rc"

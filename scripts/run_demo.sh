#!/usr/bin/env bash
# The main job: the whole clawgym graph at demo scale on embedded defaults (procedural tasks, oracle + noop +
# embedded SmolLM2 policies on a small bench, a few SFT steps), then the leaderboard.
# Runs are recorded in the Dagster instance at DAGSTER_HOME (default: the repo root, storage under data/dagster/),
# so `dagster dev` shows them afterwards. Run scripts/setup.sh once first.
#   scripts/run_demo.sh [--sft-steps N] [--bench-seeds N] [--no-models]
set -euo pipefail
cd "$(dirname "$0")/.."
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DAGSTER_DISABLE_TELEMETRY=1
export CLAWGYM_SANDBOX="${CLAWGYM_SANDBOX:-auto}"
mkdir -p data
if command -v clawgym >/dev/null 2>&1; then
  exec clawgym demo "$@"
fi
exec python -m clawgym.cli demo "$@"

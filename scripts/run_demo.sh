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
# this checkout's code, whichever clawgym is installed (an editable install of another clone would otherwise win
# for the `clawgym` console script and for the subprocesses the graph starts)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python -m clawgym.cli demo "$@"

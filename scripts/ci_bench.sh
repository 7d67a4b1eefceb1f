#!/usr/bin/env bash
# The CI scoring step, exactly as users run it: materialize the upstream assets on a small config, register a
# model partition, then `dagster asset materialize --select bench_scores --partition <model>`; print the leaderboard.
#   scripts/ci_bench.sh [MODEL ...]      (default: oracle noop)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DAGSTER_DISABLE_TELEMETRY=1
export DAGSTER_HOME=${CLAWGYM_CI_HOME:-$ROOT/data/ci-home}
export CLAWGYM_DATA=${CLAWGYM_CI_DATA:-$ROOT/data/ci-data}
[ -S /var/run/docker.sock ] && export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}
rm -rf "$DAGSTER_HOME" "$CLAWGYM_DATA"
mkdir -p "$DAGSTER_HOME"
cp dagster.yaml "$DAGSTER_HOME/"
models=("$@"); [ ${#models[@]} -gt 0 ] || models=(oracle noop)
cfg=$DAGSTER_HOME/run.yaml
cat > "$cfg" <<YAML
ops:
  synthetic_tasks: {config: {n: 24}}
YAML
m() {  # one `dagster asset materialize`; its event log goes to a file, shown only when the run fails
  local log; log=$(mktemp -p "$DAGSTER_HOME" materialize-XXXX.log)
  if ! (cd "$DAGSTER_HOME" && dagster asset materialize -m clawgym_assets.definitions "$@") >"$log" 2>&1; then
    tail -80 "$log"; echo "ci_bench: dagster asset materialize $* failed (full log: $log)"; return 1
  fi
  grep -E "ASSET_CHECK_EVALUATION|RUN_SUCCESS" "$log" | sed -E 's/^.* - (RUN_SUCCESS|ASSET_CHECK_EVALUATION) - /   /'
}
echo "==> upstream: personas, skills, synthetic tasks, workspaces, verifiers"
m --select '*verifiers' -c "$cfg"
echo "==> bench_tasks[procedural]"
m --select bench_tasks --partition procedural
for model in "${models[@]}"; do
  echo "==> bench_scores[$model]"
  (cd "$DAGSTER_HOME" && python3 -m clawgym.cli bench add "$model")
  m --select bench_scores --partition "$model"
done
m --select leaderboard
(cd "$DAGSTER_HOME" && python3 -m clawgym.cli bench leaderboard)

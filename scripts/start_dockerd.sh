#!/usr/bin/env bash
# Start a Docker engine when none answers (idempotent). Prints the DOCKER_HOST to use on stdout.
#   env: CLAWGYM_DOCKERD_LOG (default /var/log/clawgym-dockerd.log), CLAWGYM_DOCKERD_TIMEOUT (60 s)
# Usage: eval "export DOCKER_HOST=$(scripts/start_dockerd.sh)"
set -euo pipefail

SOCK="${CLAWGYM_DOCKER_SOCK:-/var/run/docker.sock}"
HOST="unix://$SOCK"
LOG="${CLAWGYM_DOCKERD_LOG:-/var/log/clawgym-dockerd.log}"
TIMEOUT="${CLAWGYM_DOCKERD_TIMEOUT:-60}"
log() { echo "[start_dockerd] $*" >&2; }

if [[ -n "${DOCKER_HOST:-}" ]] && docker info >/dev/null 2>&1; then
  echo "$DOCKER_HOST"; exit 0
fi
if DOCKER_HOST="$HOST" docker info >/dev/null 2>&1; then
  echo "$HOST"; exit 0
fi
command -v dockerd >/dev/null || { log "dockerd not installed (apt-get install docker.io)"; exit 1; }
[[ $(id -u) == 0 ]] || { log "starting dockerd needs root"; exit 1; }

# one starter at a time (tests and engineers may call this concurrently)
exec 9>/run/clawgym-dockerd.lock
flock -w "$TIMEOUT" 9 || { log "timed out waiting for another starter"; exit 1; }
if ! DOCKER_HOST="$HOST" docker info >/dev/null 2>&1; then
  if [[ -f /run/clawgym-dockerd.pid ]] && kill -0 "$(cat /run/clawgym-dockerd.pid)" 2>/dev/null; then
    log "dockerd (pid $(cat /run/clawgym-dockerd.pid)) is starting"
  else
    mkdir -p "$(dirname "$LOG")"
    log "starting dockerd (log: $LOG)"
    # setsid + nohup: the engine outlives this shell and the caller's Ctrl-C
    setsid nohup dockerd --host="$HOST" >>"$LOG" 2>&1 </dev/null &
    echo $! >/run/clawgym-dockerd.pid
  fi
  deadline=$((SECONDS + TIMEOUT))
  until DOCKER_HOST="$HOST" docker info >/dev/null 2>&1; do
    if ! kill -0 "$(cat /run/clawgym-dockerd.pid)" 2>/dev/null; then
      log "dockerd exited; last log lines:"; tail -20 "$LOG" >&2; exit 1
    fi
    if (( SECONDS >= deadline )); then
      log "dockerd did not answer within ${TIMEOUT}s; last log lines:"; tail -20 "$LOG" >&2; exit 1
    fi
    sleep 0.5
  done
  log "dockerd ready"
fi
echo "$HOST"

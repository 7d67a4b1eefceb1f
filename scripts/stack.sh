#!/usr/bin/env bash
# The production-shaped clawgym stack on one host (docs/DEPLOY.md):
#   Postgres (Debian package, run as the postgres user on 127.0.0.1:$CLAWGYM_PG_PORT, data in $STACK/pg),
#   dagster-daemon + dagster-webserver (background, pid files in $STACK), DockerRunLauncher launching every run
#   in a container of the project image (scripts/build_project_image.sh), QueuedRunCoordinator with a limit.
#
#   scripts/stack.sh up        start what is not running (idempotent); builds the project image when stale
#   scripts/stack.sh status    one line per component; exit 0 when everything runs, 3 otherwise
#   scripts/stack.sh down      stop everything: run containers, their sandboxes, daemon, webserver, Postgres;
#                              nothing (container, mount, process) is left; data stays ([--purge] removes $STACK)
#   scripts/stack.sh env       the environment a client needs (DAGSTER_HOME, DAGSTER_PG_PASSWORD, URL), to eval
#
# env: CLAWGYM_STACK_DIR (default <repo>/data/stack), CLAWGYM_DATA (the lake's data dir, default <repo>/data),
#      CLAWGYM_PG_PORT (55432), CLAWGYM_STACK_PORT (webserver, 3300), CLAWGYM_STACK_MAX_RUNS (run queue limit, 2),
#      CLAWGYM_STACK_POOL_LIMIT ("sandboxes" pool, 2), CLAWGYM_SHARDS (4), CLAWGYM_PROJECT_IMAGE,
#      CLAWGYM_STACK_BUILD=0 (do not build the image), CLAWGYM_PG_PASSWORD (else one is generated, 0600 file).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
STACK="$(realpath -m "${CLAWGYM_STACK_DIR:-$REPO/data/stack}")"
DATA_DIR="$(realpath -m "${CLAWGYM_DATA:-$REPO/data}")"
PG_PORT="${CLAWGYM_PG_PORT:-55432}"
WEB_PORT="${CLAWGYM_STACK_PORT:-3300}"
MAX_RUNS="${CLAWGYM_STACK_MAX_RUNS:-2}"
POOL_LIMIT="${CLAWGYM_STACK_POOL_LIMIT:-2}"
SHARDS="${CLAWGYM_SHARDS:-4}"
PROJECT_IMAGE="${CLAWGYM_PROJECT_IMAGE:-clawgym-project:latest}"
STACK_ID="$(printf '%s' "$STACK" | sha256sum | cut -c1-12)"
# Postgres' own files live outside the data root, which is owner-only (the postgres user may not enter
# it); one folder per stack dir, removed by `down --purge`
PGHOME="${CLAWGYM_PG_HOME:-/var/lib/clawgym/stack-pg/$STACK_ID}"
PGDATA="$PGHOME/pg"
PGRUN="$PGHOME/pg-run"  # unix socket dir + server log (owned by postgres)
PY="$(command -v python3)"
PYBIN="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")"
export DOCKER_HOST="${DOCKER_HOST:-unix:///var/run/docker.sock}"
log() { echo "[stack] $*" >&2; }

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [[ -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }; done
  return 1
}

pg_password() {
  if [[ -n "${CLAWGYM_PG_PASSWORD:-}" ]]; then echo "$CLAWGYM_PG_PASSWORD"; return; fi
  if [[ ! -s "$STACK/pg.secret" ]]; then
    (umask 077; "$PY" -c 'import secrets; print(secrets.token_hex(16))' >"$STACK/pg.secret.tmp")
    mv "$STACK/pg.secret.tmp" "$STACK/pg.secret"
  fi
  cat "$STACK/pg.secret"
}

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

pg_running() {
  local b
  b="$(pg_bin)" || return 1
  [[ -f "$PGDATA/postmaster.pid" ]] && runuser -u postgres -- "$b/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1
}

web_up() {
  "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=3).read()' \
    "http://127.0.0.1:$WEB_PORT/server_info" >/dev/null 2>&1
}

render() {  # deploy/<file> -> $STACK/home/<file> with every ${VAR} replaced
  local extra=""
  [[ -d /var/lib/clawgym ]] && extra="- /var/lib/clawgym:/var/lib/clawgym:ro"
  REPO="$REPO" STACK_DIR="$STACK" DATA_DIR="$DATA_DIR" PG_PORT="$PG_PORT" PROJECT_IMAGE="$PROJECT_IMAGE" \
  SANDBOX_BACKEND="${CLAWGYM_STACK_SANDBOX:-docker}" SHARDS="$SHARDS" STACK_ID="$STACK_ID" MAX_RUNS="$MAX_RUNS" \
  POOL_LIMIT="$POOL_LIMIT" EXTRA_VOLUMES="$extra" "$PY" -c '
import os, re, sys
src, dst = sys.argv[1], sys.argv[2]
text = re.sub(r"\$\{([A-Z_]+)\}", lambda m: os.environ[m.group(1)], open(src).read())
with open(dst + ".tmp", "w") as f:
    f.write(text)
os.replace(dst + ".tmp", dst)
' "$REPO/deploy/$1" "$STACK/home/$1"
}

client_env() {
  echo "export DAGSTER_HOME=$STACK/home"
  echo "export DAGSTER_PG_PASSWORD=$(pg_password)"
  echo "export CLAWGYM_STACK_URL=http://127.0.0.1:$WEB_PORT"
}

start_pg() {
  local b fresh=0
  if ! b="$(pg_bin)"; then
    log "PostgreSQL is not installed: apt-get install -y postgresql"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null
    b="$(pg_bin)"
  fi
  id postgres >/dev/null 2>&1 || { log "no postgres user (the postgresql package creates it)"; exit 1; }
  mkdir -p "$PGRUN"
  chown postgres: "$PGRUN"
  chmod 700 "$PGRUN"
  # the postgres user must reach $PGHOME (every parent searchable), else set CLAWGYM_PG_HOME elsewhere
  runuser -u postgres -- test -x "$PGHOME" || { log "the postgres user cannot reach $PGHOME"; exit 1; }
  if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    log "initdb $PGDATA"
    rm -rf "$PGDATA"
    mkdir -p "$PGDATA"
    chown postgres: "$PGDATA"
    chmod 700 "$PGDATA"
    runuser -u postgres -- "$b/initdb" -D "$PGDATA" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
      -E UTF8 --locale=C.UTF-8 >"$STACK/initdb.log" 2>&1 || { tail -20 "$STACK/initdb.log" >&2; exit 1; }
    fresh=1
  fi
  if ! pg_running; then
    log "postgres on 127.0.0.1:$PG_PORT"
    runuser -u postgres -- "$b/pg_ctl" -D "$PGDATA" -l "$PGRUN/postgres.log" -w -t 60 \
      -o "-p $PG_PORT -k $PGRUN -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null \
      || { tail -20 "$PGRUN/postgres.log" >&2; exit 1; }
  fi
  head -1 "$PGDATA/postmaster.pid" >"$STACK/pg.pid"
  if [[ $fresh == 1 ]] || ! runuser -u postgres -- psql -h "$PGRUN" -p "$PG_PORT" -tAc \
      "select 1 from pg_database where datname='dagster'" | grep -q 1; then
    runuser -u postgres -- psql -q -h "$PGRUN" -p "$PG_PORT" -v ON_ERROR_STOP=1 -v pw="$(pg_password)" >/dev/null <<'EOF'
SELECT format('CREATE ROLE clawgym LOGIN PASSWORD %L', :'pw') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname='clawgym') \gexec
SELECT 'CREATE DATABASE dagster OWNER clawgym' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname='dagster') \gexec
EOF
  fi
}

start_bg() {  # name, command...: own session (down stops the whole group), pid file, log; no inherited fds
  local name=$1
  shift
  if alive "$STACK/$name.pid"; then return 0; fi
  DAGSTER_HOME="$STACK/home" DAGSTER_PG_PASSWORD="$(pg_password)" CLAWGYM_DATA="$DATA_DIR" \
  CLAWGYM_SHARDS="$SHARDS" DAGSTER_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 PATH="$PYBIN:$PATH" \
  "$PY" -c '
import os, subprocess, sys
base, cmd = sys.argv[1], sys.argv[2:]
with open(base + ".log", "ab") as log:
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                         close_fds=True, cwd=os.environ["DAGSTER_HOME"])
with open(base + ".pid.tmp", "w") as f:
    f.write(str(p.pid))
os.replace(base + ".pid.tmp", base + ".pid")
' "$STACK/$name" "$@"
  log "$name started (pid $(cat "$STACK/$name.pid"), log $STACK/$name.log)"
}

up() {
  mkdir -p "$STACK/home" "$STACK/sbx" "$STACK/tmp" "$DATA_DIR"
  chmod 755 "$STACK"
  chmod 1777 "$STACK/tmp"
  DOCKER_HOST="$(bash scripts/start_dockerd.sh)"
  export DOCKER_HOST
  if [[ "${CLAWGYM_STACK_BUILD:-1}" != 0 ]]; then
    CLAWGYM_PROJECT_IMAGE="$PROJECT_IMAGE" bash scripts/build_project_image.sh >/dev/null
  fi
  docker image inspect "$PROJECT_IMAGE" >/dev/null 2>&1 || { log "no project image $PROJECT_IMAGE"; exit 1; }
  start_pg
  render dagster.yaml
  render workspace.yaml
  start_bg daemon "$PYBIN/dagster-daemon" run -w "$STACK/home/workspace.yaml"
  start_bg webserver "$PYBIN/dagster-webserver" -h 127.0.0.1 -p "$WEB_PORT" -w "$STACK/home/workspace.yaml"
  local deadline=$((SECONDS + ${CLAWGYM_STACK_TIMEOUT:-180}))
  until web_up; do
    alive "$STACK/webserver.pid" || { tail -30 "$STACK/webserver.log" >&2; log "webserver exited"; exit 1; }
    (( SECONDS < deadline )) || { tail -30 "$STACK/webserver.log" >&2; log "webserver did not answer"; exit 1; }
    sleep 1
  done
  alive "$STACK/daemon.pid" || { tail -30 "$STACK/daemon.log" >&2; log "daemon exited"; exit 1; }
  log "up: http://127.0.0.1:$WEB_PORT (DAGSTER_HOME=$STACK/home, image $PROJECT_IMAGE, queue limit $MAX_RUNS)"
}

stop_group() {  # pid file: TERM the process group, then KILL what is left of the session
  local f="$STACK/$1.pid" pid p
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  kill -KILL -- "-$pid" 2>/dev/null || true
  for p in $(ps -e -o pid=,sid= | awk -v s="$pid" '$2 == s {print $1}'); do kill -KILL "$p" 2>/dev/null || true; done
  rm -f "$f"
}

down() {
  local b ids
  stop_group daemon
  stop_group webserver
  if docker info >/dev/null 2>&1; then
    ids="$(docker ps -aq --filter "label=clawgym.stack=$STACK_ID")"
    if [[ -n "$ids" ]]; then docker rm -f -v $ids >/dev/null; fi
    # sandboxes the run containers started (their owners are gone now): orphans, state dirs in $STACK/sbx
    "$PY" -m clawgym.sandbox.host.cleanup --state-root "$STACK/sbx" >/dev/null 2>&1 || true
  fi
  if b="$(pg_bin)" && [[ -f "$PGDATA/postmaster.pid" ]]; then
    runuser -u postgres -- "$b/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  fi
  if [[ -f "$STACK/pg.pid" ]] && kill -0 "$(cat "$STACK/pg.pid")" 2>/dev/null; then
    kill -KILL "$(cat "$STACK/pg.pid")" 2>/dev/null || true
  fi
  rm -f "$STACK/pg.pid"
  # mounts under the stack dir (launched runs make none: plain state dirs), then the scratch dirs
  awk -v t="$STACK/" 'index($2, t) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf --one-file-system "$STACK/sbx" "$STACK/tmp"
  if [[ "${1:-}" == --purge ]]; then rm -rf --one-file-system "$STACK" "$PGHOME"; fi
  log "down"
}

status() {
  local rc=0 n c
  if pg_running; then echo "postgres   running  127.0.0.1:$PG_PORT pid $(cat "$STACK/pg.pid" 2>/dev/null)"
  else echo "postgres   stopped"; rc=3; fi
  for c in daemon webserver; do
    if alive "$STACK/$c.pid"; then printf '%-10s running  pid %s\n' "$c" "$(cat "$STACK/$c.pid")"
    else printf '%-10s stopped\n' "$c"; rc=3; fi
  done
  if web_up; then echo "ui         http://127.0.0.1:$WEB_PORT"; else echo "ui         not answering"; rc=3; fi
  n="$(docker ps -q --filter "label=clawgym.stack=$STACK_ID" 2>/dev/null | wc -l)"
  echo "runs       $n run container(s) running (label clawgym.stack=$STACK_ID)"
  return $rc
}

case "${1:-}" in
  up) up ;;
  down) shift; down "$@" ;;
  status) status ;;
  env) client_env ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac

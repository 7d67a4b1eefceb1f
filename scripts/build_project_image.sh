#!/usr/bin/env bash
# Build the clawgym PROJECT image (what DockerRunLauncher starts each Dagster run in) offline: no registry,
# no pip download. Two layers, each rebuilt only when its input changed:
#   1. $CLAWGYM_PROJECT_BASE (clawgym-project-base:<hash>): `docker import` of one tar stream holding the
#      sandbox's debootstrapped Debian root ($CLAWGYM_ROOTFS, scripts/build_sandbox_image.sh) plus this host's
#      Python prefix (sys.prefix, e.g. /root/.pyenv/versions/3.11.7, with every installed dependency) AT THE
#      SAME PATH. The hash covers `pip freeze`, the interpreter and the rootfs stamp.
#   2. $CLAWGYM_PROJECT_IMAGE (clawgym-project:latest): the repository's files (git: tracked + untracked
#      non-ignored; never data/ or tools/) copied onto layer 1 by the classic builder (`docker build -` from a
#      tar on stdin, FROM a local image: nothing is pulled) AT THE REPOSITORY'S OWN PATH, so code-location
#      origins (working_directory, the interpreter path, the editable install) are valid in host and container.
# Usage: scripts/build_project_image.sh [--force]      prints the image name on stdout
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
IMAGE="${CLAWGYM_PROJECT_IMAGE:-clawgym-project:latest}"
ROOTFS="${CLAWGYM_ROOTFS:-/var/lib/clawgym/rootfs}"
PY="${CLAWGYM_PROJECT_PYTHON:-python3}"
FORCE=0
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
log() { echo "[build_project_image] $*" >&2; }
export DOCKER_BUILDKIT=0  # the classic builder: FROM a local image, never a registry lookup

docker info >/dev/null 2>&1 || { log "no Docker engine answers (run scripts/start_dockerd.sh)"; exit 1; }
[[ -f "$ROOTFS/.clawgym-stamp" ]] || { log "no sandbox rootfs at $ROOTFS (run scripts/build_sandbox_image.sh)"; exit 1; }
prefix="$("$PY" -c 'import sys; print(sys.prefix)')"
exe="$("$PY" -c 'import sys; print(sys.executable)')"
[[ "$prefix" == /* && "$prefix" != / ]] || { log "unusable python prefix: $prefix"; exit 1; }

# ---- layer 1: Debian root + the Python prefix --------------------------------------------------------------
base_hash="$({ "$PY" -m pip freeze --all 2>/dev/null; "$PY" -VV; echo "$prefix"; cat "$ROOTFS/.clawgym-stamp"; echo v1; } \
  | sha256sum | cut -c1-16)"
BASE="${CLAWGYM_PROJECT_BASE:-clawgym-project-base:$base_hash}"
if [[ $FORCE == 0 ]] && docker image inspect "$BASE" >/dev/null 2>&1; then
  log "base $BASE up to date"
else
  t0=$SECONDS
  log "docker import $ROOTFS + $prefix -> $BASE"
  # one archive from two roots (GNU tar: -C applies to the names after it); caches and stale bytecode of
  # the rootfs stay out
  tar --numeric-owner -c -C "$ROOTFS" --exclude=./var/cache/apt --exclude=./var/lib/apt/lists . \
      -C / --exclude='*/pip/_vendor/*/__pycache__' "${prefix#/}" \
    | docker import \
      -c "ENV PATH=$prefix/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
      -c 'ENV LANG=C.UTF-8' -c 'ENV HF_HUB_OFFLINE=1' -c 'ENV TRANSFORMERS_OFFLINE=1' \
      -c 'ENV DAGSTER_DISABLE_TELEMETRY=1' \
      -c "LABEL clawgym.project.base=$base_hash" -c "LABEL clawgym.python=$exe" \
      - "$BASE" >/dev/null
  log "base ready in $((SECONDS - t0)) s"
fi

# ---- layer 2: the code -------------------------------------------------------------------------------------
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [[ -f "$f" && ! -L "$f" ]] && printf '%s\0' "$f"
done >"$ctx/files"
code_hash="$( { tr '\0' '\n' <"$ctx/files" | sort | tr '\n' '\0' | xargs -0 sha256sum; echo "$BASE"; } | sha256sum | cut -c1-16)"
have="$(docker image inspect -f '{{ index .Config.Labels "clawgym.project.code" }}' "$IMAGE" 2>/dev/null || true)"
prune_old() {  # earlier builds (3+ GB each): untagged code layers, then bases other than $BASE, if unused
  docker image prune -f --filter "label=clawgym.project.base" >/dev/null 2>&1 || true
  local b
  for b in $(docker images --format '{{.Repository}}:{{.Tag}}' "${BASE%%:*}" 2>/dev/null); do
    [[ "$b" == "$BASE" ]] || docker rmi "$b" >/dev/null 2>&1 || true
  done
  docker image prune -f --filter "label=clawgym.project.base" >/dev/null 2>&1 || true
}
if [[ $FORCE == 0 && "$have" == "$code_hash" ]]; then
  log "image $IMAGE up to date"
  prune_old
  echo "$IMAGE"
  exit 0
fi
cat >"$ctx/Dockerfile" <<EOF
FROM $BASE
COPY src/ $REPO/
WORKDIR $REPO
LABEL clawgym.project.code=$code_hash clawgym.project.repo=$REPO
CMD ["dagster", "--help"]
EOF
t0=$SECONDS
# the context on stdin: Dockerfile at the top, the repository's files under src/
tar --numeric-owner -c -C "$ctx" Dockerfile -C "$REPO" --null -T "$ctx/files" \
    --transform 's,^,src/,;s,^src/Dockerfile$,Dockerfile,' \
  | docker build -q -t "$IMAGE" - >"$ctx/build.log" 2>&1 \
  || { tail -30 "$ctx/build.log" >&2; log "docker build of $IMAGE failed"; exit 1; }
log "image $IMAGE ready in $((SECONDS - t0)) s (code $code_hash on $BASE)"
prune_old
echo "$IMAGE"

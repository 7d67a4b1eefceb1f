#!/usr/bin/env bash
# Build the clawgym sandbox base environment offline (no image registry needed):
#   1. debootstrap a minimal Debian bookworm with python3 (+yaml, pytest), git, make, nodejs, bash
#      into --rootfs / $CLAWGYM_ROOTFS (default /var/lib/clawgym/rootfs). Idempotent: skipped when the stamp
#      file records the same package list. The bwrap backend uses this root read-only as /.
#   2. when a Docker engine answers: `docker import` it as --image / $CLAWGYM_IMAGE (clawgym-sandbox:latest),
#      skipped when the image already carries the same stamp label.
# The online alternative is clawgym/sandbox/docker/Dockerfile (FROM python:3.11-slim).
# Usage: scripts/build_sandbox_image.sh [--rootfs-only] [--force] [--rootfs DIR] [--image NAME]
# Prints what it uses on stdout (clawgym.sandbox.images reads it): rootfs=<dir>, then image=<name> (not with
# --rootfs-only). Progress goes to stderr.
set -euo pipefail

ROOTFS="${CLAWGYM_ROOTFS:-/var/lib/clawgym/rootfs}"
IMAGE="${CLAWGYM_IMAGE:-clawgym-sandbox:latest}"
SUITE="${CLAWGYM_SUITE:-bookworm}"
MIRROR="${CLAWGYM_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-yaml,python3-pytest,git,make,nodejs,bash,coreutils,procps,ca-certificates"
STAMP="suite=$SUITE packages=$PACKAGES v=2"
ROOTFS_ONLY=0
FORCE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rootfs-only) ROOTFS_ONLY=1 ;;
    --force) FORCE=1 ;;
    --rootfs) [[ $# -ge 2 && -n "$2" ]] || { echo "--rootfs needs a directory" >&2; exit 2; }; ROOTFS="$2"; shift ;;
    --image) [[ $# -ge 2 && -n "$2" ]] || { echo "--image needs a name" >&2; exit 2; }; IMAGE="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
STAMP_FILE="$ROOTFS/.clawgym-stamp"

log() { echo "[build_sandbox_image] $*" >&2; }

if [[ $FORCE == 0 && -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$STAMP" ]]; then
  log "rootfs $ROOTFS up to date"
else
  command -v debootstrap >/dev/null || { log "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
  [[ $(id -u) == 0 ]] || { log "debootstrap needs root"; exit 1; }
  parent="$(dirname "$ROOTFS")"
  mkdir -p "$parent"
  tmp="$(mktemp -d "$parent/.rootfs-build.XXXXXX")"
  cleanup_tmp() {  # an interrupted debootstrap may leave proc/sys/dev mounted inside the target
    awk -v t="$tmp/" 'index($2, t) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf --one-file-system "$tmp"
  }
  trap cleanup_tmp EXIT
  log "debootstrap $SUITE into $tmp (packages: $PACKAGES)"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp" "$MIRROR" >"$parent/debootstrap.log" 2>&1 \
    || { tail -30 "$parent/debootstrap.log" >&2; log "debootstrap failed (log: $parent/debootstrap.log)"; exit 1; }
  # slim it down: apt caches, docs, man pages
  rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/* "$tmp"/usr/share/doc/* \
         "$tmp"/usr/share/man/* "$tmp"/usr/share/locale/* 2>/dev/null || true
  # the sandbox user (uid 1000) and the workspace mount point
  if ! grep -q '^sandbox:' "$tmp/etc/passwd"; then
    echo 'sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/bash' >>"$tmp/etc/passwd"
    echo 'sandbox:x:1000:' >>"$tmp/etc/group"
  fi
  mkdir -p "$tmp/root/.openclaw/workspace" "$tmp/home/sandbox"
  chmod 755 "$tmp/root"
  "$tmp/usr/bin/python3" --version >/dev/null 2>&1 || true
  chroot "$tmp" /usr/bin/python3 -c 'import yaml, pytest' || { log "python3 yaml/pytest missing in rootfs"; exit 1; }
  chmod 755 "$tmp"  # readable by the unprivileged bwrap user
  echo "$STAMP" >"$tmp/.clawgym-stamp"
  if [[ -e "$ROOTFS" ]]; then
    old="$(mktemp -d "$parent/.rootfs-old.XXXXXX")"
    mv "$ROOTFS" "$old/r"
    mv "$tmp" "$ROOTFS"
    rm -rf --one-file-system "$old"
  else
    mv "$tmp" "$ROOTFS"
  fi
  trap - EXIT
  log "rootfs ready: $ROOTFS ($(du -sh "$ROOTFS" | cut -f1))"
fi

echo "rootfs=$ROOTFS"
[[ $ROOTFS_ONLY == 1 ]] && exit 0
echo "image=$IMAGE"

if ! docker info >/dev/null 2>&1; then
  log "no Docker engine answers; rootfs built, image not imported (run scripts/start_dockerd.sh first)"
  exit 0
fi
stamp_hash="$(sha256sum "$STAMP_FILE" | cut -c1-16)"
have="$(docker image inspect -f '{{ index .Config.Labels "clawgym.stamp" }}' "$IMAGE" 2>/dev/null || true)"
if [[ $FORCE == 0 && "$have" == "$stamp_hash" ]]; then
  log "image $IMAGE up to date"
  exit 0
fi
log "docker import $ROOTFS -> $IMAGE"
tar -C "$ROOTFS" --numeric-owner -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV LANG=C.UTF-8' \
  -c "LABEL clawgym.stamp=$stamp_hash" \
  -c 'CMD ["sleep", "infinity"]' \
  - "$IMAGE" >/dev/null
log "image ready: $IMAGE"

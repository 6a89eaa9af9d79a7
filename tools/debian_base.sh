#!/usr/bin/env bash
# Build a Debian bookworm base image with python3 from Debian's own packages, for machines that reach
# Debian's mirrors but no container registry (no python:3.11-slim to pull). About a minute; skipped when
# the image exists (--force rebuilds). Needs root, debootstrap and podman (tools/podman_setup.sh).
# Usage: tools/debian_base.sh [--force] [IMAGE]     (default IMAGE: localhost/rocksidecar-base:bookworm)
# Also builds IMAGE's busybox variant, localhost/rocksidecar-busybox:bookworm (the Helm chart's example
# app runs `sh -c` with wget; busybox:1.36 comes from a registry too).
set -euo pipefail

force=false
if [ "${1:-}" = --force ]; then force=true; shift; fi
IMAGE=${1:-localhost/rocksidecar-base:bookworm}
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-localhost/rocksidecar-busybox:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

say() { echo "debian_base: $*"; }
have() { podman image exists "$1"; }

if ! $force && have "$IMAGE" && have "$BUSYBOX_IMAGE"; then
  say "$IMAGE and $BUSYBOX_IMAGE exist (--force rebuilds)"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "debian_base: debootstrap needs root" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
start=$(date +%s)
say "debootstrap bookworm from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,busybox-static bookworm \
  "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
# Nothing an image needs: downloaded .debs, package lists, documentation, translations.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
# The busybox variant: the static busybox with its applets as commands (wget, sh, date, sleep), and
# nothing else; the base image itself does not keep it.
bb="$work/busybox"
mkdir -p "$bb/bin" "$bb/tmp" "$bb/etc"
mv "$root/bin/busybox" "$bb/bin/busybox"
for applet in sh wget date sleep echo cat ls; do ln -s busybox "$bb/bin/$applet"; done
chmod 1777 "$bb/tmp"
tar -C "$root" -c . | podman import --quiet --change 'CMD=["/bin/bash"]' - "$IMAGE" >/dev/null
cp "$root/etc/passwd" "$root/etc/group" "$bb/etc/"
tar -C "$bb" -c . | podman import --quiet --change 'CMD=["/bin/sh"]' --change 'ENV=PATH=/bin' - "$BUSYBOX_IMAGE" >/dev/null
say "built $IMAGE ($(podman image inspect -f '{{.Size}}' "$IMAGE") bytes) and $BUSYBOX_IMAGE in $(($(date +%s) - start)) s"

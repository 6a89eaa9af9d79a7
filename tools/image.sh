#!/usr/bin/env bash
# `make image`: build docker/Dockerfile as rocksidecar:<version> (and :latest), with OCI labels.
#  - engine: $ENGINE (docker or podman) when set, else docker when its daemon answers, else podman (set
#    up by tools/podman_setup.sh);
#  - base: $PYTHON_IMAGE when set; else the official python:3.11-slim-bookworm when present or pullable;
#    else a Debian base built here from Debian's packages (tools/debian_base.sh; no registry needed);
#  - CA_BUNDLE=<file> (podman only): mount that CA bundle read-only over the same path in the build
#    containers, for networks that reach PyPI through a TLS-intercepting proxy. Off by default; it
#    selects podman when ENGINE is unset.
# Prints the engine, base, build time and image size on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

OFFICIAL=docker.io/library/python:3.11-slim-bookworm  # fully qualified: podman asks about short names
LOCAL_BASE=localhost/rocksidecar-base:bookworm
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -1)
IMAGE=${IMAGE:-rocksidecar}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if ! git diff --quiet HEAD -- 2>/dev/null; then REVISION="$REVISION-dirty"; fi
SOURCE=${SOURCE:-$(git remote get-url origin 2>/dev/null || echo unknown)}

say() { echo "image: $*"; }
die() { echo "image: $*" >&2; exit 2; }

# Bad input is refused before anything is installed or built.
case ${ENGINE:-} in
  "" | docker | podman) ;;
  *) die "ENGINE must be docker or podman, not $ENGINE" ;;
esac
if [ -n "${CA_BUNDLE:-}" ]; then
  [ -f "$CA_BUNDLE" ] || die "CA_BUNDLE=$CA_BUNDLE is not a file"
  [ "${ENGINE:-podman}" = podman ] || die "CA_BUNDLE works with podman only (docker build has no volumes)"
fi

if [ -n "${ENGINE:-}" ]; then
  engine=$ENGINE
elif [ -z "${CA_BUNDLE:-}" ] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  engine=docker
else
  engine=podman
fi
[ $engine = docker ] || bash tools/podman_setup.sh

base=${PYTHON_IMAGE:-}
if [ -z "$base" ]; then
  if $engine image inspect "$OFFICIAL" >/dev/null 2>&1 || timeout 60 $engine pull -q "$OFFICIAL" >/dev/null 2>&1; then
    base=$OFFICIAL
  elif [ $engine = podman ]; then
    say "$OFFICIAL cannot be pulled (no registry reachable?): using a local Debian base"
    bash tools/podman_setup.sh --with-debootstrap >/dev/null
    bash tools/debian_base.sh "$LOCAL_BASE"
    base=$LOCAL_BASE
  else
    echo "image: $OFFICIAL cannot be pulled; set PYTHON_IMAGE to a Python 3.11 image you have" >&2
    exit 1
  fi
fi

args=(build -f docker/Dockerfile -t "$IMAGE:$VERSION" -t "$IMAGE:latest"
  --build-arg "PYTHON_IMAGE=$base" --build-arg "VERSION=$VERSION"
  --build-arg "REVISION=$REVISION" --build-arg "SOURCE=$SOURCE")
if [ $engine = podman ]; then
  # Podman's default OCI format drops HEALTHCHECK; the docker format keeps it.
  args+=(--format docker)
  if [ -n "${CA_BUNDLE:-}" ]; then args+=(-v "$CA_BUNDLE:$CA_BUNDLE:ro"); fi
fi

start=$(date +%s)
$engine "${args[@]}" .
seconds=$(($(date +%s) - start))
size=$($engine image inspect -f '{{.Size}}' "$IMAGE:$VERSION")
say "engine=$engine base=$base image=$IMAGE:$VERSION build_s=$seconds size_mb=$((size / 1000000))"

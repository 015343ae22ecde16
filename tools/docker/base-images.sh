#!/usr/bin/env bash
# Makes the base images the compose stack tests build our Dockerfiles on, without a registry:
#
#   otel-valgen-local/bookworm   Debian bookworm (debootstrap minbase) with python3, venv,
#                                wget and CA certificates: stands in for python:3.11-slim and
#                                alpine (the runtime stages need a shell, wget and python)
#   otel-valgen-local/golang     the same plus this machine's Go toolchain: stands in for golang
#
# Both trust the CA certificates this machine added (/usr/local/share/ca-certificates), so that
# builds on the host network reach PyPI and the Go module proxy as the host does, also through
# a TLS-intercepting proxy.
#
#   bash tools/docker/base-images.sh
#
# Needs root, debootstrap and a Docker engine (tools/docker/engine.sh). Idempotent: an image
# that exists is kept. Users building the Dockerfiles get the official images by default.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DOCKER="$(bash "$ROOT/tools/docker/client.sh")"
SUITE="bookworm"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="ca-certificates,wget,python3,python3-venv,python-is-python3"
ROOTFS="otel-valgen-local/bookworm-rootfs:latest"
BASE="otel-valgen-local/bookworm:latest"
GOLANG="otel-valgen-local/golang:latest"

exists() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

if exists "$ROOTFS"; then
  echo "base-images.sh: $ROOTFS exists"
else
  start=$SECONDS
  rootfs="$(mktemp -d "${TMPDIR:-/tmp}/valgen-rootfs.XXXXXX")"
  trap 'rm -rf "$rootfs"' EXIT
  echo "base-images.sh: debootstrap $SUITE (minbase + $PACKAGES)"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 ||
    { tail -n 30 "$rootfs.log" >&2; exit 1; }
  rm -f "$rootfs.log"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | "$DOCKER" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$ROOTFS" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  echo "base-images.sh: $ROOTFS made in $((SECONDS - start))s"
fi

if exists "$BASE"; then
  echo "base-images.sh: $BASE exists"
else
  certs="$(mktemp -d "${TMPDIR:-/tmp}/valgen-certs.XXXXXX")"
  trap 'rm -rf "$certs"' EXIT
  cp /usr/local/share/ca-certificates/*.crt "$certs/" 2>/dev/null || true
  echo "base-images.sh: $BASE from $ROOTFS with $(find "$certs" -name '*.crt' | wc -l) CA certificate(s) of this machine"
  DOCKER_BUILDKIT=1 "$DOCKER" build --quiet --network host -t "$BASE" \
    --build-arg "ROOTFS_IMAGE=$ROOTFS" -f "$ROOT/tools/docker/base.Dockerfile" "$certs" >/dev/null
  rm -rf "$certs"
  trap - EXIT
fi

if exists "$GOLANG"; then
  echo "base-images.sh: $GOLANG exists"
else
  goroot="$(go env GOROOT)"
  echo "base-images.sh: $GOLANG from $BASE and $(go version | cut -d' ' -f3) ($goroot)"
  DOCKER_BUILDKIT=1 "$DOCKER" build --quiet --network host -t "$GOLANG" \
    --build-arg "BASE_IMAGE=$BASE" -f "$ROOT/tools/docker/golang.Dockerfile" "$goroot" >/dev/null
fi

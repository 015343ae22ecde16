#!/usr/bin/env bash
# Builds build/otelcol-valgen, the otel-valgen collector distribution, with the pinned
# OpenTelemetry Collector Builder. Idempotent: does nothing when the binary is newer than the
# manifest and the sources of the processor and the connector. Set OTELCOL_VALGEN_FORCE_BUILD=1
# to rebuild anyway.
set -euo pipefail

BUILDER_VERSION="v0.161.0"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MANIFEST="collector/builder-config.yaml"
BIN="build/otelcol-valgen"
DIST_BIN="build/otelcol-valgen-dist/otelcol-valgen"
TOOLS="$ROOT/build/tools"
BUILDER="$TOOLS/builder-$BUILDER_VERSION"

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: the Go toolchain (go 1.26 or newer) is required" >&2
  exit 1
fi

# Up to date: the binary is newer than the manifest, this script and every source of the
# components built from this repository.
if [[ -x "$BIN" && "${OTELCOL_VALGEN_FORCE_BUILD:-0}" != "1" ]]; then
  newer="$(find "$MANIFEST" collector/build.sh collector/valgensamplerprocessor collector/valgenspanconnector \
    -path '*/testdata' -prune -o -type f ! -name '*_test.go' \
    \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name '*.yaml' -o -name '*.sh' \) \
    -newer "$BIN" -print -quit)"
  if [[ -z "$newer" ]]; then
    echo "build.sh: $BIN is up to date"
    exit 0
  fi
fi

mkdir -p "$TOOLS"
if [[ ! -x "$BUILDER" ]]; then
  echo "build.sh: installing the collector builder $BUILDER_VERSION"
  tmp="$(mktemp -d)"
  GOBIN="$tmp" go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION"
  mv "$tmp/builder" "$BUILDER"
  rmdir "$tmp"
fi

# Static, like the collector's own releases and our image: the host build then fills the Go
# cache that the image's build stage and tests/deploy/test_build_contexts.py use.
export CGO_ENABLED="${CGO_ENABLED:-0}"

echo "build.sh: building $BIN"
start=$SECONDS
"$BUILDER" --config "$MANIFEST"
cp "$DIST_BIN" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "build.sh: built $BIN in $((SECONDS - start))s"
"$BIN" --version

#!/usr/bin/env bash
# Regenerates a component's mdatagen code (internal/metadata, documentation.md, ...) from its
# metadata.yaml with mdatagen v0.161.0.
# Usage: bash collector/mdatagen.sh [component directory under collector/]
#        (default valgensamplerprocessor; e.g. valgenspanconnector) `go install .../mdatagen@v0.161.0` does not work here:
# its go.mod has local replace directives and its internal/schemagen v0.161.0 is not served by
# the Go module proxy, so this builds it from the module cache with schemagen v0.159.0.
set -euo pipefail

VERSION="v0.161.0"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOL="$ROOT/build/tools/mdatagen-$VERSION"

if [[ ! -x "$TOOL" ]]; then
  go mod download "go.opentelemetry.io/collector/cmd/mdatagen@$VERSION"
  src="$(go env GOMODCACHE)/go.opentelemetry.io/collector/cmd/mdatagen@$VERSION"
  work="$ROOT/build/mdatagen-src"
  rm -rf "$work"
  cp -r "$src" "$work"
  chmod -R u+w "$work"
  (
    cd "$work"
    sed -i '/^replace /d' go.mod
    go mod edit -replace go.opentelemetry.io/collector/internal/schemagen=go.opentelemetry.io/collector/internal/schemagen@v0.159.0
    GOFLAGS=-mod=mod go build -o "$TOOL" .
  )
fi
COMPONENT="${1:-valgensamplerprocessor}"
cd "$ROOT/collector/$COMPONENT"
"$TOOL" metadata.yaml
echo "mdatagen.sh: regenerated from collector/$COMPONENT/metadata.yaml"

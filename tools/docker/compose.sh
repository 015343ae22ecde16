#!/usr/bin/env bash
# Builds Docker Compose v2 (the `docker compose` plugin, as a standalone binary) from the Go
# module proxy into build/tools/docker-compose, for the compose stack tests, and links it as the
# Docker CLI's plugin in build/tools/docker-config/cli-plugins, so that `docker compose` works with
# DOCKER_CONFIG=build/tools/docker-config (the stack test runs the README's command that way; the
# machine's own Docker configuration is not touched). Idempotent.
#
#   bash tools/docker/compose.sh
#
# Compose's go.mod has exclude directives, so `go install module@version` refuses it; the
# module is downloaded and built as the main module instead.
set -euo pipefail

COMPOSE_VERSION="v2.40.3"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$ROOT/build/tools"
BIN="$OUT/docker-compose"
STAMP="$OUT/docker-compose.version"

PLUGINS="$OUT/docker-config/cli-plugins"
mkdir -p "$PLUGINS"
ln -sfn ../../docker-compose "$PLUGINS/docker-compose"

if [[ -x "$BIN" && "$(cat "$STAMP" 2>/dev/null)" == "$COMPOSE_VERSION" ]]; then
  echo "compose.sh: docker-compose $COMPOSE_VERSION is up to date"
  exit 0
fi
mkdir -p "$OUT"
start=$SECONDS
echo "compose.sh: building docker-compose $COMPOSE_VERSION from the Go module proxy"
dir="$(cd "$OUT" && go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
(cd "$dir" && CGO_ENABLED=0 go build -trimpath -o "$BIN.tmp" \
  -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" ./cmd)
mv "$BIN.tmp" "$BIN"
echo "$COMPOSE_VERSION" >"$STAMP"
echo "compose.sh: built in $((SECONDS - start))s: $("$BIN" version)"

#!/usr/bin/env bash
# Prints the Docker client the tools and tests use: $DOCKER if set, else Debian's client
# (/usr/bin/docker, which builds with BuildKit without the buildx plugin), else `docker`.
set -euo pipefail
if [[ -n "${DOCKER:-}" ]]; then
  echo "$DOCKER"
elif [[ -x /usr/bin/docker ]]; then
  echo /usr/bin/docker
else
  command -v docker || echo docker
fi

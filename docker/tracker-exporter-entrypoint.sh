#!/bin/sh
# Starts `otel-valgen exporter` with the given arguments. With no WANDB_API_KEY and no
# WANDB_MODE in the environment, the service writes offline runs under $WANDB_DIR (sync
# them later with `wandb sync`) instead of failing to log in. The key is never printed.
set -eu
if [ -z "${WANDB_API_KEY:-}" ] && [ -z "${WANDB_MODE:-}" ]; then
  export WANDB_MODE=offline
  echo "tracker-exporter: WANDB_API_KEY is not set; writing offline runs under ${WANDB_DIR:-.}" >&2
fi
exec otel-valgen exporter "$@"

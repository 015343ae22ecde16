#!/bin/sh
# Starts otelcol-valgen with the given arguments, after naming the deprecated variables the
# environment still sets. collector-config/collector.yaml reads VALGEN_WANDB_EXPORTER_ENDPOINT
# and VALGEN_WANDB_EXPORTER_INSECURE only when their replacements VALGEN_TRACKER_EXPORTER_* are
# unset (`${env:NEW:-${env:OLD:-default}}`); the collector itself does not say which it used.
set -eu
deprecated() {
  # $1 the deprecated name, $2 its replacement, $3 "set" when the replacement is set
  if [ "$3" = set ]; then
    echo "collector: $1 is deprecated and ignored, $2 is set" >&2
  else
    echo "collector: $1 is deprecated, set $2 instead (using $1 for now)" >&2
  fi
}
if [ -n "${VALGEN_WANDB_EXPORTER_ENDPOINT+set}" ]; then
  deprecated VALGEN_WANDB_EXPORTER_ENDPOINT VALGEN_TRACKER_EXPORTER_ENDPOINT "${VALGEN_TRACKER_EXPORTER_ENDPOINT+set}"
fi
if [ -n "${VALGEN_WANDB_EXPORTER_INSECURE+set}" ]; then
  deprecated VALGEN_WANDB_EXPORTER_INSECURE VALGEN_TRACKER_EXPORTER_INSECURE "${VALGEN_TRACKER_EXPORTER_INSECURE+set}"
fi
# The exporter to the exporter service was otlp_grpc/wandb; its persistent sending queue, the
# steps not yet delivered, is a file named after the component. Hand it to otlp_grpc/trackers
# once, before the collector opens either, so that an upgrade delivers what it had queued.
queue="${VALGEN_STATE_DIR:-}/queue"
if [ -n "${VALGEN_STATE_DIR:-}" ] && [ -f "$queue/exporter_otlp_grpc_wandb_logs" ] \
  && [ ! -e "$queue/exporter_otlp_grpc_trackers_logs" ]; then
  mv "$queue/exporter_otlp_grpc_wandb_logs" "$queue/exporter_otlp_grpc_trackers_logs"
  echo "collector: moved the otlp_grpc/wandb sending queue to otlp_grpc/trackers (the exporter's new id)" >&2
fi
exec otelcol-valgen "$@"

#!/usr/bin/env bash
# Validates every shipped collector configuration with the built distribution.
# Usage: bash collector/validate.sh   (after collector/build.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="build/otelcol-valgen"
if [[ ! -x "$BIN" ]]; then
  echo "validate.sh: $BIN is missing; run 'make collector' first" >&2
  exit 1
fi

# auth.yaml fails fast without a token; a placeholder lets the overlay itself be validated.
export VALGEN_AUTH_TOKEN="${VALGEN_AUTH_TOKEN:-validate-only-token}"
# The resolver overlays need the samplers' name (validate builds the pipelines).
export VALGEN_SAMPLER_SERVICE="${VALGEN_SAMPLER_SERVICE:-samplers.otel-valgen}"
# Weave's endpoint has no default (it is not on this machine): a placeholder to validate with.
export VALGEN_WEAVE_TRACES_ENDPOINT="${VALGEN_WEAVE_TRACES_ENDPOINT:-https://trace.wandb.ai/otel/v1/traces}"

# Each line is one collector invocation: the --config files it merges, in order.
configs=(
  "collector-config/collector.yaml"
  "collector-config/agent.yaml"
  "collector-config/collector.yaml collector-config/sampler.yaml"
  "collector-config/collector.yaml collector-config/auth.yaml"
  "collector-config/collector.yaml collector-config/sampler.yaml collector-config/auth.yaml"
  "collector-config/agent.yaml collector-config/auth.yaml"
  "collector-config/agent.yaml collector-config/agent-dns.yaml"
  "collector-config/agent.yaml collector-config/agent-k8s.yaml"
  # The trace UI overlays: each on the single collector, one on a sampler, all of them at once.
  "collector-config/collector.yaml collector-config/traces-mlflow.yaml"
  "collector-config/collector.yaml collector-config/traces-weave.yaml"
  "collector-config/collector.yaml collector-config/traces-phoenix.yaml"
  "collector-config/collector.yaml collector-config/traces-langfuse.yaml"
  "collector-config/collector.yaml collector-config/traces-tempo.yaml"
  "collector-config/collector.yaml collector-config/sampler.yaml collector-config/traces-mlflow.yaml"
  "collector-config/collector.yaml collector-config/auth.yaml collector-config/traces-mlflow.yaml collector-config/traces-weave.yaml collector-config/traces-phoenix.yaml collector-config/traces-langfuse.yaml collector-config/traces-tempo.yaml"
)
status=0
for set in "${configs[@]}"; do
  args=()
  for file in $set; do args+=(--config "$file"); done
  # auth.yaml appends to the base's extension list and the traces-*.yaml overlays to the logs
  # pipeline's exporters, which needs the list-append merge.
  if [[ "$set" == *auth.yaml* || "$set" == *traces-* ]]; then args+=(--feature-gates=confmap.enableMergeAppendOption); fi
  if "$BIN" validate "${args[@]}"; then
    echo "validate.sh: ok      $set"
  else
    echo "validate.sh: INVALID $set" >&2
    status=1
  fi
done
exit "$status"

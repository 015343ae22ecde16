#!/usr/bin/env bash
# Runs one phase of `make test` and prints how long it took, so that every CI log gives the
# phases' times (uv sync, collector build, Docker, checks, pytest, range lanes):
#
#   bash tools/phase.sh NAME COMMAND...
set -uo pipefail
name="$1"
shift
started=$SECONDS
"$@"
status=$?
echo "phase $name: $((SECONDS - started)) s (exit $status)"
exit "$status"

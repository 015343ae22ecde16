#!/usr/bin/env bash
# One lane of `make test-ranges`: a new venv with the library and its `test` extra resolved one
# way (the newest versions pyproject.toml allows, or the lowest direct ones), then its tests.
#
#   bash tools/range_lane.sh UV NAME [uv pip install options...] -- TEST...
#
# The lane is made anew each time, so it tests what a fresh `pip install` resolves today, not
# what an earlier run left behind. Prints the versions it tested and the lane's time.
set -euo pipefail

uv="$1" name="$2"
shift 2
options=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  options+=("$1")
  shift
done
shift
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
venv="build/lanes/$name"
started=$SECONDS

rm -rf "$venv"
"$uv" venv --quiet --python "$(python3 -c 'import sys; print(sys.executable)')" "$venv"
"$uv" pip install --quiet --python "$venv/bin/python" "${options[@]}" -e ".[test]"
echo "range lane $name: $("$uv" pip list --python "$venv/bin/python" 2>/dev/null \
  | awk '$1 ~ /^(xxhash|wrapt|isal|opentelemetry-sdk|protobuf|hypothesis|numpy|pytest)$/ {printf "%s %s, ", $1, $2}')"
# The lane's own interpreter and nothing the locked suite set: a plain pytest, skips named.
env -u VALGEN_REQUIRE_ALL "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
echo "range lane $name: passed in $((SECONDS - started)) s"

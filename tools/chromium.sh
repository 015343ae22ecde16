#!/usr/bin/env bash
# Makes Debian's Chromium available, for the tests that open a trace UI in a headless browser
# (tests/e2e/test_mlflow_traces.py).
#
#   bash tools/chromium.sh
#
# When `chromium` is already on PATH, does nothing. Otherwise, as root: installs Debian's
# chromium package (without its recommended desktop packages). Not root and no chromium: says
# so and fails, as tools/docker/engine.sh does for Docker.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  echo "chromium.sh: $(chromium --version 2>/dev/null || echo chromium) is installed"
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "chromium.sh: chromium is missing and only root can install it;" \
    "install Debian's chromium package (apt-get install chromium) and run make test again" >&2
  exit 1
fi
echo "chromium.sh: installing chromium from Debian's packages"
# make test runs this beside tools/docker/engine.sh, which may be installing Docker: wait for
# dpkg's lock instead of failing on it.
lock=(-o DPkg::Lock::Timeout=600)
apt-get "${lock[@]}" update -qq
DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
echo "chromium.sh: $(chromium --version 2>/dev/null) installed"

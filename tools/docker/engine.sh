#!/usr/bin/env bash
# Makes a Docker engine answer on this machine, for the compose stack tests (tests/deploy).
#
#   bash tools/docker/engine.sh
#
# When `docker info` already answers, does nothing. Otherwise, as root: installs Debian's
# docker.io (engine 20.10, client /usr/bin/docker) and debootstrap if they are missing, starts
# dockerd in the background (log: build/docker/dockerd.log) and waits until it answers.
# The engine listens only on its local socket (/var/run/docker.sock), never on TCP.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LOG_DIR="$ROOT/build/docker"
DOCKER="$(bash "$ROOT/tools/docker/client.sh")"

answers() { "$DOCKER" info >/dev/null 2>&1; }

if answers; then
  echo "engine.sh: the Docker engine answers"
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "engine.sh: no Docker engine answers and only root can install or start one;" \
    "start dockerd (or give this user access to /var/run/docker.sock) and run make test again" >&2
  exit 1
fi
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if ((${#missing[@]})); then
  echo "engine.sh: installing ${missing[*]} from Debian's packages"
  # make test runs tools/chromium.sh beside this script: wait for dpkg's lock, never fail on it.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
  DOCKER="$(bash "$ROOT/tools/docker/client.sh")"
fi
mkdir -p "$LOG_DIR"
echo "engine.sh: starting dockerd (log: ${LOG_DIR#"$ROOT/"}/dockerd.log)"
# At a lower CPU priority (containerd, BuildKit and the containers inherit it): a cold image build
# then yields the cores to the tests that run beside it, which have start-up deadlines of their own.
nohup nice -n 10 dockerd >"$LOG_DIR/dockerd.log" 2>&1 &
for _ in $(seq 1 60); do
  if answers; then
    echo "engine.sh: the Docker engine answers ($("$DOCKER" info --format '{{.ServerVersion}} {{.Driver}}'))"
    exit 0
  fi
  sleep 1
done
echo "engine.sh: dockerd did not answer within 60 s; see ${LOG_DIR#"$ROOT/"}/dockerd.log" >&2
tail -n 20 "$LOG_DIR/dockerd.log" >&2 || true
exit 1

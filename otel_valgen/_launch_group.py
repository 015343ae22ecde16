"""The launch of a plain process: the processes of its process group that run, or configure, together.

A shell runs each command line in a process group of its own (job control), and a script's
commands share the script's group; a process group is what a terminal, ``nohup``, ``setsid``,
systemd or a container starts anew. So without a launcher to ask (Ray, torchrun, Slurm, MPI),
the processes of one launch are those of one process group that overlap in time, or that
configured otel-valgen within ``STARTED_TOGETHER_S`` of each other; a process of the group that
configures after all of them ended (the same script run again, or a ``python train.py --resume``
after the first one stopped) starts a new launch. (Not the processes' start times: a shell runs
a script's last command in its own process, which started with the script.)

Every process of the group holds a shared ``flock`` on one file for its lifetime, in a folder
only its user can use: ``$XDG_RUNTIME_DIR/otel-valgen`` else ``<tempdir>/otel-valgen-<uid>``.
A new process takes the file's launch id when a lock is held (a process of the launch runs) or
when it comes within ``STARTED_TOGETHER_S`` of the launch's last process; otherwise it writes a
new id. A second lock file serialises that decision between processes that start together.

It cannot tell (``launch_id`` returns None, and the caller falls back to one launch per run):
without ``fcntl`` (Windows), when the folder cannot be used, and when the environment says the
job may span hosts (``WORLD_SIZE`` above ``LOCAL_WORLD_SIZE``, or above 1 without it), whose
hosts have process groups of their own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Final

from otel_valgen import _env

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["STARTED_TOGETHER_S", "launch_id"]

_logger = logging.getLogger("otel_valgen")

STARTED_TOGETHER_S: Final = 2.0
"""Processes of one group that configure this close together are one launch, even if one ended first."""

LOCK_WAIT_S: Final = 2.0
"""The longest a process waits for the launch files' locks before falling back to one launch per run."""

_lock = threading.Lock()
_resolved: str | None = None
_held: int | None = None  # the descriptor whose shared lock says this process's launch runs


def launch_id() -> str | None:
    """``pg<pgid>-<8 hex digits>`` for this process's launch, or None when it cannot tell."""
    global _resolved, _held
    if fcntl is None or not hasattr(os, "getpgrp") or _may_span_hosts():
        return None
    with _lock:
        if _resolved is not None:
            return _resolved
        try:
            _resolved, _held = _join_or_start(_folder(), os.getpgrp())
        except OSError as error:
            _logger.warning(
                "otel_valgen: cannot tell this process group's launch (%s); its processes share one launch "
                "per run. Set OTEL_VALGEN_LAUNCH_ID to a new value at each launch to tell launches apart.",
                error,
            )
            return None
        return _resolved


def forget_for_testing() -> None:
    """Leave this process's launch (its lock is released): the next ``launch_id`` decides again."""
    global _resolved, _held
    with _lock:
        if _held is not None:
            os.close(_held)
        _resolved, _held = None, None


def _may_span_hosts() -> bool:
    """Whether the job's processes may run on several hosts (a launcher this library does not name)."""
    sizes = []
    for name in (_env.WORLD_SIZE, _env.LOCAL_WORLD_SIZE):
        raw = os.environ.get(name, "").strip()
        sizes.append(int(raw) if raw.isascii() and raw.isdigit() else 0)
    world, local = sizes
    return world > 1 and world > local


def _folder() -> Path:
    """The folder of this user's launch files, created private; refused if another user owns it."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    folder = Path(runtime) / "otel-valgen" if runtime else Path(tempfile.gettempdir()) / f"otel-valgen-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise PermissionError(f"{folder} is not a private folder of this user")
    return folder


def _namespace() -> str:
    """The PID namespace, so that containers sharing a temp folder never share a group's file."""
    try:
        return os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return "0"


def _join_or_start(folder: Path, group: int) -> tuple[str, int]:
    """The launch id of this process and the descriptor that holds its shared lock."""
    assert fcntl is not None
    name = f"launch-{group}-{_namespace()}"
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    decide = os.open(folder / f"{name}.lock", flags, 0o600)
    try:
        _lock_within(decide, fcntl.LOCK_EX)
        held = os.open(folder / name, flags, 0o600)
        try:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                running = False
            except BlockingIOError:
                running = True
            joined = time.monotonic()  # the system-wide clock: comparable between processes
            recorded = _read(held)
            together = recorded is not None and abs(joined - recorded[1]) <= STARTED_TOGETHER_S
            if recorded is not None and (running or together):
                launch = recorded[0]
                joined = max(joined, recorded[1])
            else:
                launch = f"pg{group}-{secrets.token_hex(4)}"
            _write(held, launch, joined)
            _lock_within(held, fcntl.LOCK_SH)
        except BaseException:
            os.close(held)
            raise
    finally:
        os.close(decide)  # releases the decision lock
    return launch, held


def _lock_within(descriptor: int, operation: int) -> None:
    """``flock`` that gives up after ``LOCK_WAIT_S`` (an ``OSError``: the caller falls back), never hangs.

    Every holder keeps these locks for milliseconds; a process forked by another thread at that
    moment could keep one until it exits, and configuring must not wait for it.
    """
    assert fcntl is not None
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(descriptor, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"launch file locked for more than {LOCK_WAIT_S} s") from None
            time.sleep(0.01)


def _read(descriptor: int) -> tuple[str, float] | None:
    """The recorded (launch id, when its last process joined), or None when there is none."""
    os.lseek(descriptor, 0, os.SEEK_SET)
    try:
        data = json.loads(os.read(descriptor, 4096) or b"null")
        return str(data["launch_id"]), float(data["last_joined"])
    except (ValueError, TypeError, KeyError):
        return None


def _write(descriptor: int, launch: str, last_joined: float) -> None:
    """Record the launch id and when its last process joined (``time.monotonic``)."""
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, json.dumps({"launch_id": launch, "last_joined": last_joined}).encode(), 0)

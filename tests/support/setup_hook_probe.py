"""A job's own ``worker_process_setup_hook``, as a user's job may have one (tests of chaining)."""

from __future__ import annotations

import os


def mark() -> None:
    """Leave a mark in the worker's environment that ``launch_probe.report`` reads."""
    os.environ["VALGEN_PROBE_JOB_HOOK"] = "ran"

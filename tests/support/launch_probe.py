"""A Ray driver launched as users launch one; prints what its workers got from otel-valgen.

``python launch_probe.py [address]``: connects (``ray.init(address)``; a Ray client address
with ``runtime_env_json`` as the second argument), runs one task and prints one line
``PROBE {json}``: whether the worker ran the job's own setup hook (``setup_hook_probe``),
whether otel-valgen's setup hook installed the verl integration there, and the endpoint the
worker was given.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import ray


@ray.remote
def report() -> dict[str, object]:
    """What this worker got: the job's own setup hook, otel-valgen's verl integration, the endpoint."""
    from otel_valgen.integrations import verl

    return {
        "job_hook_ran": os.environ.get("VALGEN_PROBE_JOB_HOOK") == "ran",
        "verl_integration_installed": verl._installed,
        "under_uv_run": bool(os.environ.get("UV")),  # `uv run` sets UV for what it runs
        "endpoint": os.environ.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"),
    }


def main() -> None:
    """Connect, ask one worker, print its report."""
    address = sys.argv[1] if len(sys.argv) > 1 else None
    runtime_env = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
    ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING)
    print("PROBE " + json.dumps(ray.get(report.remote())), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()

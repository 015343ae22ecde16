"""A training job's validation step, written by the embedded sink for a test to route in parts.

Usage: python -m tests.e2e.partial_job DIRECTORY RUN_ID STEP

Two sources (trainer, rollouter) of one launch each log ``PER_SOURCE`` generations of the step
with scores, without presampling, so that every generation is a record a test can route.
"""

from __future__ import annotations

import sys

import otel_valgen as vg

K, PER_SOURCE = 4, 10


def main(directory: str, run_id: str, step: str) -> None:
    """Write the step's records under ``directory``."""
    vg.configure(run_id=run_id, count=K, directory=directory, presample=False, progress_interval_s=0)
    for source in ("trainer", "rollouter"):
        with vg.validation(step=int(step), source=source, sources_expected=2):
            inputs = [f"{source}-q{i}" for i in range(PER_SOURCE)]
            vg.log_generations(
                inputs, [f"{text}@{step}" for text in inputs], [i / PER_SOURCE for i in range(PER_SOURCE)]
            )
    vg.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])

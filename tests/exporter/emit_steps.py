"""A stand-alone emitting process for the end-to-end test: one source's part of some steps.

Usage: python -m tests.exporter.emit_steps ENDPOINT RUN_ID SOURCE STEPS(comma separated)
"""

from __future__ import annotations

import sys

import otel_valgen as vg


def main(endpoint: str, run_id: str, source: str, steps: str) -> None:
    """Emit 8 generations per step as ``source``, two sources expected per step."""
    vg.configure(run_id=run_id, count=3, endpoint=endpoint, source=source)
    for step in (int(item) for item in steps.split(",")):
        with vg.validation(step=step, source=source, sources_expected=2):
            inputs = [f"{source}-q{i}" for i in range(8)]
            vg.log_generations(inputs, [f"{text}@{step}" for text in inputs], [i / 8 for i in range(8)])
    vg.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:5])

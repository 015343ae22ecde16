"""One node's training process for the re-routing test: every step's validation, open across a pause.

Usage: python -m tests.e2e.rerouting_job ENDPOINT RUN_ID SOURCE STEPS GO_FILE

For each of ``STEPS`` steps (all open at once) the process logs the first half of its
generations and flushes, then waits until ``GO_FILE`` exists (the test changes the cluster
meanwhile), then logs the second half and ends every step: mid-step for each of them.
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path

import otel_valgen as vg

K, PER_SOURCE, SEED = 4, 10, 42


def sample_ids(source: str, step: int) -> list[str]:
    """The generations of ``source`` at ``step``: its sample ids, which fix their sample keys."""
    return [f"{source}-{step}-{i}" for i in range(PER_SOURCE)]


def main(endpoint: str, run_id: str, source: str, steps: str, go_file: str) -> None:
    """Log every step in two halves around the pause."""
    vg.configure(
        run_id=run_id, count=K, seed=SEED, endpoint=endpoint, presample=False, source=source, progress_interval_s=0.5
    )
    numbers = [int(item) for item in steps.split(",")]
    halves = (slice(0, PER_SOURCE // 2), slice(PER_SOURCE // 2, PER_SOURCE))
    with ExitStack() as blocks:
        for step in numbers:
            blocks.enter_context(vg.validation(step=step, source=source, sources_expected=2))
        for number, half in enumerate(halves):
            for step in numbers:
                ids = sample_ids(source, step)[half]
                scores = [int(sample.rsplit("-", 1)[1]) / PER_SOURCE for sample in ids]
                vg.log_generations([f"q {i}" for i in ids], [f"a {i}" for i in ids], scores, step=step, sample_ids=ids)
            vg.flush(10.0)
            while number == 0 and not Path(go_file).exists():
                time.sleep(0.1)
    vg.flush(10.0)
    vg.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:6])

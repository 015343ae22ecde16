"""A training process for the lifecycle tests: one source validating one step, in batches.

Run as ``python -m tests.e2e.lifecycle_worker --step 20 --source a --ids a-000,a-001 ...``;
the run id, endpoint, k, launch id and progress interval come from the environment, as in a
job. It prints ``logged <n>`` after each batch so the test can act (SIGKILL, SIGTERM) at a
known point (after a flush, with ``--flush`` or presampling off), and ``ended`` after the block
closed.
"""

from __future__ import annotations

import argparse
import sys
import time

import otel_valgen as vg


def main() -> None:
    """Validate ``--ids`` at ``--step`` in ``--batches`` batches with ``--pause`` seconds between."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--ids", required=True, help="comma-separated sample ids")
    parser.add_argument("--batches", type=int, default=1)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds before each batch after the first")
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to stay in the block after the last batch")
    parser.add_argument("--sources-expected", type=int, default=None)
    parser.add_argument("--presample", choices=["true", "false"], default="true")
    parser.add_argument("--flush", action="store_true", help="flush after each batch (what was sent is confirmed)")
    args = parser.parse_args()
    ids = args.ids.split(",")
    size = -(-len(ids) // args.batches)
    vg.configure(presample=args.presample == "true")
    with vg.validation(step=args.step, source=args.source, sources_expected=args.sources_expected):
        for number, start in enumerate(range(0, len(ids), size)):
            if number:
                time.sleep(args.pause)
            batch = ids[start : start + size]
            vg.log_generations(
                [f"q {i}" for i in batch], [f"a {i}" for i in batch], [0.5] * len(batch), sample_ids=batch
            )
            if args.presample == "false" or args.flush:
                vg.flush(5)
            print(f"logged {start + len(batch)}", flush=True)
        time.sleep(args.hold)
    print("ended", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""A training process that logs its share of each prompt's responses (agent-loop workers, per-rank logging).

``python split_rollout_job.py --part P [--parts 3] [--prompts 64] [--responses 8] [--step 5]``
rolls out every prompt of the batch, keeping the responses ``r`` with ``r % parts == part``, in two
``log_rollouts`` calls (responses 0-3, then 4-7): a GRPO group of 8 is split over three processes
and two calls each. Prompts are given by id (``q00``, ...) and the texts name the response.
Only the environment the README names reaches it (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_VALGEN_DIR``, ``OTEL_VALGEN_RUN_ID``, ``OTEL_VALGEN_ROLLOUT_COUNT``).
"""

from __future__ import annotations

import argparse
import sys

import otel_valgen as vg


def main() -> int:
    """Roll out this part's responses in two calls; 1 when a call accepted less than it was given."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", type=int, required=True)
    parser.add_argument("--parts", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--responses", type=int, default=8)
    parser.add_argument("--step", type=int, default=5)
    args = parser.parse_args()
    half = args.responses // 2
    accepted = expected = 0
    for responses in (range(half), range(half, args.responses)):
        rows = [(p, r) for p in range(args.prompts) for r in responses if r % args.parts == args.part]
        expected += len(rows)
        accepted += vg.log_rollouts(
            [f"prompt {p}" for p, _ in rows],
            [f"response {r} to prompt {p}" for p, r in rows],
            [r / args.responses for _, r in rows],
            step=args.step,
            prompt_ids=[f"q{p:02d}" for p, _ in rows],
        )
    return 0 if accepted == expected and vg.shutdown() else 1


if __name__ == "__main__":
    sys.exit(main())

"""A training process for the rollout test: one source's validation and rollouts of one step.

Run as ``python -m tests.e2e.rollout_worker --step 12 --prompts a0,a1 --responses 4``; the run
id, endpoint, source, k of both kinds, seed and launch id come from the environment, as in a
job (``OTEL_VALGEN_*``, ``OTEL_EXPORTER_OTLP_ENDPOINT``). Each prompt ``p`` is validated once
(``v p``) and rolled out ``--responses`` times (response i: reward 1.0 for i = 0, else 0.0;
advantage 0.5 - i; with every rollout column). Exits 1 when a call accepted less than it was given.
"""

from __future__ import annotations

import argparse
import sys

import otel_valgen as vg


def main() -> int:
    """Validate, then roll out, ``--prompts`` at ``--step`` (each a block-less part); 0 when all was accepted."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--prompts", required=True, help="comma-separated prompt ids")
    parser.add_argument("--responses", type=int, required=True, help="responses per prompt")
    args = parser.parse_args()
    prompts = args.prompts.split(",")
    rows = [(p, i) for p in prompts for i in range(args.responses)]
    validated = vg.log_generations([f"v {p}" for p in prompts], ["out"] * len(prompts), step=args.step)
    rolled_out = vg.log_rollouts(
        [f"prompt {p}" for p, _ in rows],
        [f"response {p}.{i}" for p, i in rows],
        [float(i == 0) for _, i in rows],
        step=args.step,
        prompt_ids=[p for p, _ in rows],
        advantages=[0.5 - i for _, i in rows],
        response_lengths=[10 + i for _, i in rows],
        truncated=[i == args.responses - 1 for _, i in rows],
        ground_truths=[f"answer {p}" for p, _ in rows],
        data_sources=["synthetic"] * len(rows),
    )
    delivered = vg.shutdown()
    print(f"validated {validated} rolled out {rolled_out} delivered {delivered}", flush=True)
    return 0 if (validated, rolled_out, delivered) == (len(prompts), len(rows), True) else 1


if __name__ == "__main__":
    sys.exit(main())

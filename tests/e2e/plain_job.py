"""A plain training script as users write one: no launcher, one validation step with otel-valgen.

``python plain_job.py --step S --label L [--prompts N] [--passes P]`` validates step S on N
prompts, P sampling passes over them (one ``log_generations`` call each, inside one block), every
answer marked with L. Only the environment the README tells users to set reaches it
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_VALGEN_RUN_ID``, ``OTEL_VALGEN_COUNT``, and the tracker's).
"""

from __future__ import annotations

import argparse

import otel_valgen as vg


def main() -> None:
    """Validate one step and exit."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--passes", type=int, default=1)
    args = parser.parse_args()
    prompts = [f"What is {i} + {i}?" for i in range(args.prompts)]
    with vg.validation(step=args.step):
        for sampling_pass in range(args.passes):
            answers = [f"{args.label} pass {sampling_pass}: {2 * i}" for i in range(args.prompts)]
            vg.log_generations(
                prompts, answers, [1.0] * args.prompts, ground_truths=[str(2 * i) for i in range(args.prompts)]
            )


if __name__ == "__main__":
    main()

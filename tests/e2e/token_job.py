"""A training process that logs rollouts with per-token data, as a trainer holds it after a step.

``python token_job.py --step S --source NAME --first A --prompts P`` logs prompts A .. A+P-1 with
``N`` responses each (``responses``: float32 log-probabilities of the rollout engine and the
trainer, a reference, importance weights, the correction's mask and the response mask, padded
to the batch's width). Prompt ``LONG`` has one response of ``LONG_TOKENS`` tokens. Only the
environment the README tells users to set reaches it.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import otel_valgen as vg

N = 4
WIDTH = 1024
LONG = 10  # a prompt the seed keeps (tests/e2e/test_token_rows.py checks it)
LONG_TOKENS = 32_768


def response(prompt: int, index: int) -> dict[str, Any]:
    """Response ``index`` of ``prompt``: its length and per-token columns (deterministic)."""
    rng = np.random.default_rng(prompt * 100 + index)
    length = LONG_TOKENS if (prompt, index) == (LONG, 0) else int(rng.integers(200, WIDTH))
    trainer = np.log(rng.uniform(0.01, 1, length)).astype(np.float32)
    drift = 0.01 * (1 + prompt % 7)  # prompts differ in how far the engine is from the trainer
    rollout = (trainer + rng.normal(0, drift, length)).astype(np.float32)
    model = np.ones(length, dtype=bool)
    model[length // 3 : length // 3 + 40] = False  # a tool's output
    return {
        "length": length,
        "ids": rng.integers(0, 150_000, length),
        "pieces": [f" t{token % 997}" for token in range(length)],
        "rollout": rollout,
        "trainer": trainer,
        "reference": (trainer + rng.normal(0, 0.05, length)).astype(np.float32),
        "weight": np.exp(trainer - rollout).astype(np.float32),
        "masked": rng.uniform(size=length) < 0.03,
        "model": model,
    }


def batch(first: int, prompts: int) -> tuple[list[str], list[int], dict[str, Any]]:
    """Prompts (each N times), response lengths and the token columns, floats as padded 2-D arrays."""
    rows = [response(p, i) for p in range(first, first + prompts) for i in range(N)]
    width = max(row["length"] for row in rows)
    columns: dict[str, Any] = {}
    for name, dtype in (("rollout", np.float32), ("trainer", np.float32), ("reference", np.float32)):
        padded = np.zeros((len(rows), width), dtype=dtype)
        for r, row in enumerate(rows):
            padded[r, : row["length"]] = row[name]
        columns[name] = padded
    for name in ("ids", "pieces", "weight", "masked", "model"):  # rows of their own lengths
        columns[name] = [row[name] for row in rows]
    prompts_text = [f"prompt {p}" for p in range(first, first + prompts) for _ in range(N)]
    return prompts_text, [row["length"] for row in rows], columns


def main() -> None:
    """Log this process's prompts' rollouts of the step, then shut down (flushing)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--prompts", type=int, required=True)
    args = parser.parse_args()
    prompts, lengths, columns = batch(args.first, args.prompts)
    responses = [f"response {i}" for i in range(len(prompts))]
    vg.log_rollouts(
        prompts,
        responses,
        [1.0] * len(prompts),
        step=args.step,
        source=args.source,
        response_lengths=lengths,
        tokens=columns,
    )
    vg.shutdown()


if __name__ == "__main__":
    main()

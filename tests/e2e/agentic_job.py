"""A training process that validates agentic trajectories: chat messages in, tool-calling turns out.

``python agentic_job.py --step S --source NAME --first A --count N [--big I]`` logs trajectories
A .. A+N-1 (``trajectory``) of step S as source NAME, in the OpenAI chat format agent loops keep;
trajectory I's tool result is 300 KB. Only the environment the README tells users to set reaches it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import otel_valgen as vg

BIG_RESULT_CHARS = 300_000


def trajectory(index: int, big: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    """Prompt messages, generated turns and score of trajectory ``index`` (two tool calls, then an answer)."""
    prompt = [
        {"role": "system", "content": "You are a careful calculator. Use the calc tool."},
        {"role": "user", "content": f"Compute ({index} * 7) + {index % 5}."},
    ]
    product = index * 7
    result = f"{product}" if not big else "r" * (BIG_RESULT_CHARS // 2) + f"{product}" + "s" * (BIG_RESULT_CHARS // 2)
    turns: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": "First the product.",
            "tool_calls": [
                {
                    "id": f"call_{index}_0",
                    "type": "function",
                    "function": {"name": "calc", "arguments": json.dumps({"expr": f"{index}*7"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{index}_0", "content": result},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": f"Now add {index % 5}.",
            "tool_calls": [
                {
                    "id": f"call_{index}_1",
                    "type": "function",
                    "function": {"name": "calc", "arguments": {"expr": f"{product}+{index % 5}"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{index}_1", "content": str(product + index % 5)},
        {"role": "assistant", "content": f"The answer is {product + index % 5}."},
    ]
    return prompt, turns, float(index % 3 == 0)


def rewards(index: int) -> tuple[list[float], list[float]]:
    """Trajectory ``index``'s tool rewards (one per calc call) and turn scores (every 4th was scored)."""
    tool_rewards = [0.5, -1.0 if index >= 120 and index % 2 else 0.25]
    return tool_rewards, [0.25, 1.0] if index % 4 == 0 else []


def main() -> None:
    """Validate one step's share of trajectories and exit."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--big", type=int, default=-1)
    args = parser.parse_args()
    rows = [trajectory(i, big=i == args.big) for i in range(args.first, args.first + args.count)]
    with vg.validation(step=args.step, source=args.source):
        for start in range(0, len(rows), 32):  # batches, as a validation loop logs them
            batch = rows[start : start + 32]
            indices = range(args.first + start, args.first + start + len(batch))
            accepted = vg.log_generations(
                [r[0] for r in batch],
                [r[1] for r in batch],
                [r[2] for r in batch],
                tool_rewards=[rewards(i)[0] for i in indices],
                turn_scores=[rewards(i)[1] for i in indices],
            )
            assert accepted == len(batch)


if __name__ == "__main__":
    main()

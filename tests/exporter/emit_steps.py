"""A stand-alone emitting process for the end-to-end test: one source's part of some steps.

Usage: python -m tests.exporter.emit_steps ENDPOINT RUN_ID SOURCE STEPS(comma separated) [rollouts|data_sources]
"""

from __future__ import annotations

import sys

import otel_valgen as vg

PROMPTS, RESPONSES, ROLLOUT_COUNT = 4, 3, 2  # a source's rollouts per step, and k prompts kept
# With ``data_sources``, the data set of each of a source's 8 generations (None: none given).
DATA_SOURCES = ("gsm8k", "gsm8k", "gsm8k", "gsm8k", "gsm8k", "math", "math", None)


def main(endpoint: str, run_id: str, source: str, steps: str, mode: str = "") -> None:
    """Emit 8 generations per step as ``source``, two sources expected per step; with ``rollouts``, its rollouts too.

    The rollouts of a step: ``PROMPTS`` prompts of this source with ``RESPONSES`` responses each, in one call.
    With ``data_sources`` the generations come from ``DATA_SOURCES``.
    """
    rollouts = mode == "rollouts"
    data_sources = list(DATA_SOURCES) if mode == "data_sources" else None
    vg.configure(run_id=run_id, count=3, endpoint=endpoint, source=source, rollout_count=ROLLOUT_COUNT)
    for step in (int(item) for item in steps.split(",")):
        with vg.validation(step=step, source=source, sources_expected=2):
            inputs = [f"{source}-q{i}" for i in range(8)]
            outputs = [f"{text}@{step}" for text in inputs]
            vg.log_generations(inputs, outputs, [i / 8 for i in range(8)], data_sources=data_sources)
        if rollouts:
            pairs = [(f"{source}-p{p}", i) for p in range(PROMPTS) for i in range(RESPONSES)]
            vg.log_rollouts(
                [f"prompt {prompt}" for prompt, _ in pairs],
                [f"response {prompt}.{i}@{step}" for prompt, i in pairs],
                [float(i) for _, i in pairs],
                step=step,
                prompt_ids=[prompt for prompt, _ in pairs],
                advantages=[i - 1.0 for _, i in pairs],
            )
    vg.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:6])

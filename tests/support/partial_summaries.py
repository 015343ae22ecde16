"""Partial summaries, one sampler per source, built from a shared case's end records (testdata/sampling)."""

from __future__ import annotations

from typing import Any

from otel_valgen import contract


def one_sampler_per_source(end_records: list[dict[str, Any]], field: str, figures_key: str) -> list[dict[str, Any]]:
    """A summary per end record, as if each source's part of the step had its own sampler.

    ``figures_key`` names the end record's figures in the case (``trajectories``, ``mismatch``),
    ``field`` where a summary's source figures carry them (``contract.FIELD_*``).
    """
    return [
        {
            contract.RUN_ID: "r",
            contract.STEP: 1,
            contract.SAMPLER: f"s{i}",
            contract.SOURCE_FIGURES: [
                {
                    "source": f"{e['source']}@{e['instance']}",
                    "announced": True,
                    "ended": True,
                    "seen": e["seen"],
                    "emitted": 0,
                    **({field: e[figures_key]} if figures_key in e else {}),
                }
            ],
        }
        for i, e in enumerate(end_records)
    ]

"""verl compatibility: drop-in replacements for verl's validation-generation logging.

``ValidationGenerationsLogger`` keeps the call shape of ``verl.utils.tracking``'s class
(``log(loggers, samples, step)``) but emits through otel_valgen, so it works in any Ray
actor, with or without a wandb run. ``ValGenerationsMixin`` replaces a trainer's
``_maybe_log_val_generations`` so that *all* generations reach the sampler: verl's own
sort-shuffle-truncate would pre-select per process and make the merged choice inexact.

Neither needs ``__init__`` to have run: a subclass that skips ``super().__init__()``
still logs (verl issues #6438, #4794, #5988 came from exactly that).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import otel_valgen as vg

__all__ = ["ValGenerationsMixin", "ValidationGenerationsLogger", "log_val_generations"]

_logger = logging.getLogger("otel_valgen")


class ValidationGenerationsLogger:
    """verl's ``ValidationGenerationsLogger``, emitting OTel records instead of writing wandb.

    ``loggers`` (verl's ``trainer.logger`` list) is accepted and ignored: where the records
    end up is the collector's business, not this process's.
    """

    def __init__(self, project_name: str | None = None, experiment_name: str | None = None, source: str = "trainer"):
        self.project_name = project_name
        self.experiment_name = experiment_name
        self.source = source

    def log(
        self, loggers: Sequence[str] | None, samples: Sequence[Sequence[Any]], step: int, table_name: str | None = None
    ) -> None:
        """Emit ``samples`` (``(input, output, score)`` tuples) at ``step`` and end the step."""
        del loggers, table_name  # routing and table naming happen in the collector and exporter
        try:
            rows = [tuple(sample) for sample in samples]
            inputs = [row[0] if len(row) > 0 else None for row in rows]
            outputs = [row[1] if len(row) > 1 else None for row in rows]
            scores = [row[2] if len(row) > 2 else None for row in rows]
        except TypeError:
            _logger.warning("otel_valgen: ValidationGenerationsLogger.log expects (input, output, score) tuples")
            return
        with vg.validation(step=step, source=getattr(self, "source", "trainer")):
            vg.log_generations(inputs, outputs, scores)


def log_val_generations(
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    scores: Sequence[Any],
    *,
    step: int,
    source: str = "trainer",
    ground_truths: Sequence[Any] | None = None,
    sample_ids: Sequence[Any] | None = None,
    data_sources: Sequence[Any] | None = None,
    sources_expected: int | None = None,
    count: int | None = None,
) -> bool:
    """Emit one validation's generations at the trainer's ``step`` and end this source's part.

    Returns whether the step's records were confirmed sent (never raises).
    """
    with vg.validation(step=step, source=source, sources_expected=sources_expected, count=count) as block:
        vg.log_generations(
            inputs, outputs, scores, ground_truths=ground_truths, sample_ids=sample_ids, data_sources=data_sources
        )
    return bool(block.flushed)


class ValGenerationsMixin:
    """Put first in a verl trainer's bases to replace ``_maybe_log_val_generations``.

    Class attributes a subclass may set (no ``__init__`` involved):

    - ``valgen_source``: the name of this part (``trainer``; ``rollouter`` in fully-async).
    - ``valgen_step_attribute``: the attribute holding the *trainer's* step
      (``global_steps``; in verl's fully-async rollouter use the parameter version,
      e.g. ``current_param_version``, never the rollouter's own counter).
    """

    valgen_source: str = "trainer"
    valgen_step_attribute: str = "global_steps"

    def _valgen_count(self) -> int | None:
        config = getattr(self, "config", None)
        trainer = getattr(config, "trainer", None)
        count = getattr(trainer, "log_val_generations", None)
        return count if isinstance(count, int) else None

    def _maybe_log_val_generations(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        scores: Sequence[Any],
        sample_metadata: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Verl's hook: send every generation; the sampler keeps ``log_val_generations`` of them."""
        count = self._valgen_count()
        if count == 0:
            return
        step = getattr(self, self.valgen_step_attribute, None)
        sample_ids = None
        if sample_metadata is not None and len(sample_metadata) == len(inputs):
            uids = [meta.get("uid") if isinstance(meta, dict) else None for meta in sample_metadata]
            sample_ids = uids if all(uid is not None for uid in uids) else None
        log_val_generations(  # a missing step is logged and counted by log_generations
            inputs,
            outputs,
            scores,
            step=step,  # type: ignore[arg-type]
            source=self.valgen_source,
            sample_ids=sample_ids,
            count=count,
        )

"""Noticing steps whose attempts ran at the same time with no common source: one launch, split.

The service sees each closed attempt of a step as it is written. A step counts as split when
its summary says so (``valgen.attempts_concurrent`` > 0, the sampler's verdict) or, for an
attempt whose summary does not say (an older collector, records without their summary), when
it and another attempt of the step received here were concurrent by ``otel_valgen.splits``;
here an attempt's sources are those of its kept records, and its span runs from its start
(``valgen.attempt_start``) to its latest kept record. Each step is reported once. A step's
validation and its rollouts are watched apart: each kind numbers its attempts on its own, and
the two run at the same time in other processes by design.
"""

from __future__ import annotations

from collections import OrderedDict

from otel_valgen import contract
from otel_valgen.exporter.steps import ClosedStep
from otel_valgen.splits import Footprint, concurrent_counts

__all__ = ["SplitWatch"]


def _footprint(step: ClosedStep) -> Footprint:
    sources = frozenset((g.source or "", g.instance) for g in step.generations)
    first = step.attempt_start
    last = max((g.timestamp for g in step.generations), default=first)
    return Footprint(sources, first, max(first, last))


class SplitWatch:
    """The attempts of the steps seen lately (the last ``max_steps``), and the steps found split."""

    def __init__(self, max_steps: int = 4096) -> None:
        self._max_steps = max_steps
        self._steps: OrderedDict[tuple[str, int, str], dict[str, Footprint]] = OrderedDict()
        self._reported: OrderedDict[tuple[str, int, str], None] = OrderedDict()

    def observe(self, step: ClosedStep) -> int:
        """How many attempts of the step ran concurrently, the first time the step is found split; else 0."""
        key = (step.group_id, step.step, step.kind)
        attempts = self._steps.setdefault(key, {})
        self._steps.move_to_end(key)
        if len(self._steps) > self._max_steps:
            self._steps.popitem(last=False)
        attempts[step.attempt] = _footprint(step)
        marked = step.summary.get(contract.ATTEMPTS_CONCURRENT) if step.summary is not None else None
        if isinstance(marked, int) and not isinstance(marked, bool):
            involved = marked + 1 if marked > 0 else 0
        else:
            counts = concurrent_counts(attempts)
            involved = sum(1 for n in counts.values() if n > 0) if counts[step.attempt] > 0 else 0
        if not involved or key in self._reported:
            return 0
        self._reported[key] = None
        if len(self._reported) > self._max_steps:
            self._reported.popitem(last=False)
        return involved

"""The parts of recent steps, so that a part another sampler closes later merges into its step.

The service hands every closed step on as it arrives. When agents re-routed a step mid-way,
each sampler that received part of it closes a part of its own (``otel_valgen.partials``); the
first part is written as it is, and each later part of another sampler is merged with the
parts before it (``otel_valgen.exporter.steps.merge_parts``) and handed on again, so that the
backends write the step again (``otel_valgen.exporter.backends.correction``).

The parts of the last ``max_steps`` steps are kept, in memory and, with a state folder, in
``<state dir>/parts.jsonl`` (appended as parts arrive, compacted at start), so that a part
arriving after a restart of the service still merges. A part of a step older than that is
handed on alone and counted (``parts_unmerged``): its step would be written from that part only.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from pathlib import Path

from otel_valgen.exporter.steps import ClosedStep, StepKey, merge_parts, step_as_item, step_from_item
from otel_valgen.partials import sampler_of

__all__ = ["StepParts"]

_logger = logging.getLogger("otel_valgen.exporter")


class StepParts:
    """The parts of the last ``max_steps`` steps, by sampler, and the merge of each new part."""

    def __init__(self, state_dir: str | Path | None = None, max_steps: int = 256) -> None:
        self.max_steps = max_steps
        self.merged = 0  # steps handed on merged from parts of several samplers
        self.unmerged = 0  # parts of a step no longer kept (older than max_steps), handed on alone
        self._parts: OrderedDict[StepKey, dict[str, ClosedStep]] = OrderedDict()
        self._forgotten: OrderedDict[StepKey, None] = OrderedDict()  # the last steps forgotten, to warn
        self._appended = 0  # lines appended to the file since it was last compacted
        self._lock = threading.Lock()
        self._path = Path(state_dir) / "parts.jsonl" if state_dir is not None else None
        if self._path is not None:
            self._load(self._path)

    def add(self, step: ClosedStep) -> ClosedStep:
        """Keep ``step`` as its sampler's part; return the step merged from every part known (or ``step`` alone)."""
        sampler = sampler_of(step.summary)
        if not sampler:  # a collector that does not name its samplers: nothing to merge
            return step
        with self._lock:
            parts = self._parts.get(step.key)
            if parts is None:
                if step.key in self._forgotten:
                    self.unmerged += 1
                    _logger.warning(
                        "run %s step %d (%s): a part from sampler %s arrived after the step's other parts were "
                        "forgotten (%d steps kept); written from this part only",
                        step.group_id,
                        step.step,
                        step.kind,
                        sampler,
                        self.max_steps,
                    )
                parts = self._parts[step.key] = {}
            self._parts.move_to_end(step.key)
            new = sampler not in parts  # else its sampler sent it again (a retried request)
            parts[sampler] = step
            self._append(step)
            while len(self._parts) > self.max_steps:
                old, _ = self._parts.popitem(last=False)
                self._forgotten[old] = None
                if len(self._forgotten) > 4 * self.max_steps:
                    self._forgotten.popitem(last=False)
            if len(parts) == 1:
                return step
            if new:
                self.merged += 1
                _logger.info(
                    "run %s step %d (%s): merged the parts of samplers %s",
                    step.group_id,
                    step.step,
                    step.kind,
                    ", ".join(sorted(parts)),
                )
            ordered = [parts[name] for name in sorted(parts)]
        return merge_parts(ordered)

    def _append(self, step: ClosedStep) -> None:
        if self._path is None:
            return
        if self._appended >= 2 * self.max_steps:  # keep the file about as large as what is kept
            self._compact(self._path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with self._path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(step_as_item(step)) + "\n")
        self._appended += 1

    def _compact(self, path: Path) -> None:
        """Rewrite the file with the parts kept now."""
        compacted = path.with_suffix(".tmp")
        with compacted.open("w", encoding="utf-8") as handle:
            for parts in self._parts.values():
                for step in parts.values():
                    handle.write(json.dumps(step_as_item(step)) + "\n")
        compacted.replace(path)
        self._appended = 0

    def _load(self, path: Path) -> None:
        if not path.exists():
            return
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    step = step_from_item(json.loads(line))
                except (ValueError, KeyError, TypeError) as error:
                    _logger.warning("parts %s line %d unreadable: %s", path, number, error)
                    continue
                self._parts.setdefault(step.key, {})[sampler_of(step.summary)] = step
                self._parts.move_to_end(step.key)
                while len(self._parts) > self.max_steps:
                    self._parts.popitem(last=False)
        self._compact(path)

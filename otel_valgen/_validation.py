"""``vg.validation(step=...)``: one validation step in this process, as a context manager.

Entering opens the step's span (its carrier reaches the other processes of the step);
leaving ends this source's part of the step. Like every entry point, it never raises.
"""

from __future__ import annotations

import contextvars
import logging
from types import TracebackType
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span

from otel_valgen import _api, _process, contract
from otel_valgen._process import never_raise
from otel_valgen._sanitize import clean_step
from otel_valgen._tracing import carrier_of, parent_context, start_validation_span

_logger = logging.getLogger("otel_valgen")


class Validation:
    """A validation step in this process: ``with vg.validation(step=...) as v:``.

    Entering opens the step's span; ``carrier()`` returns its trace context for other
    processes; leaving ends this source's part of the step and flushes (bounded).
    """

    def __init__(
        self,
        step: int,
        source: str | None = None,
        carrier: dict[str, str] | None = None,
        sources_expected: int | None = None,
        count: int | None = None,
    ) -> None:
        self.step = clean_step(step)
        self.count = count
        self.source = source or ""
        self.sources_expected = sources_expected
        self._carrier_in = carrier
        self.context: Context | None = None
        self.state: Any = None
        self._span: Span | None = None
        self._token: contextvars.Token[_process.OpenBlock | None] | None = None
        self.flushed: bool | None = None

    @never_raise(None)
    def _open(self) -> None:
        emitter = _process.active_emitter()
        if emitter is None or self.step is None:
            _process.counters.warn(
                "validation_ignored", "validation(step=%r) has no step or runs after shutdown", self.step
            )
            return
        self.source = self.source or emitter.settings.source
        parent = parent_context(emitter.settings.run_id, self.step, self._carrier_in)
        self._span, self.context = start_validation_span(
            parent, {contract.RUN_ID: emitter.settings.run_id, contract.STEP: self.step, contract.SOURCE: self.source}
        )
        self.state = emitter.open_step(self.step, self.source, self.context, self.sources_expected, self.count)

    def __enter__(self) -> Validation:
        self._open()
        self._token = _process.current_block.set(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._token is not None:
            _process.current_block.reset(self._token)
        self._close()

    @never_raise(None)
    def _close(self) -> None:
        if self.step is None:
            return
        self.flushed = _api.end_step(self.step, source=self.source or None, sources_expected=self.sources_expected)
        if self._span is not None:
            self._span.end()

    def carrier(self) -> dict[str, str]:
        """The step's W3C trace context, to pass to the actors that validate a part of it."""
        try:
            return carrier_of(self.context) if self.context is not None else {}
        except Exception:
            _logger.exception("otel_valgen: carrier() failed")
            return {}

    def trace_id(self) -> str | None:
        """The step's trace id as 32 hex digits, or None before the block opened."""
        from opentelemetry import trace

        if self.context is None:
            return None
        return format(trace.get_current_span(self.context).get_span_context().trace_id, "032x")


def validation(
    step: int,
    *,
    source: str | None = None,
    carrier: dict[str, str] | None = None,
    sources_expected: int | None = None,
    count: int | None = None,
) -> Validation:
    """Open a validation step; see ``Validation``.

    Args:
        step: the trainer's step (verl: global step or parameter version).
        source: the emitting part, e.g. ``rollouter``, ``trainer``, ``worker-3``.
        carrier: trace context from ``Validation.carrier()`` of the process that opened the step.
        sources_expected: how many sources will end this step, so the collector can close
            it as soon as all have ended instead of after its wait.
        count: k for this step when it differs from the configured one (the smallest k asked
            for in a step wins).

    """
    return Validation(step, source=source, carrier=carrier, sources_expected=sources_expected, count=count)

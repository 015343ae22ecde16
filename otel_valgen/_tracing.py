"""Trace context of a validation step, shared by every process that emits for it.

Records of one (run, step) carry one trace id: the one of the validation span when its
carrier reaches the process, else one derived from (run, step) so that processes that got
no carrier still agree.

``step_trace_id`` is the trace id of the trace the collector's ``valgen_spans`` connector makes of
a closed step, of either kind; the exporter's MLflow backend links that trace to the job's run.
"""

from __future__ import annotations

import hashlib

from opentelemetry import trace
from opentelemetry.context import Context, get_current
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_valgen import contract

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACER_NAME = "otel_valgen"
SPAN_NAME = "valgen.validation"


def _step_digest(run_id: str, step: int, kind: str) -> bytes:
    """SHA-256 of ``valgen.trace``, run and step (in decimal), NUL-separated, then NUL and kind unless validation."""
    text = f"valgen.trace\0{run_id}\0{step}" + ("" if kind == contract.KIND_VALIDATION else f"\0{kind}")
    return hashlib.sha256(text.encode("utf-8", "replace")).digest()


def step_trace_id(run_id: str, step: int, kind: str = contract.KIND_VALIDATION) -> int:
    """The trace id of a step's trace: the first 16 bytes of ``_step_digest`` (0 becomes 1).

    The ``valgen_spans`` connector gives each closed (run, step, kind) this trace id
    (collector/valgenspanconnector/ids.go, ``traceIDOf``); for validation it is also the one
    ``derived_ids`` gives the step's records. tests/test_trace_ids.py checks it against the
    connector's vectors (testdata/spans).
    """
    return int.from_bytes(_step_digest(run_id, step, kind)[:16], "big") or 1


def derived_ids(run_id: str, step: int) -> tuple[int, int]:
    """Trace and span ids derived from (run, step): SHA-256 of ``valgen.trace``, run and step, NUL-separated."""
    digest = _step_digest(run_id, step, contract.KIND_VALIDATION)
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def derived_context(run_id: str, step: int) -> Context:
    """A context whose span has the trace id derived from (run, step)."""
    trace_id, span_id = derived_ids(run_id, step)
    span_context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(span_context), Context())


def parent_context(run_id: str, step: int, carrier: dict[str, str] | None) -> Context:
    """The context a step's records hang under: the carrier's, the caller's, or the derived one."""
    if carrier:
        extracted = _PROPAGATOR.extract(carrier=carrier)
        if trace.get_current_span(extracted).get_span_context().is_valid:
            return extracted
    if trace.get_current_span().get_span_context().is_valid:
        return get_current()
    return derived_context(run_id, step)


def start_validation_span(parent: Context, attributes: dict[str, str | int]) -> tuple[Span, Context]:
    """Open the step's span under ``parent`` with the global tracer provider.

    With no SDK tracer provider installed the span is non-recording and keeps the parent's
    ids, so records still carry the step's trace id.
    """
    span = trace.get_tracer(_TRACER_NAME).start_span(SPAN_NAME, context=parent, attributes=attributes)
    if not span.get_span_context().is_valid:
        span = trace.get_current_span(parent)
    return span, trace.set_span_in_context(span, parent)


def carrier_of(context: Context) -> dict[str, str]:
    """The W3C trace-context headers of ``context``, to pass to other processes."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return carrier

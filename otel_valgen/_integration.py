"""Which integration opened a validation block: attributes for the start and end records of its parts.

An integration (``otel_valgen.integrations.verl``) sets them around the block it opens; the
emitter copies them onto each (step, source) state it creates meanwhile, so the public API
stays as it is. ``contract.INTEGRATION`` has their meaning.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping

from opentelemetry.util.types import AnyValue

_marks: contextvars.ContextVar[Mapping[str, AnyValue] | None] = contextvars.ContextVar(
    "otel_valgen_integration", default=None
)


@contextlib.contextmanager
def marked(attributes: Mapping[str, AnyValue]) -> Iterator[None]:
    """Parts opened in this context carry ``attributes`` on their start and end records."""
    token = _marks.set(dict(attributes))
    try:
        yield
    finally:
        _marks.reset(token)


def current() -> dict[str, AnyValue]:
    """The attributes of the integration that opens parts in this context (empty: the plain API)."""
    return dict(_marks.get() or {})

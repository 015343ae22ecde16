"""The fully-async trainer's step, published where the rollouter reads it before it validates.

In verl's fully-async mode the trainer asks the rollouter actor to validate
(``rollouter.do_validate.remote()``) and logs the result at its own
``current_param_version``; the rollouter never learns that number. The trainer's process
publishes every value it assigns to ``current_param_version`` to Ray's GCS key-value store,
scoped to the Ray job; the rollouter reads it when a validation starts.

Why two validations cannot be mixed up: the trainer's only writer of
``current_param_version`` is its ``fit`` loop (and ``load_checkpoint`` before it), and that
loop awaits ``do_validate`` before it can advance the version; the write is synchronous, so
the value is in the store before ``do_validate`` is even sent; and the rollouter reads it once,
when its ``_validate`` starts, for that whole validation.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Final

from otel_valgen import _process, _stats

_logger = logging.getLogger("otel_valgen")

NAMESPACE: Final = "otel_valgen"
"""The GCS key-value namespace of otel-valgen's entries."""


def _key() -> str | None:
    """The key of this Ray job's entry, or None outside a connected Ray worker or driver."""
    ray = sys.modules.get("ray")  # a process that never imported Ray is not in a Ray job
    if ray is None or not ray.is_initialized():
        return None
    return f"verl/trainer_step/{ray.get_runtime_context().get_job_id()}"


def publish(step: object) -> None:
    """Store the trainer's current step for this Ray job (never raises)."""
    if not isinstance(step, int) or isinstance(step, bool):
        return
    try:
        from ray.experimental.internal_kv import _internal_kv_initialized, _internal_kv_put

        key = _key()
        if key is None or not _internal_kv_initialized():  # type: ignore[no-untyped-call]
            return
        _internal_kv_put(key, json.dumps({"step": step}), overwrite=True, namespace=NAMESPACE)
    except Exception:
        _process.counters.add(_stats.INTERNAL_ERRORS)
        _process.counters.warn("trainer_step_publish_failed", "could not publish the trainer's step %r", step)


def read() -> int | None:
    """The step the trainer of this Ray job published last, or None (never raises)."""
    try:
        from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_initialized

        key = _key()
        if key is None or not _internal_kv_initialized():  # type: ignore[no-untyped-call]
            return None
        raw = _internal_kv_get(key, namespace=NAMESPACE)
        if raw is None:
            return None
        step = json.loads(raw).get("step")
        return step if isinstance(step, int) else None
    except Exception:
        _process.counters.add(_stats.INTERNAL_ERRORS)
        _process.counters.warn("trainer_step_read_failed", "could not read the trainer's published step")
        return None

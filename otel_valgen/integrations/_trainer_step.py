"""The fully-async trainer's step and runs, published where the rollouter reads them before it validates.

In verl's fully-async mode the trainer asks the rollouter actor to validate
(``rollouter.do_validate.remote()``) and logs the result at its own
``current_param_version`` in its own tracker runs; the rollouter knows neither. The trainer's
process publishes every value it assigns to ``current_param_version``, with the identity of
its tracker runs (run id; wandb, MLflow, ClearML, Trackio resource attributes), to Ray's GCS
key-value store, scoped to the Ray job. The rollouter reads them when a validation starts,
validates at that step and adopts those runs (``_identity.adopt_trainer_run``), so its records
land in the trainer's runs without ``WANDB_RUN_ID`` set by hand.

Why two validations cannot be mixed up: the trainer's only writer of
``current_param_version`` is its ``fit`` loop (and ``load_checkpoint`` before it), and that
loop awaits ``do_validate`` before it can advance the version; the write is synchronous, so
the value is in the store before ``do_validate`` is even sent; and the rollouter reads it once,
when its ``_validate`` starts, for that whole validation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from typing import Any, Final

from otel_valgen import _identity, _process, _stats

_logger = logging.getLogger("otel_valgen")

NAMESPACE: Final = "otel_valgen"
"""The GCS key-value namespace of otel-valgen's entries."""


@dataclasses.dataclass(frozen=True)
class Published:
    """What the trainer published last: its step, and its run id and tracker resource attributes."""

    step: int
    run_id: str | None = None
    resource: dict[str, str] = dataclasses.field(default_factory=dict)


def _key() -> str | None:
    """The key of this Ray job's entry, or None outside a connected Ray worker or driver."""
    ray = sys.modules.get("ray")  # a process that never imported Ray is not in a Ray job
    if ray is None or not ray.is_initialized():
        return None
    return f"verl/trainer_step/{ray.get_runtime_context().get_job_id()}"


def _runs() -> tuple[str | None, dict[str, str]]:
    """The run id and tracker resource attributes, of this process, as its records would carry them.

    A run id this process would only make up (no tracker run, nothing forwarded) is not
    published: it would change at every call.
    """
    emitter = _process.current_emitter()
    if emitter is not None:
        settings = _process.follow_trackers(emitter).settings
        run_id: str | None = settings.run_id
        origin = settings.run_id_origin
    else:
        run_id, origin = _identity.resolve_run_id(None)
        if origin == "generated":
            run_id = None
    return run_id, _identity.tracker_resource(origin)


def publish(step: object) -> None:
    """Store the trainer's current step and runs for this Ray job (never raises)."""
    if not isinstance(step, int) or isinstance(step, bool):
        return
    try:
        from ray.experimental.internal_kv import _internal_kv_initialized, _internal_kv_put

        key = _key()
        if key is None or not _internal_kv_initialized():  # type: ignore[no-untyped-call]
            return
        run_id, resource = _runs()
        value = json.dumps({"step": step, "run_id": run_id, "resource": resource})
        _internal_kv_put(key, value, overwrite=True, namespace=NAMESPACE)
    except Exception:
        _process.counters.add(_stats.INTERNAL_ERRORS)
        _process.counters.warn("trainer_step_publish_failed", "could not publish the trainer's step %r", step)


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def read() -> Published | None:
    """What the trainer of this Ray job published last, or None (never raises)."""
    try:
        from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_initialized

        key = _key()
        if key is None or not _internal_kv_initialized():  # type: ignore[no-untyped-call]
            return None
        raw = _internal_kv_get(key, namespace=NAMESPACE)
        if raw is None:
            return None
        entry = json.loads(raw)
        step = entry.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            return None
        run_id = entry.get("run_id")
        return Published(step, run_id if isinstance(run_id, str) and run_id else None, _strings(entry.get("resource")))
    except Exception:
        _process.counters.add(_stats.INTERNAL_ERRORS)
        _process.counters.warn("trainer_step_read_failed", "could not read the trainer's published step")
        return None

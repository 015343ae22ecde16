"""The process-wide emitter, the open block of the current context, and the guard of every entry point.

One emitter per process, created on first use from the environment (or by ``configure``),
replaced when the process's wandb run appears, and ended at exit or SIGTERM. ``_api`` and
``_validation`` (the public entry points) and the integrations use it; it uses none of them.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, ParamSpec, Protocol, TypeVar

from opentelemetry.context import Context
from opentelemetry.sdk._logs.export import LogRecordExporter
from opentelemetry.util.types import AnyValue

from otel_valgen import _stats
from otel_valgen._emitter import Emitter, StepState
from otel_valgen._identity import forget_trainer_run_for_testing, tell_children, untell_children
from otel_valgen._settings import Settings, follow_tracker_runs, resolve_settings


class OpenBlock(Protocol):
    """What ``log_generations`` reads of the enclosing ``validation`` block."""

    step: int | None
    source: str
    count: int | None
    context: Context | None
    state: StepState | None


_logger = logging.getLogger("otel_valgen")

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.RLock()
_emitter: Emitter | None = None
_shut_down = False
counters = _stats.Stats()
current_block: contextvars.ContextVar[OpenBlock | None] = contextvars.ContextVar("otel_valgen_validation", default=None)
_atexit_registered = False
_sigterm_installed = False
_previous_sigterm: Callable[[int, FrameType | None], Any] | int | None = None


def never_raise(default: object) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Catch, count and warn about any exception (rate-limited) so that it never reaches the training loop."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return function(*args, **kwargs)
            except Exception as error:
                counters.failed(f"in {function.__name__}", error)
                return default  # type: ignore[return-value]

        return guarded

    return decorate


def _at_exit() -> None:
    emitter = _emitter
    if emitter is not None:
        emitter.shutdown(emitter.settings.flush_timeout_s)


def current_emitter() -> Emitter | None:
    """The emitter, if one is installed (never creates one)."""
    return _emitter


def mark_open_block(attributes: Mapping[str, AnyValue]) -> bool:
    """Put ``attributes`` on the end record of this context's open block; False when none is open."""
    block = current_block.get()
    state = block.state if block is not None else None
    if state is None:
        return False
    state.marks.update(attributes)
    return True


def take_emitter() -> Emitter | None:
    """Remove the emitter for good (``shutdown``): later calls are counted as dropped."""
    global _emitter, _shut_down
    with _lock:
        emitter, _emitter = _emitter, None
        _shut_down = True
    return emitter


def _stop_for_signal() -> None:
    """End open blocks and flush, like a normal exit, on a helper thread bounded in time.

    The helper thread keeps a signal that arrives while this thread holds one of our locks (or
    the SDK's) from deadlocking: after the flush timeout the handler goes on regardless.
    """
    emitter = take_emitter()
    if emitter is None:
        return
    timeout_s = emitter.settings.flush_timeout_s
    worker = threading.Thread(target=emitter.shutdown, args=(timeout_s,), name="otel-valgen-sigterm", daemon=True)
    worker.start()
    worker.join(timeout_s + 1.0)
    if worker.is_alive():
        counters.add(_stats.FLUSH_TIMEOUTS)
        _logger.warning("otel_valgen: SIGTERM: records not delivered within %.1fs", timeout_s)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: deliver open blocks, then do what the previous disposition would have done."""
    try:
        _logger.info("otel_valgen: SIGTERM: ending open validation blocks and flushing")
        _stop_for_signal()
    except Exception:
        counters.add(_stats.INTERNAL_ERRORS)
        _logger.exception("otel_valgen: SIGTERM handling failed")
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:  # SIG_DFL: die of the signal as the process would have without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_sigterm_handler() -> None:
    """Chain our SIGTERM handler in front of the current one; only the main thread can."""
    global _sigterm_installed, _previous_sigterm
    if _sigterm_installed or not hasattr(signal, "SIGTERM"):
        return
    if threading.current_thread() is not threading.main_thread():
        _logger.debug("otel_valgen: not in the main thread; no SIGTERM handler installed")
        return
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is None:  # installed outside Python: we could not chain it
            _logger.debug("otel_valgen: SIGTERM has a non-Python handler; none installed")
            _sigterm_installed = True
            return
        if previous is _on_sigterm:
            _sigterm_installed = True
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError) as error:  # e.g. an embedded interpreter without signals
        _logger.debug("otel_valgen: no SIGTERM handler installed: %s", error)
        return
    _previous_sigterm = previous
    _sigterm_installed = True


def install(settings: Settings, exporter: LogRecordExporter | None = None) -> Emitter:
    global _emitter, _shut_down, _atexit_registered
    with _lock:
        previous = _emitter
        _emitter = None
    if previous is not None:
        previous.shutdown(previous.settings.flush_timeout_s)
    emitter = Emitter(settings, counters, exporter)
    if previous is not None:
        emitter.inherit_attempts(previous)
    with _lock:
        _emitter = emitter
        _shut_down = False
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
    try:
        _install_sigterm_handler()
    except Exception:
        _logger.exception("otel_valgen: installing the SIGTERM handler failed")
    tell_children(settings.launch_id, settings.launch_id_origin)
    if settings.run_id_origin == "generated":
        print(
            f"otel_valgen: no run id configured (OTEL_VALGEN_RUN_ID, WANDB_RUN_ID or a wandb run); using "
            f"{settings.run_id} until this process starts a wandb run",
            file=sys.stderr,
        )
    _logger.info(
        "otel_valgen: run %s, launch %s (%s), k=%d, sending to %s",
        settings.run_id,
        settings.launch_id,
        settings.launch_id_origin,
        settings.count,
        emitter.pipeline.description,
    )
    return emitter


def follow_trackers(emitter: Emitter) -> Emitter:
    """Move to this process's tracker runs (``follow_tracker_runs``) when no step is open.

    A run started after the emitter (verl's trainer calls ``wandb.init`` or
    ``mlflow.start_run`` in its actor) then names the records of every step opened from then on.
    """
    try:
        if emitter.has_open_steps():  # a step keeps the runs it opened with; no need to look
            return emitter
        followed = follow_tracker_runs(emitter.settings)
        if followed is None:
            return emitter
        with _lock:
            if _emitter is not emitter:  # another thread moved it already, or shut it down
                return _emitter or emitter
        _logger.info(
            "otel_valgen: run id %s, tracker runs %s, launch %s (was %s, %s, %s)",
            followed.run_id,
            followed.resource_attributes,
            followed.launch_id,
            emitter.settings.run_id,
            emitter.settings.resource_attributes,
            emitter.settings.launch_id,
        )
        return install(followed)
    except Exception:
        counters.add(_stats.INTERNAL_ERRORS)
        _logger.exception("otel_valgen: following the tracker runs failed; keeping run id %s", emitter.settings.run_id)
        return emitter


def active_emitter() -> Emitter | None:
    """The emitter, configured from the environment on first use; None after shutdown."""
    emitter = _emitter
    if emitter is not None:
        return follow_trackers(emitter)
    with _lock:
        if _shut_down:
            return None
        if _emitter is not None:
            return _emitter
    return install(resolve_settings())


def install_for_testing(settings: Settings, exporter: LogRecordExporter) -> Emitter:
    """Install an emitter with a given exporter (``otel_valgen.testing``)."""
    return install(settings, exporter)


def reset_for_testing(keep_stats: bool = False) -> None:
    """Drop the emitter (and the counters unless ``keep_stats``), as if nothing was configured."""
    global _emitter, _shut_down, counters
    with _lock:
        emitter, _emitter = _emitter, None
        _shut_down = False
        if not keep_stats:
            counters = _stats.Stats()
        untell_children()
        forget_trainer_run_for_testing()
    if emitter is not None:
        emitter.shutdown(1.0)

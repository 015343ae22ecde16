"""The public functions training code calls. None of them ever raises into the caller.

The process-wide emitter is created on first use from the environment (or by
``configure``); every entry point is guarded so that a bug or bad input here costs a
counted, logged warning, never a failed training step.
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
from collections.abc import Callable, Iterable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from opentelemetry.sdk._logs.export import LogRecordExporter

from otel_valgen import _stats
from otel_valgen._emitter import Emitter
from otel_valgen._records import Batch
from otel_valgen._sanitize import clean_step
from otel_valgen._settings import Settings, follow_wandb_run, resolve_settings

if TYPE_CHECKING:
    from otel_valgen._validation import Validation

_logger = logging.getLogger("otel_valgen")

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.RLock()
_emitter: Emitter | None = None
_shut_down = False
_stats_registry = _stats.Stats()
_current: contextvars.ContextVar[Validation | None] = contextvars.ContextVar("otel_valgen_validation", default=None)
_atexit_registered = False
_sigterm_installed = False
_previous_sigterm: Callable[[int, FrameType | None], Any] | int | None = None


def _never_raise(default: object) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Catch, log and count any exception so that it never reaches the training loop."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return function(*args, **kwargs)
            except Exception:
                _stats_registry.add(_stats.INTERNAL_ERRORS)
                _logger.exception("otel_valgen: %s failed; training continues", function.__name__)
                return default  # type: ignore[return-value]

        return guarded

    return decorate


def _at_exit() -> None:
    emitter = _emitter
    if emitter is not None:
        emitter.shutdown(emitter.settings.flush_timeout_s)


def _stop_for_signal() -> None:
    """End open blocks and flush, like a normal exit, on a helper thread bounded in time.

    The helper thread keeps a signal that arrives while this thread holds one of our locks (or
    the SDK's) from deadlocking: after the flush timeout the handler goes on regardless.
    """
    global _emitter, _shut_down
    with _lock:
        emitter, _emitter = _emitter, None
        _shut_down = True
    if emitter is None:
        return
    timeout_s = emitter.settings.flush_timeout_s
    worker = threading.Thread(target=emitter.shutdown, args=(timeout_s,), name="otel-valgen-sigterm", daemon=True)
    worker.start()
    worker.join(timeout_s + 1.0)
    if worker.is_alive():
        _stats_registry.add(_stats.FLUSH_TIMEOUTS)
        _logger.warning("otel_valgen: SIGTERM: records not delivered within %.1fs", timeout_s)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: deliver open blocks, then do what the previous disposition would have done."""
    try:
        _logger.info("otel_valgen: SIGTERM: ending open validation blocks and flushing")
        _stop_for_signal()
    except Exception:
        _stats_registry.add(_stats.INTERNAL_ERRORS)
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


def _install(settings: Settings, exporter: LogRecordExporter | None = None) -> Emitter:
    global _emitter, _shut_down, _atexit_registered
    with _lock:
        previous = _emitter
        _emitter = None
    if previous is not None:
        previous.shutdown(previous.settings.flush_timeout_s)
    emitter = Emitter(settings, _stats_registry, exporter)
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
    if settings.run_id_origin == "generated":
        print(
            f"otel_valgen: no run id configured (OTEL_VALGEN_RUN_ID, WANDB_RUN_ID or a wandb run); using "
            f"{settings.run_id} until this process starts a wandb run",
            file=sys.stderr,
        )
    _logger.info(
        "otel_valgen: run %s, k=%d, sending to %s", settings.run_id, settings.count, emitter.pipeline.description
    )
    return emitter


@_never_raise(None)
def configure(
    *,
    run_id: str | None = None,
    count: int | None = None,
    seed: int | None = None,
    presample: bool | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    directory: str | None = None,
    source: str | None = None,
    max_field_bytes: int | None = None,
    flush_timeout_s: float | None = None,
    spool: bool | None = None,
    launch_id: str | None = None,
    progress_interval_s: float | None = None,
) -> Settings | None:
    """Configure this process's emitter; optional, every setting also comes from the environment.

    Args:
        run_id: the training run (default: ``OTEL_VALGEN_RUN_ID``; else this process's wandb run,
            followed when it starts later; else ``WANDB_RUN_ID``, the Ray driver's, a generated id).
        count: k, generations kept per step (``OTEL_VALGEN_COUNT``, 64).
        seed: sampling seed (``OTEL_VALGEN_SEED``, 42).
        presample: keep only the local bottom-k per step (``OTEL_VALGEN_PRESAMPLE``, on).
        endpoint: OTLP base URL, like ``OTEL_EXPORTER_OTLP_ENDPOINT`` (HTTP appends ``/v1/logs``;
            ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` is used as it is); none means the embedded sink.
        protocol: ``http/protobuf``, ``http/json`` or ``grpc`` (``OTEL_EXPORTER_OTLP_PROTOCOL``).
        directory: embedded sink folder (``OTEL_VALGEN_DIR``, ``./valgen-data``).
        source: default name of the emitting part (``OTEL_VALGEN_SOURCE``, ``main``).
        max_field_bytes: longest text field sent (``OTEL_VALGEN_MAX_FIELD_BYTES``, 65536).
        flush_timeout_s: longest a step end, block-less call or flush blocks (``OTEL_VALGEN_FLUSH_TIMEOUT``, 10).
        spool: keep records the collector did not accept in ``<directory>/spool``
            (``OTEL_VALGEN_SPOOL``, on); replay them with ``otel-valgen resend``.
        launch_id: this launch of the job, part of every record's attempt
            (``OTEL_VALGEN_LAUNCH_ID``; default a random id per process, forwarded to Ray workers).
        progress_interval_s: seconds between progress records of an open block
            (``OTEL_VALGEN_PROGRESS_INTERVAL``, 5; 0 turns them off; at least 0.05).

    Returns:
        The resolved settings, or None if configuration failed (logged).

    """
    settings = resolve_settings(
        run_id=run_id,
        count=count,
        seed=seed,
        presample=presample,
        endpoint=endpoint,
        protocol=protocol,
        directory=directory,
        source=source,
        max_field_bytes=max_field_bytes,
        flush_timeout_s=flush_timeout_s,
        spool=spool,
        launch_id=launch_id,
        progress_interval_s=progress_interval_s,
    )
    return _install(settings).settings


def _follow_wandb(emitter: Emitter) -> Emitter:
    """Move to this process's wandb run when the run id was not set explicitly and none is open.

    A run started after the emitter (verl's trainer calls ``wandb.init`` in its actor) then
    names the records of every step opened from then on.
    """
    try:
        followed = follow_wandb_run(emitter.settings)
        if followed is None or emitter.has_open_steps():
            return emitter
        with _lock:
            if _emitter is not emitter:  # another thread moved it already, or shut it down
                return _emitter or emitter
        _logger.info("otel_valgen: run id %s follows the wandb run (was %s)", followed.run_id, emitter.settings.run_id)
        return _install(followed)
    except Exception:
        _stats_registry.add(_stats.INTERNAL_ERRORS)
        _logger.exception("otel_valgen: following the wandb run failed; keeping run id %s", emitter.settings.run_id)
        return emitter


def _active_emitter() -> Emitter | None:
    """The emitter, configured from the environment on first use; None after shutdown."""
    emitter = _emitter
    if emitter is not None:
        return _follow_wandb(emitter)
    with _lock:
        if _shut_down:
            return None
        if _emitter is not None:
            return _emitter
    return _install(resolve_settings())


def _as_list(values: Any, name: str) -> Sequence[Any] | None:
    if values is None:
        return None
    if isinstance(values, str | bytes):
        raise TypeError(f"{name} must be a sequence of values, not a single {type(values).__name__}")
    tolist = getattr(values, "tolist", None)
    if callable(tolist):  # numpy arrays and torch tensors
        converted = tolist()
        return converted if isinstance(converted, list) else [converted]
    return values if isinstance(values, Sequence) else list(values)


@_never_raise(0)
def log_generations(
    inputs: Iterable[Any],
    outputs: Iterable[Any],
    scores: Iterable[Any] | None = None,
    *,
    step: int | None = None,
    ground_truths: Iterable[Any] | None = None,
    sample_ids: Iterable[Any] | None = None,
    data_sources: Iterable[Any] | None = None,
    source: str | None = None,
    count: int | None = None,
) -> int:
    """Record validation generations of one step; call any number of times, any batch size.

    Inside a ``validation`` block of the same step the generations join the block's part, sent
    when the block ends. Without one (``step=`` alone, e.g. in a Ray task) the call is a
    complete part by itself: its kept records and an end record with the step's cumulative
    counts are sent and flushed (at most the flush timeout) before it returns, so nothing
    waits for the process to exit. Consecutive such calls of a step form one attempt.

    Args:
        inputs, outputs: the prompts and the model's responses, one per generation.
        scores: reward scores (None, NaN or inf are sent without a score, and counted).
        step: the trainer's step; defaults to the enclosing ``validation`` block's step.
        ground_truths, data_sources: optional, one per generation.
        sample_ids: the dataset uid of each prompt; default a hash of the input. The i-th
            response to the same id within one call gets ``/i`` appended.
        source: the emitting part; defaults to the block's source, then the configured one.
        count: k for this step, when it differs from the configured one. When calls or
            blocks of one step ask for different k, the smallest wins (docs/architecture.md).

    Returns:
        How many generations were accepted (0 when the batch was dropped; see ``stats()``).

    """
    block = _current.get()
    emitter = _active_emitter()
    raw = {
        "inputs": inputs,
        "outputs": outputs,
        "scores": scores,
        "ground_truths": ground_truths,
        "sample_ids": sample_ids,
        "data_sources": data_sources,
    }
    try:
        columns = {name: _as_list(values, name) for name, values in raw.items()}
    except TypeError as error:
        sizes = [len(v) for v in raw.values() if isinstance(v, Sequence) and not isinstance(v, str | bytes)]
        _stats_registry.drop("bad_columns", max(sizes, default=1), "log_generations: %s", error)
        return 0
    lengths = {name: len(values) for name, values in columns.items() if values is not None}
    size = max(lengths.values(), default=0)
    if emitter is None:
        _stats_registry.drop("after_shutdown", size, "log_generations called after shutdown()")
        return 0
    resolved_step = clean_step(step if step is not None else (block.step if block is not None else None))
    if resolved_step is None:
        _stats_registry.drop(
            "missing_step",
            size,
            "log_generations needs step= (an int) or an enclosing vg.validation(step=...) block; got %r",
            step,
        )
        return 0
    if len(set(lengths.values())) > 1:
        _stats_registry.drop("length_mismatch", size, "log_generations got columns of unequal lengths %s", lengths)
        if block is not None and block.state is not None:
            block.state.dropped += size
        return 0
    # The enclosing block supplies the source, trace context and k only for its own step.
    same_step = block if block is not None and block.step == resolved_step else None
    name = source or (same_step.source if same_step is not None else None) or emitter.settings.source
    step_count = count if count is not None else (same_step.count if same_step is not None else None)
    batch = Batch(
        inputs=columns["inputs"] or [],
        outputs=columns["outputs"] or [],
        scores=columns["scores"],
        ground_truths=columns["ground_truths"],
        sample_ids=columns["sample_ids"],
        data_sources=columns["data_sources"],
    )
    if same_step is None:  # block-less: a complete part by itself, delivered before returning
        return emitter.log_part(resolved_step, name, batch, step_count)
    state = emitter.open_step(resolved_step, name, same_step.context, count=step_count)
    return emitter.log(state, batch)


@_never_raise(False)
def end_step(step: int, *, source: str | None = None, sources_expected: int | None = None) -> bool:
    """End this process's part of ``step``: send its kept records and end record, then flush.

    After block-less ``log_generations`` calls of the step (already delivered) it only ends
    the step here, sending one more end record when ``sources_expected`` is new. Blocks at
    most the flush timeout. Returns True when everything was confirmed sent.
    """
    emitter = _active_emitter()
    resolved_step = clean_step(step)
    if emitter is None or resolved_step is None:
        _stats_registry.warn("end_step_ignored", "end_step(%r) ignored: no step or after shutdown", step)
        return False
    return emitter.end_step(resolved_step, source or emitter.settings.source, sources_expected)


@_never_raise(False)
def flush(timeout_s: float = 10.0) -> bool:
    """Export everything queued; block at most ``timeout_s``. True when all was confirmed."""
    emitter = _emitter
    return emitter.flush(timeout_s) if emitter is not None else True


@_never_raise(False)
def shutdown(timeout_s: float | None = None) -> bool:
    """End open steps, flush and stop; later calls are counted as dropped, never raised."""
    global _emitter, _shut_down
    with _lock:
        emitter, _emitter = _emitter, None
        _shut_down = True
    if emitter is None:
        return True
    return emitter.shutdown(emitter.settings.flush_timeout_s if timeout_s is None else timeout_s)


def stats() -> dict[str, int]:
    """Counters of this process: generations seen, emitted, dropped (by reason), exported..."""
    snapshot = _stats_registry.snapshot()
    confirmed = (
        snapshot[_stats.RECORDS_EXPORTED] + snapshot[_stats.RECORDS_EXPORT_FAILED] + snapshot[_stats.RECORDS_SPOOLED]
    )
    handed = snapshot[_stats.GENERATIONS_EMITTED] + sum(
        snapshot.get(name, 0)
        for name in (_stats.END_RECORDS_EMITTED, _stats.START_RECORDS_EMITTED, _stats.PROGRESS_RECORDS_EMITTED)
    )
    snapshot["records_unconfirmed"] = max(0, handed - confirmed)
    return snapshot


def current_settings() -> Settings | None:
    """The settings in force (the run id following a wandb run started since), or None before configuration."""
    emitter = _emitter
    return _follow_wandb(emitter).settings if emitter is not None else None


def _install_for_testing(settings: Settings, exporter: LogRecordExporter) -> Emitter:
    """Install an emitter with a given exporter (``otel_valgen.testing``)."""
    return _install(settings, exporter)


def _reset_for_testing(keep_stats: bool = False) -> None:
    """Drop the emitter (and the counters unless ``keep_stats``), as if nothing was configured."""
    global _emitter, _shut_down, _stats_registry
    with _lock:
        emitter, _emitter = _emitter, None
        _shut_down = False
        if not keep_stats:
            _stats_registry = _stats.Stats()
    if emitter is not None:
        emitter.shutdown(1.0)

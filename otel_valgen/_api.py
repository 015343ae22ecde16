"""The public functions training code calls. None of them ever raises into the caller.

The process-wide emitter is created on first use from the environment (or by
``configure``); every entry point is guarded so that a bug or bad input here costs a
counted, logged warning, never a failed training step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence, Sized
from typing import Any, Final

from otel_valgen import _process, _stats, contract
from otel_valgen._emitter import StepState
from otel_valgen._process import never_raise
from otel_valgen._records import Batch, ExtraColumns, RolloutColumns
from otel_valgen._sanitize import clean_step
from otel_valgen._settings import Settings, resolve_settings


@never_raise(None)
def configure(
    *,
    run_id: str | None = None,
    count: int | None = None,
    rollout_count: int | None = None,
    rollout_rate: float | None = None,
    sample_by: str | None = None,
    extremes: int | None = None,
    mismatched: int | None = None,
    seed: int | None = None,
    presample: bool | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    directory: str | None = None,
    source: str | None = None,
    max_field_bytes: int | None = None,
    max_messages_bytes: int | None = None,
    max_token_bytes: int | None = None,
    flush_timeout_s: float | None = None,
    spool: bool | None = None,
    spool_max_mb: int | None = None,
    launch_id: str | None = None,
    progress_interval_s: float | None = None,
) -> Settings | None:
    """Configure this process's emitter; optional, every setting also comes from the environment.

    Args:
        run_id: the training run (default: ``OTEL_VALGEN_RUN_ID``; else this process's wandb run,
            followed when it starts later; else ``WANDB_RUN_ID``, the Ray driver's, a generated id).
        count: k, generations kept per step (``OTEL_VALGEN_COUNT``, 64).
        rollout_count: k of training rollouts, prompts kept per step with all their responses
            (``OTEL_VALGEN_ROLLOUT_COUNT``, 0: ``log_rollouts`` sends nothing).
        rollout_rate: watch-list rate of training rollouts in (0, 1] (``OTEL_VALGEN_ROLLOUT_RATE``,
            unset: off): a step keeps the prompts whose key is below ``floor(rate * 2**63)``, the
            same prompts every time they come back, at most ``rollout_count`` of them.
        sample_by: ``step`` or ``data_source``: keep k per step, or per (step, data source), for
            validation and rollouts (``OTEL_VALGEN_SAMPLE_BY``, ``step``).
        extremes: n, keep the n lowest- and n highest-scored validation generations of each step
            (of each data source) beside the k keyed picks (``OTEL_VALGEN_EXTREMES``, 0: off).
        mismatched: n, keep the n training rollout responses of each step (of each data source)
            with the largest KL between the rollout engine's and the trainer's log-probabilities
            beside the k keyed prompts (``OTEL_VALGEN_MISMATCHED``, 0: off).
        seed: sampling seed (``OTEL_VALGEN_SEED``, 42).
        presample: keep only the local bottom-k per step (``OTEL_VALGEN_PRESAMPLE``, on).
        endpoint: OTLP base URL, like ``OTEL_EXPORTER_OTLP_ENDPOINT`` (HTTP appends ``/v1/logs``;
            ``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`` is used as it is); none means the embedded sink.
        protocol: ``http/protobuf``, ``http/json`` or ``grpc`` (``OTEL_EXPORTER_OTLP_PROTOCOL``).
        directory: embedded sink folder (``OTEL_VALGEN_DIR``, ``./valgen-data``).
        source: default name of the emitting part (``OTEL_VALGEN_SOURCE``, ``main``).
        max_field_bytes: longest text field sent (``OTEL_VALGEN_MAX_FIELD_BYTES``, 65536).
        max_messages_bytes: budget of a record's conversation texts together
            (``OTEL_VALGEN_MAX_MESSAGES_BYTES``, 131072; README, *Conversations*).
        max_token_bytes: budget of a kept rollout response's packed per-token data
            (``OTEL_VALGEN_MAX_TOKEN_BYTES``, 1048576; docs/rollouts.md, *Token by token*).
        flush_timeout_s: longest a step end, block-less call or flush waits for the endpoint
            (``OTEL_VALGEN_FLUSH_TIMEOUT``, 2); past it the endpoint counts as away until it answers again.
        spool: while the endpoint is away, keep records in ``<directory>/spool`` and send them by
            themselves when it is back (``OTEL_VALGEN_SPOOL``, on).
        spool_max_mb: largest spool file of this process, MiB (``OTEL_VALGEN_SPOOL_MAX_MB``, 1024).
        launch_id: this launch of the job, part of every record's attempt
            (``OTEL_VALGEN_LAUNCH_ID``; default: the launcher's (README, *Launches*), else the
            process group's, else ``run``;
            forwarded to Ray workers).
        progress_interval_s: seconds between progress records of an open block
            (``OTEL_VALGEN_PROGRESS_INTERVAL``, 5; 0 turns them off; at least 0.05).

    Returns:
        The resolved settings, or None if configuration failed (logged).

    """
    settings = resolve_settings(
        run_id=run_id,
        count=count,
        rollout_count=rollout_count,
        rollout_rate=rollout_rate,
        sample_by=sample_by,
        extremes=extremes,
        mismatched=mismatched,
        seed=seed,
        presample=presample,
        endpoint=endpoint,
        protocol=protocol,
        directory=directory,
        source=source,
        max_field_bytes=max_field_bytes,
        max_messages_bytes=max_messages_bytes,
        max_token_bytes=max_token_bytes,
        flush_timeout_s=flush_timeout_s,
        spool=spool,
        spool_max_mb=spool_max_mb,
        launch_id=launch_id,
        progress_interval_s=progress_interval_s,
    )
    return _process.install(settings).settings


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


_EXTRA_NAME: Final = re.compile(contract.EXTRA_NAME_PATTERN)
_NAMES_LISTED: Final = 5


def _listed(names: list[str]) -> str:
    """The first few of ``names`` for a warning, and how many more there are."""
    shown = ", ".join(names[:_NAMES_LISTED])
    return shown + (f" and {len(names) - _NAMES_LISTED} more" if len(names) > _NAMES_LISTED else "")


def _extra_label(name: str) -> str:
    """How an extra column is named among a call's columns (in the length-mismatch warning, say)."""
    return f"extra[{name}]"


def _extra_columns(extra: object, caller: str = "log_generations") -> dict[str, Any]:
    """The extra columns a call may send: valid names, at most ``MAX_EXTRA_COLUMNS``, in the mapping's order.

    Every other column is dropped whole, counted in ``extra_columns_dropped`` and named in one
    warning for the call. A column given as None is no column, as for the other optional columns.
    """
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        _process.counters.add(_stats.EXTRA_COLUMNS_DROPPED)
        _process.counters.warn(
            "extra_columns_dropped",
            "%s: extra must map column names to values, not a %s; no extra column sent",
            caller,
            type(extra).__name__,
        )
        return {}
    columns: dict[str, Any] = {}
    invalid: list[str] = []
    over: list[str] = []
    for name, values in extra.items():
        if not isinstance(name, str) or _EXTRA_NAME.fullmatch(name) is None:
            invalid.append(repr(name)[:80])
        elif values is None:
            continue
        elif len(columns) < contract.MAX_EXTRA_COLUMNS:
            columns[name] = values
        else:
            over.append(name)
    if invalid or over:
        _process.counters.add(_stats.EXTRA_COLUMNS_DROPPED, len(invalid) + len(over))
        problems = []
        if invalid:
            problems.append(f"invalid names {_listed(invalid)} (a name is 1 to 64 of A-Z a-z 0-9 _ . / -)")
        if over:
            problems.append(f"more than {contract.MAX_EXTRA_COLUMNS} columns: {_listed(over)}")
        _process.counters.warn(
            "extra_columns_dropped",
            "%s: %d extra column(s) dropped: %s",
            caller,
            len(invalid) + len(over),
            "; ".join(problems),
        )
    return columns


@never_raise(0)
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
    extra: Mapping[str, Iterable[Any]] | None = None,
    response_lengths: Iterable[Any] | None = None,
    truncated: Iterable[Any] | None = None,
    tool_rewards: Iterable[Any] | None = None,
    turn_scores: Iterable[Any] | None = None,
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
            response to the same id in this process's part of the step (over its calls) gets
            ``/i`` appended, then the part's ``@<tag>`` (README, *Sample ids*).
        source: the emitting part; defaults to the block's source, then the configured one.
        count: k for this step, when it differs from the configured one. When calls or
            blocks of one step ask for different k, the smallest wins (docs/architecture.md).
        extra: more columns, ``{name: one value per generation}`` (e.g. TRL's reward functions,
            verl's ``reward_extra_info``), each sent as ``valgen.extra.<name>``. Values are
            bools, ints, finite floats or texts (numpy/torch scalars converted, texts repaired
            and cut like the others); a list, tuple, dict, set, array or tensor is sent as its
            JSON text (keys sorted, NaN/inf as ``"nan"``/``"inf"``), cut like a text; any other
            value (None, NaN, inf, an object) is left out of its record. A name is 1
            to 64 of ``A-Z a-z 0-9 _ . / -``; columns with other names, and columns past the
            32nd, are dropped. A column of the wrong length drops the call, as for ``scores``.
        response_lengths, truncated: optional, one per generation: the response's length in
            tokens (an int) and whether generation stopped at the length limit (a bool), sent as
            ``valgen.response_length`` and ``valgen.truncated`` as rollouts carry them.
        tool_rewards, turn_scores: optional, one list of numbers per generation: the rewards its
            tool calls returned, and the score of each of its turns (verl's agent loop columns).
            Only the figures over every trajectory read them (``otel_valgen.trajectories``), for
            the outputs that are conversations; a bad value (None, NaN, inf, a text, a list in
            the list) is left out of them and counted in ``trajectory_rewards_invalid``.

    Returns:
        How many generations were accepted (0 when the batch was dropped; see ``stats()``).

    """
    columns: dict[str, Any] = {
        "inputs": inputs,
        "outputs": outputs,
        "scores": scores,
        "ground_truths": ground_truths,
        "sample_ids": sample_ids,
        "data_sources": data_sources,
        "response_lengths": response_lengths,
        "truncated": truncated,
        "tool_rewards": tool_rewards,
        "turn_scores": turn_scores,
    }
    try:
        return _log_columns(columns, step=step, source=source, count=count, extra=extra)
    except Exception as error:
        # The emitter raises nothing once it counted a batch, so nothing of this call is counted yet.
        size = _call_size(columns)
        _process.counters.add(_stats.GENERATIONS_SEEN, size)
        _process.counters.failed("in log_generations", error, size)
        return 0


def _call_size(columns: Mapping[str, Any]) -> int:
    """How many generations a call passed: its longest column with a length (1 when none has one)."""
    sizes = []
    for values in columns.values():
        if isinstance(values, Sized) and not isinstance(values, str | bytes):
            try:
                sizes.append(len(values))
            except TypeError:  # a 0-d numpy array
                continue
    return max(sizes, default=1)


def _drop_call(state: StepState | None, reason: str, size: int, message: str, *args: object) -> int:
    """Count a call dropped whole: seen and dropped, in ``state``'s end record too (its block's). Returns 0."""
    emitter = _process.current_emitter()
    if state is not None and emitter is not None:
        emitter.refuse(state, size)
    else:
        _process.counters.add(_stats.GENERATIONS_SEEN, size)
    _process.counters.drop(reason, size, message, *args)
    return 0


def _log_columns(
    columns: dict[str, Any],
    *,
    step: int | None,
    source: str | None,
    count: int | None,
    extra: Mapping[str, Iterable[Any]] | None,
) -> int:
    """``log_generations`` once its arguments are gathered; ``columns`` is read into lists in place."""
    block = _process.current_block.get()
    emitter = _process.active_emitter()
    resolved_step = clean_step(step if step is not None else (block.step if block is not None else None))
    # The enclosing block supplies the source, trace context and k only for its own step.
    same_step = block if block is not None and block.step == resolved_step else None
    block_state = same_step.state if same_step is not None else None
    extras = _extra_columns(extra)
    columns.update({_extra_label(name): values for name, values in extras.items()})
    try:
        columns.update({name: _as_list(values, name) for name, values in columns.items()})
    except TypeError as error:
        return _drop_call(block_state, "bad_columns", _call_size(columns), "log_generations: %s", error)
    lengths = {name: len(values) for name, values in columns.items() if values is not None}
    size = max(lengths.values(), default=0)
    if emitter is None:
        return _drop_call(None, "after_shutdown", size, "log_generations called after shutdown()")
    if resolved_step is None:
        return _drop_call(
            None,
            "missing_step",
            size,
            "log_generations needs step= (an int) or an enclosing vg.validation(step=...) block; got %r",
            step,
        )
    if len(set(lengths.values())) > 1:
        return _drop_call(
            block_state, "length_mismatch", size, "log_generations got columns of unequal lengths %s", lengths
        )
    name = source or (same_step.source if same_step is not None else None) or emitter.settings.source
    step_count = count if count is not None else (same_step.count if same_step is not None else None)
    batch = Batch(
        inputs=columns["inputs"] or [],
        outputs=columns["outputs"] or [],
        scores=columns["scores"],
        ground_truths=columns["ground_truths"],
        sample_ids=columns["sample_ids"],
        data_sources=columns["data_sources"],
        extra=ExtraColumns(
            keys=tuple(contract.EXTRA_PREFIX + name for name in extras),
            columns=tuple(columns[_extra_label(name)] or () for name in extras),
        )
        if extras
        else None,
        rollout=RolloutColumns(
            None,
            None,
            columns["response_lengths"],
            columns["truncated"],
            tool_rewards=columns["tool_rewards"],
            turn_scores=columns["turn_scores"],
        )
        if any(columns[name] is not None for name in ("response_lengths", "truncated", "tool_rewards", "turn_scores"))
        else None,
    )
    if same_step is None:  # block-less: a complete part by itself, delivered before returning
        return emitter.log_part(resolved_step, name, batch, step_count)
    state = emitter.open_step(resolved_step, name, same_step.context, count=step_count)
    return emitter.log(state, batch)


@never_raise(False)
def end_step(step: int, *, source: str | None = None, sources_expected: int | None = None) -> bool:
    """End this process's part of ``step``: send its kept records and end record, then flush.

    After block-less ``log_generations`` calls of the step (already delivered) it only ends
    the step here, sending one more end record when ``sources_expected`` is new. Blocks at
    most the flush timeout. Returns True when everything was confirmed sent.
    """
    emitter = _process.active_emitter()
    resolved_step = clean_step(step)
    if emitter is None or resolved_step is None:
        _process.counters.warn("end_step_ignored", "end_step(%r) ignored: no step or after shutdown", step)
        return False
    return emitter.end_step(resolved_step, source or emitter.settings.source, sources_expected)


@never_raise(False)
def flush(timeout_s: float = 10.0) -> bool:
    """Export everything queued; block at most ``timeout_s``. True when all was confirmed."""
    emitter = _process.current_emitter()
    return emitter.flush(timeout_s) if emitter is not None else True


@never_raise(False)
def shutdown(timeout_s: float | None = None) -> bool:
    """End open steps, flush and stop; later calls are counted as dropped, never raised."""
    emitter = _process.take_emitter()
    if emitter is None:
        return True
    return emitter.shutdown(emitter.settings.flush_timeout_s if timeout_s is None else timeout_s)


def stats() -> dict[str, int]:
    """Counters of this process: generations seen, emitted, dropped (by reason), sampled out, held, exported...

    ``generations_seen == generations_emitted + generations_dropped + generations_sampled_out +
    generations_held`` whenever no call is in progress.
    """
    emitter = _process.current_emitter()
    held = emitter.held() if emitter is not None else 0
    snapshot = _process.counters.snapshot()
    snapshot["generations_held"] = held
    confirmed = (
        snapshot[_stats.RECORDS_EXPORTED] + snapshot[_stats.RECORDS_EXPORT_FAILED] + snapshot[_stats.RECORDS_SPOOLED]
    )
    handed = snapshot[_stats.GENERATIONS_EMITTED] + sum(
        snapshot.get(name, 0)
        for name in (_stats.END_RECORDS_EMITTED, _stats.START_RECORDS_EMITTED, _stats.PROGRESS_RECORDS_EMITTED)
    )
    snapshot["records_unconfirmed"] = max(0, handed - confirmed)
    exporter = emitter.pipeline.exporter if emitter is not None else None
    snapshot[_stats.SPOOL_RECORDS_WAITING] = exporter.spool_waiting() if exporter is not None else 0
    snapshot[_stats.ENDPOINT_AWAY] = int(exporter is not None and exporter.away)
    return snapshot


def current_settings() -> Settings | None:
    """The settings in force (the run id following a wandb run started since), or None before configuration."""
    emitter = _process.current_emitter()
    return _process.follow_trackers(emitter).settings if emitter is not None else None

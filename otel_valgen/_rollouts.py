"""``log_rollouts``: training rollouts, sampled by prompt (``valgen.kind = rollout``).

A rollout call is one block-less part of its step (rollouts have no blocks), of its own kind:
its records never share a group with the step's validation. The step keeps the k prompts
with the smallest prompt keys, each with every one of its responses (the group view,
``otel_valgen.sampling.GroupView``); with presampling on, this process sends only its own
bottom-k prompts, keyed before any record is built. k is ``count``, else the setting
``rollout_count`` (``OTEL_VALGEN_ROLLOUT_COUNT``); 0, the default, sends nothing and costs
nothing. With ``rollout_rate`` (``OTEL_VALGEN_ROLLOUT_RATE``, the watch-list) a step keeps the
prompts whose key is below ``floor(rate * 2**63)`` instead, at most k of them, so a prompt kept
once is kept every time it comes back. docs/rollouts.md has the design and what is still to come.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from otel_valgen import _process, _stats, contract
from otel_valgen._api import _as_list, _call_size, _drop_call, _extra_columns, _extra_label
from otel_valgen._process import never_raise
from otel_valgen._records import Batch, ExtraColumns, RolloutColumns
from otel_valgen._sanitize import clean_step
from otel_valgen.tokens import check_columns

__all__ = ["log_rollouts"]


@never_raise(0)
def log_rollouts(
    prompts: Iterable[Any],
    responses: Iterable[Any],
    rewards: Iterable[Any] | None = None,
    *,
    step: int,
    prompt_ids: Iterable[Any] | None = None,
    advantages: Iterable[Any] | None = None,
    response_lengths: Iterable[Any] | None = None,
    truncated: Iterable[Any] | None = None,
    param_versions: Iterable[Any] | None = None,
    ground_truths: Iterable[Any] | None = None,
    data_sources: Iterable[Any] | None = None,
    source: str | None = None,
    count: int | None = None,
    extra: Mapping[str, Iterable[Any]] | None = None,
    tool_rewards: Iterable[Any] | None = None,
    turn_scores: Iterable[Any] | None = None,
    tokens: Mapping[str, Any] | None = None,
) -> int:
    """Record the rollouts of one training step: one entry per response, all n responses of a prompt together.

    The call is a complete part of the step: its kept records and an end record (with the
    cumulative counts, and ``valgen.prompts_seen``) are sent and flushed, at most the flush
    timeout, before it returns. Response sample ids are ``<prompt id>/<i>@<tag>``, i counting the
    prompt's responses over this process's calls of the step, so a later call adds responses.

    Args:
        prompts, responses: the prompt of each response (repeated n times), and the responses.
        rewards: each response's reward (sent as ``valgen.score``; NaN, inf, None: no score).
        step: the trainer step that consumed the batch.
        prompt_ids: each response's prompt id (``valgen.prompt_id``), the same for a prompt in
            every epoch (a dataset index or uid); default: derived from the prompt's text. The
            prompt's key is ``sample_key(seed, prompt id)``, so a prompt is chosen again when it
            comes back.
        advantages: each response's advantage (``valgen.advantage``, a double).
        response_lengths: each response's length in tokens (``valgen.response_length``).
        truncated: whether each response was cut at the length limit (``valgen.truncated``).
        param_versions: the parameter version that generated each response (``valgen.param_version``,
            an int; asynchronous training, where ``step`` minus it is the response's staleness).
        ground_truths, data_sources: optional, one per response.
        source: the emitting part; default the configured one.
        count: k, prompts kept for this step; default ``rollout_count`` (0: nothing is sent).
        extra: more columns (e.g. verl's ``reward_extra_info``), as for ``log_generations``.
        tool_rewards, turn_scores: one list of numbers per response (verl's agent loop columns),
            read only by the figures over every trajectory, as for ``log_generations``.
        tokens: per-token columns, by name (``otel_valgen.tokens``: ``ids``, ``pieces``, ``rollout``,
            ``trainer``, ``reference``, ``weight``, ``masked``, ``model``), each one row per
            response (a list, array or tensor of its tokens' values) or one 2-D array or tensor.
            Every response's mismatch figures go into the step's ``valgen.mismatch``; the kept
            ones carry their tokens (``valgen.tokens``) and figures. Rows padded past a response's
            length are read up to ``response_lengths``, or up to the mapping's ``length`` (one count
            per response; ``tokens.LENGTH``) when given.

    Returns:
        How many responses were accepted (0 when rollouts are off or the batch was dropped).

    """
    columns: dict[str, Any] = {
        "prompts": prompts,
        "responses": responses,
        "rewards": rewards,
        "prompt_ids": prompt_ids,
        "advantages": advantages,
        "response_lengths": response_lengths,
        "truncated": truncated,
        "param_versions": param_versions,
        "ground_truths": ground_truths,
        "data_sources": data_sources,
        "tool_rewards": tool_rewards,
        "turn_scores": turn_scores,
    }
    try:
        return _log_rollout_columns(columns, step=step, source=source, count=count, extra=extra, tokens=tokens)
    except Exception as error:
        size = _call_size(columns)
        _process.counters.add(_stats.GENERATIONS_SEEN, size)
        _process.counters.failed("in log_rollouts", error, size)
        return 0


def _token_columns(columns: object, size: int) -> dict[str, Any] | None:
    """The call's per-token columns that can be read; the others are left out, counted and warned about."""
    if columns is None:
        return None
    kept, problems = check_columns(columns, size)
    if problems:
        _process.counters.add(_stats.TOKEN_COLUMNS_DROPPED, len(problems))
        _process.counters.warn("token_columns_dropped", "log_rollouts: tokens left out: %s", "; ".join(problems))
    return kept or None


def _log_rollout_columns(
    columns: dict[str, Any], *, step: int, source: str | None, count: int | None, extra: object, tokens: object
) -> int:
    """``log_rollouts`` once its arguments are gathered; ``columns`` is read into lists in place."""
    emitter = _process.active_emitter()
    k = count if count is not None else (emitter.settings.rollout_count if emitter is not None else 0)
    if emitter is not None and k == 0:
        return 0  # rollouts are off: nothing computed, nothing counted
    extras = _extra_columns(extra, "log_rollouts")
    columns.update({_extra_label(name): values for name, values in extras.items()})
    try:
        columns.update({name: _as_list(values, name) for name, values in columns.items()})
    except TypeError as error:
        return _drop_call(None, "bad_columns", _call_size(columns), "log_rollouts: %s", error)
    lengths = {name: len(values) for name, values in columns.items() if values is not None}
    size = max(lengths.values(), default=0)
    resolved_step = clean_step(step)
    if emitter is None:
        return _drop_call(None, "after_shutdown", size, "log_rollouts called after shutdown()")
    if resolved_step is None:
        return _drop_call(None, "missing_step", size, "log_rollouts needs step= (an int); got %r", step)
    if len(set(lengths.values())) > 1:
        return _drop_call(None, "length_mismatch", size, "log_rollouts got columns of unequal lengths %s", lengths)
    batch = Batch(
        inputs=columns["prompts"] or [],
        outputs=columns["responses"] or [],
        scores=columns["rewards"],
        ground_truths=columns["ground_truths"],
        sample_ids=None,
        data_sources=columns["data_sources"],
        extra=ExtraColumns(
            keys=tuple(contract.EXTRA_PREFIX + name for name in extras),
            columns=tuple(columns[_extra_label(name)] or () for name in extras),
        )
        if extras
        else None,
        rollout=RolloutColumns(
            prompt_ids=columns["prompt_ids"],
            advantages=columns["advantages"],
            response_lengths=columns["response_lengths"],
            truncated=columns["truncated"],
            param_versions=columns["param_versions"],
            tool_rewards=columns["tool_rewards"],
            turn_scores=columns["turn_scores"],
            tokens=_token_columns(tokens, size),
        ),
    )
    name = source or emitter.settings.source
    return emitter.log_part(resolved_step, name, batch, k, kind=contract.KIND_ROLLOUT)

"""Counters of everything the emitter did, dropped or repaired, and rate-limited warnings.

Every drop and every repair of bad input increments a named counter and logs a warning on
the ``otel_valgen`` logger (the first few of each kind, then every 1000th), so nothing is
lost silently and a noisy job does not flood its own logs.

The generation counters balance: every generation a call passes is counted in
``generations_seen`` and then in exactly one of ``generations_emitted``,
``generations_dropped`` (by reason), ``generations_sampled_out``, or is still held in an open
step's bottom-k (``generations_held``, computed by ``stats()``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Final

_logger = logging.getLogger("otel_valgen")

_WARN_FIRST: Final = 5
_WARN_EVERY: Final = 1000

# Counter names, documented in the README's "Bad input" table.
GENERATIONS_SEEN: Final = "generations_seen"
GENERATIONS_EMITTED: Final = "generations_emitted"
GENERATIONS_DROPPED: Final = "generations_dropped"
GENERATIONS_SAMPLED_OUT: Final = "generations_sampled_out"  # left out of the local bottom-k: a choice, not a loss
END_RECORDS_EMITTED: Final = "end_records_emitted"
START_RECORDS_EMITTED: Final = "start_records_emitted"
PROGRESS_RECORDS_EMITTED: Final = "progress_records_emitted"
RECORDS_EXPORTED: Final = "records_exported"
RECORDS_EXPORT_FAILED: Final = "records_export_failed"
RECORDS_SPOOLED: Final = "records_spooled"
RECORDS_RESENT: Final = "records_resent"  # spooled records the courier delivered (this process's and orphans')
ENDPOINT_OUTAGES: Final = "endpoint_outages"  # times the endpoint went away (a failed or unanswered delivery)
SPOOL_RECORDS_WAITING: Final = "spool_records_waiting"  # computed by stats(): spooled, not yet delivered
ENDPOINT_AWAY: Final = "endpoint_away"  # computed by stats(): 1 while records go to the spool
REPLACED_CHARS: Final = "replaced_chars"
TRUNCATED_FIELDS: Final = "truncated_fields"
INVALID_SCORES: Final = "invalid_scores"
COERCED_VALUES: Final = "coerced_values"
MESSAGES_REPAIRED: Final = "messages_repaired"  # chat messages or parts repaired (otel_valgen.conversations)
EXTRA_VALUES_INVALID: Final = "extra_values_invalid"  # extra values omitted from their record
EXTRA_COLUMNS_DROPPED: Final = "extra_columns_dropped"  # extra columns dropped whole (bad name, too many)
# tool_rewards / turn_scores values left out of the figures over every trajectory (otel_valgen.trajectories)
TRAJECTORY_REWARDS_INVALID: Final = "trajectory_rewards_invalid"
TOKEN_COLUMNS_DROPPED: Final = "token_columns_dropped"  # per-token columns left out whole (unknown name, bad length)
TOKEN_VALUES_REPAIRED: Final = (
    "token_values_repaired"  # per-token values sent as missing (not numbers), pieces repaired
)
TOKENS_CUT: Final = "tokens_cut"  # tokens left out of a kept response's valgen.tokens (its record's budget)
# verl's own validation table ran in this process instead of otel-valgen (integrations.verl)
VERL_TABLES_UNROUTED: Final = "verl_tables_unrouted"
# a column of verl's validation rows (ground truth, data source, reward columns, sizes) could not be read
VERL_ROW_COLUMNS_MISSING: Final = "verl_row_columns_missing"
# a per-token column verl's training batch does not have (or a setting leaves out): its rollouts are sent without it
VERL_TOKEN_COLUMNS_MISSING: Final = "verl_token_columns_missing"
# a verl trainer's rollout hook point is missing or changed: its training batches are not sent (integrations.verl)
VERL_ROLLOUT_HOOKS_MISSING: Final = "verl_rollout_hooks_missing"
# a v1 training step whose rows verl's trainer did not leave held (integrations.verl._v1_capture): fetched instead
VERL_V1_ROWS_FETCHED: Final = "verl_v1_rows_fetched"
FLUSH_TIMEOUTS: Final = "flush_timeouts"
INTERNAL_ERRORS: Final = "internal_errors"
DROP_PREFIX: Final = "dropped."
INTERNAL_ERROR: Final = "internal_error"  # the drop reason and warning kind of our own failures


class Stats:
    """Thread-safe named counters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._warned: Counter[str] = Counter()

    def add(self, name: str, value: int = 1) -> None:
        """Add ``value`` to counter ``name``."""
        if value:
            with self._lock:
                self._counts[name] += value

    def drop(self, reason: str, generations: int, message: str, *args: object) -> None:
        """Count ``generations`` dropped for ``reason`` and warn about it."""
        self.add(GENERATIONS_DROPPED, generations)
        self.add(DROP_PREFIX + reason, generations)
        self.warn(reason, message + " (%d generation(s) dropped)", *args, generations)

    def failed(self, stage: str, error: Exception, generations: int = 0) -> None:
        """Count an internal failure in ``stage`` and the generations it lost; warn once, naming the cause.

        The warning is rate-limited like the others; the traceback goes to the debug log.
        """
        self.add(INTERNAL_ERRORS)
        try:
            cause = f"{type(error).__name__}: {error}"
        except Exception:  # a str() that raises must not escape the guards that call this
            cause = type(error).__name__
        if generations:
            self.drop(INTERNAL_ERROR, generations, "internal error %s (%s)", stage, cause)
        else:
            self.warn(INTERNAL_ERROR, "internal error %s (%s)", stage, cause)
        _logger.debug("otel_valgen: internal error %s", stage, exc_info=error)

    def warn(self, kind: str, message: str, *args: object) -> None:
        """Log a warning of ``kind``: the first few, then every 1000th, with the running count."""
        with self._lock:
            self._warned[kind] += 1
            seen = self._warned[kind]
        if seen <= _WARN_FIRST or seen % _WARN_EVERY == 0:
            _logger.warning("otel_valgen: " + message + " [%s #%d]", *args, kind, seen)

    def get(self, name: str) -> int:
        """The current value of one counter."""
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        """All counters, including the zero ones users look for first."""
        with self._lock:
            counts = dict(self._counts)
        for name in (
            GENERATIONS_SEEN,
            GENERATIONS_EMITTED,
            GENERATIONS_DROPPED,
            GENERATIONS_SAMPLED_OUT,
            INTERNAL_ERRORS,
            RECORDS_EXPORTED,
            RECORDS_EXPORT_FAILED,
            RECORDS_SPOOLED,
            RECORDS_RESENT,
            ENDPOINT_OUTAGES,
        ):
            counts.setdefault(name, 0)
        return dict(sorted(counts.items()))

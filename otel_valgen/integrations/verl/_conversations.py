"""verl's rows as conversations: the prompt's messages in, the trajectory's turns out.

Both kinds of rows (validation and training rollouts) are read the same way from a batch's
columns (``_layout.RAW_PROMPT_COLUMN``, ``_layout.MESSAGES_COLUMN``, ``_layout.NUM_TURNS_COLUMNS``):

- input: the row's ``raw_prompt`` messages;
- output: the messages the agent loop appended (``_agent_loop``: assistant turns with their
  ``tool_calls``, ``tool`` messages, in order); a single-turn row (2 turns, or no tool tokens in
  its ``response_mask``) without them: one assistant message, the decoded response, which is what
  verl's single-turn loop generated.

What is not there leaves the row as text, as before: without ``raw_prompt`` the whole row; a
multi-turn row without its captured messages its output (its decoded text mixes the tools'
tokens in). Each is counted in ``stats()["verl_row_columns_missing"]`` and warned about once.
Prompt and sample ids stay those of the decoded prompt text, so choices do not move.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, overload

from otel_valgen import _process, _stats, conversations
from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN, NUM_TURNS_COLUMNS, RAW_PROMPT_COLUMN

if TYPE_CHECKING:  # numpy comes with verl; the library alone does not need it
    import numpy as np

_logger = logging.getLogger("otel_valgen")
_warned: set[str] = set()

SINGLE_TURN = 2  # verl counts the prompt's user turn and one assistant turn


class Lazy(Sequence[Any]):
    """``size`` values, row i made by ``make(i)`` only when it is read (``log_rollouts`` reads the kept rows)."""

    def __init__(self, size: int, make: Callable[[int], Any], peek: Callable[[int], Any] | None = None) -> None:
        self._size = size
        self._make = make
        self._peek = peek

    def messages_for_figures(self, index: int) -> Any:
        """Row ``index``'s messages for the figures over every trajectory, no text decoded (None: no figures)."""
        return self._peek(index) if self._peek is not None else None

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if not -self._size <= index < self._size:
            raise IndexError(index)
        return self._make(index % self._size)


_ONE_TURN: Final = ({"role": "assistant", "content": ""},)
"""A single-turn row's output for the figures: one object for every such row (the figures read it once)."""


class Rows:
    """The conversation columns of one batch (or one validation's rows), read row by row."""

    def __init__(self, prompts: Sequence[Any], captured: Sequence[Any] | None, multi_turn: Sequence[bool]) -> None:
        self.prompts = prompts
        self.captured = captured
        self.multi_turn = multi_turn
        self.uncaptured = 0  # multi-turn rows read without their turns

    def input(self, row: int, text: Any) -> Any:
        """The row's prompt messages, else ``text``."""
        prompt = self.prompts[row]
        return _plain(prompt) if conversations.is_conversation(prompt) else text

    def has_turns(self, row: int) -> bool:
        """Whether the row's output is its captured turns (no decoded text)."""
        turns = self.captured[row] if self.captured is not None else None
        return turns is not None and conversations.is_conversation(turns)

    def figure_output(self, row: int) -> Any:
        """The row's turns, or one empty assistant message (single turn), for figures; None when uncaptured."""
        turns = self.captured[row] if self.captured is not None else None
        if turns is not None and conversations.is_conversation(turns):
            return turns
        return _ONE_TURN if not self.multi_turn[row] else None

    def output(self, row: int, text: Any) -> Any:
        """The row's turns, else one assistant message ``text`` (single turn), else ``text``."""
        return self.output_of(row, lambda: text)

    def output_of(self, row: int, make_text: Callable[[], Any]) -> Any:
        """``output`` with the row's text made by ``make_text()`` only when it has no turns (a decode saved)."""
        turns = self.captured[row] if self.captured is not None else None
        if turns is not None and conversations.is_conversation(turns):
            return _plain(turns)
        text = make_text()
        if not self.multi_turn[row]:
            return [{"role": "assistant", "content": text if isinstance(text, str) else str(text)}]
        self.uncaptured += 1
        if self.uncaptured == 1:
            missing("turns", "multi-turn rows' turns (the agent loop's messages); their outputs are sent as text")
        return text


def from_columns(columns: Mapping[str, Any], size: int, response_gaps: Sequence[bool] | None) -> Rows | None:
    """``Rows`` of a batch's non-tensor ``columns``; None (counted, warned) when it has no prompt messages.

    ``response_gaps``: per row, whether its ``response_mask`` leaves tokens out inside the response
    (a tool's), used when the batch has no turn count.
    """
    prompts = columns.get(RAW_PROMPT_COLUMN)
    if prompts is None or len(prompts) != size:
        missing("raw_prompt", "prompt messages (raw_prompt); the rows are sent as text")
        return None
    captured = columns.get(MESSAGES_COLUMN)
    if captured is not None and len(captured) != size:
        captured = None
    return Rows(prompts, captured, multi_turn_rows(columns, size, response_gaps))


def multi_turn_rows(columns: Mapping[str, Any], size: int, response_gaps: Sequence[bool] | None) -> list[bool]:
    """Whether each row had more than one turn: its turn count, else tool tokens in its response."""
    for name in NUM_TURNS_COLUMNS:
        turns = columns.get(name)
        if turns is not None and len(turns) == size:
            return [_int(value) > SINGLE_TURN for value in turns]
    if response_gaps is not None and len(response_gaps) == size:
        return [bool(gap) for gap in response_gaps]
    return [False] * size


def response_gaps(response_mask: np.ndarray | None, spans: np.ndarray) -> list[bool] | None:
    """Per row: a token under the attention mask that ``response_mask`` leaves out (a tool's tokens)."""
    if response_mask is None:
        return None
    import numpy as np

    inside = np.arange(response_mask.shape[1])[None, :] < spans[:, None]
    return [bool(gap) for gap in (inside & ~response_mask.astype(bool)).any(axis=1)]


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _plain(messages: Any) -> Any:
    """A numpy array of messages (verl's ``raw_prompt``) as a list (``vg.log_*`` converts the rest)."""
    tolist = getattr(messages, "tolist", None)
    return tolist() if callable(tolist) and not isinstance(messages, list) else messages


def missing(column: str, what: str) -> None:
    """Count a conversation column that could not be read; WARNING the first time per column."""
    _process.counters.add(_stats.VERL_ROW_COLUMNS_MISSING)
    first = column not in _warned
    _warned.add(column)
    _logger.log(
        logging.WARNING if first else logging.DEBUG,
        "otel_valgen: verl's rows have no %s (a verl release otel-valgen is not tested with, or an agent loop "
        "otel-valgen did not hook? see _layout.MESSAGES_COLUMN)",
        what,
    )


# -- validation rows: tallied per batch while verl's _validate runs (``_rows``) -----------------------------


class Tally:
    """One validation's conversation columns, batch by batch (legacy: in generation order; v1: by key)."""

    def __init__(self) -> None:
        self.prompts: list[Any] = []
        self.captured: list[Any] = []
        self.multi_turn: list[bool] = []
        self.by_key: dict[str, tuple[Any, Any, bool]] = {}  # v1 TransferQueue key -> (prompt, turns, multi)
        self.failed = False

    def add_batch(self, batch: Any, gaps: Sequence[bool] | None) -> None:
        """A legacy validation batch (``extract_reward``'s): its rows' columns, None where absent."""
        columns = batch.non_tensor_batch
        size = len(batch)
        self.prompts.extend(_column(columns.get(RAW_PROMPT_COLUMN), size))
        self.captured.extend(_column(columns.get(MESSAGES_COLUMN), size))
        self.multi_turn.extend(multi_turn_rows(columns, size, gaps))

    def add_v1(self, keys: Sequence[Any], extra_fields: Any, turns: Any, prompts: Any) -> None:
        """A v1 validation fetch of the final outputs' ``extra_fields``, turns and prompt messages, by key."""
        size = len(keys)
        rows = _column(extra_fields, size)
        multi = multi_turn_rows({NUM_TURNS_COLUMNS[1]: _column(turns, size)} if turns is not None else {}, size, None)
        for key, extra, prompt, several in zip(keys, rows, _column(prompts, size), multi, strict=True):
            turns_of = extra.get(MESSAGES_COLUMN) if isinstance(extra, Mapping) else None
            self.by_key[str(key)] = (prompt, turns_of, several)

    def rows(self, size: int, keys: Sequence[str | None] | None) -> Rows | None:
        """``Rows`` of a validation's ``size`` generations (v1: the final key of each); None when not tallied."""
        if self.failed:
            return None
        if len(self.prompts) == size:
            prompts, captured, multi = self.prompts, self.captured, self.multi_turn
        elif keys is not None and self.by_key:
            found = [self.by_key.get(key) if key is not None else None for key in keys]
            prompts = [entry[0] if entry else None for entry in found]
            captured = [entry[1] if entry else None for entry in found]
            multi = [entry[2] if entry else True for entry in found]
        else:
            return None
        return from_columns({RAW_PROMPT_COLUMN: prompts, MESSAGES_COLUMN: captured}, size, multi)


def validation_columns(rows: Rows | None, inputs: Sequence[Any], outputs: Sequence[Any]) -> dict[str, Any]:
    """``log_generations``' inputs, outputs and sample ids of a validation's rows as conversations.

    The sample ids are those of the decoded prompt texts, as without conversations; no rows: empty.
    """
    if rows is None:
        missing("validation", "conversation columns of this validation; its rows are sent as text")
        return {}
    if not any(conversations.is_conversation(prompt) for prompt in rows.prompts):
        missing("raw_prompt", "prompt messages (raw_prompt); the rows are sent as text")
        return {}
    from otel_valgen._records import base_sample_id

    return {
        "inputs": [rows.input(row, text) for row, text in enumerate(inputs)],
        "outputs": [rows.output(row, text) for row, text in enumerate(outputs)],
        "sample_ids": [base_sample_id(None, text) for text in inputs],
    }


def _column(values: Any, size: int) -> list[Any]:
    if values is None:
        return [None] * size
    listed = list(values.tolist()) if callable(getattr(values, "tolist", None)) else list(values)
    return listed if len(listed) == size else [None] * size

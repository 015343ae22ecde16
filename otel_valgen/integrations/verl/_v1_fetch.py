"""The v1 trainer's rows as ``vg.log_rollouts`` columns (``send_v1_step``): held, else fetched.

The columns are those of ``verl_rollouts`` (the rows as the legacy trainer would hold them, padding
rows left out). The rows are in TransferQueue, where a fetch costs per row and per field, so:

- held (``_held_columns``): what verl's trainer held of the step's rows a moment before, kept by key
  (``verl._v1_capture``: ``_compute_advantage``'s padded batch, ``_compute_metrics``' fetch of every
  row), and fetched only what neither has: ``data_source`` and ``raw_prompt`` of one row per
  ``uid`` (the dataset row's columns, which verl's agent loop copies into each of its n rows),
  ``extra_fields`` of every row (reward extras, tool rewards, captured turns), ``reward_model`` of
  the rows ``log_rollouts`` reads;
- else fetched (the rest of ``v1_columns``; counted in ``stats()["verl_v1_rows_fetched"]``, warned
  once per reason), each field for the rows that need it:

  - for every row, only what the keys and the figures over every row read: ``rm_scores`` (the
    score), ``extra_fields``, ``num_turns`` when the rows have prompt messages, and, when the
    mismatch figures can be made (both log-probabilities, not bypass mode), ``response_mask``,
    ``rollout_log_probs`` and ``old_log_probs``; the response lengths are the rows'
    ``response_len`` tags;
  - for one row per ``uid``: ``prompts``, ``data_source`` and ``raw_prompt``;
  - for the rows ``vg.log_rollouts`` reads: the rest (response ids, advantages, ground truths, the
    other per-token fields), a prompt's rows at a time: those of the batch's k smallest prompt
    keys in one call beforehand, any other row's prompt when the row is first read;
  - the last token of the responses at the length limit not fetched yet (``truncated``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, overload

import numpy as np

import otel_valgen as vg
from otel_valgen import _process, _stats
from otel_valgen.integrations.verl import _v1_capture
from otel_valgen.integrations.verl._layout import V1_CAPTURES
from otel_valgen.integrations.verl_rollouts import (
    PARAM_VERSION_KEY,
    UID_KEY,
    ResponseTexts,
    _advantages,
    _conversations,
    _eos_ids,
    _likely_kept,
    _numpy,
    _rows,
    _token_columns,
    cut_at_limit,
    decode_row,
    figures_ahead,
    in_side_thread,
    max_response_length,
    prefetch_kept,
    prompt_groups_of,
    rollouts_on,
    row_sums,
)

_logger = logging.getLogger("otel_valgen")

V1_PROMPT_FIELDS: Final = ("prompts", "data_source", "raw_prompt")
"""Fetched for one row per prompt, its ``uid``'s first: verl's agent loop copies the dataset row into all n rows."""

V1_ROW_FIELDS: Final = ("rm_scores", "extra_fields", "num_turns")
"""Fetched for every row: scores, reward extras, and what the figures over every trajectory read (``num_turns``)."""

V1_KEPT_FIELDS: Final = ("responses", "response_mask", "advantages", "reward_model")
"""Fetched for the rows ``log_rollouts`` reads, a prompt's rows at a time, with ``verl._tokens.TOKEN_FIELDS``."""

V1_FIELDS: Final = (*V1_PROMPT_FIELDS, *V1_ROW_FIELDS, *V1_KEPT_FIELDS)
"""Every field the v1 hook may fetch from TransferQueue, besides the per-token ones (``verl._tokens.TOKEN_FIELDS``)."""

RAW_PROMPT: Final = "raw_prompt"
"""The prompt's messages (``_layout.RAW_PROMPT_COLUMN``), a dataset column verl's agent loop stores with each row."""

SPAN_TAG: Final = "response_len"
"""The tag verl's agent loop puts on each TransferQueue row: its response's length in tokens."""


def send_v1_step(trainer: Any, batch: Any, global_steps: int) -> int:
    """The v1 ``PPOTrainer._compute_metrics``'s batch (a ``KVBatchMeta``), as ``v1_columns`` reads it.

    Only when rollouts are on; padding rows (``tags`` with ``is_padding``) are left out; the param
    version is the tags' ``max_global_steps``. Never raises (a failure is counted and warned about).
    """
    if not rollouts_on():
        return 0
    try:
        columns = v1_columns(trainer, batch)
    except Exception as error:
        _process.counters.failed(
            "fetching the v1 rollout batch from TransferQueue", error, _rows(getattr(batch, "keys", ()))
        )
        return 0
    if columns is None:
        return 0
    return vg.log_rollouts(step=global_steps, source="trainer", **columns)


def v1_columns(trainer: Any, batch: Any) -> dict[str, Any] | None:
    """The keyword arguments of ``vg.log_rollouts`` for a v1 batch; None when it has no row but padding.

    From the rows the trainer held (``_held_columns``) when it held them all; else each field is
    fetched for the rows that need it:

    1. one row, every field the hook may read (which ones the batch has);
    2. one row per prompt (its ``uid``'s first): ``V1_PROMPT_FIELDS``, for the prompt ids and texts;
    3. the rows of the prompts ``log_rollouts`` will likely keep (``_likely_kept``): the rest of
       their fields (``V1_KEPT_FIELDS`` and the per-token ones), kept in ``_KeptRows``; a row read
       outside them has its prompt's rows fetched when it is read;
    4. every row, in a thread while this one decodes the prompts and fetches 3: ``V1_ROW_FIELDS``
       (``num_turns`` with prompt messages) and, when the mismatch figures over every response can
       be made, ``verl._tokens.FIGURE_FIELDS``; the response lengths come from the tags;
    5. the responses that reach the length limit and are not fetched yet: their last token.
    """
    import transfer_queue as tq  # type: ignore[import-untyped]

    store = _V1Store(tq, batch)
    if not store.keys:
        return None
    held, why = held_rows(store.keys)
    if held is not None:
        columns, why = _held_columns(trainer, store, held)
        if columns is not None:
            return columns
    _fetched_instead(why or "")
    plan = _v1_plan(store, trainer)
    fetched = _V1PromptRows.fetch(store, plan.present)
    # The fetch of every row is the longest: TransferQueue's storage works on it while this thread
    # decodes the prompts (its storage unit answers one request at a time, so the rows kept wait).
    every_rows = in_side_thread(store.fetch, range(len(store.keys)), plan.every)
    prompts = fetched.prompts(trainer.tokenizer)
    kept = _KeptRows(store, plan.kept, prompts.ids)
    likely = _likely_kept(prompts.ids, prompts.data_sources)
    kept.load([row for row, prompt in enumerate(prompts.ids) if prompt in likely])
    every = every_rows.result()
    return _v1_assemble(trainer, store, plan, prompts, kept, every, _v1_spans(plan, every))


HELD_FETCHED: Final = ("data_source", RAW_PROMPT, "extra_fields", "reward_model")
"""What the v1 hook fetches when the trainer's rows are held (``_v1_capture``): no function it watches has them."""

FETCHED_INSTEAD: Final = _stats.VERL_V1_ROWS_FETCHED
"""``stats()`` counter: steps whose rows ``_v1_capture`` did not hold, fetched from TransferQueue instead."""


def _held_columns(trainer: Any, store: _V1Store, held: StepRows) -> tuple[dict[str, Any] | None, str]:
    """``v1_columns`` from the rows the trainer held (``_v1_capture``), fetching only ``HELD_FETCHED``.

    Fetched: one row (which of them the rows have); ``data_source`` and ``raw_prompt`` of one row
    per uid; ``extra_fields`` of every row; ``reward_model`` of the rows read, as ``_KeptRows``.
    Without the kept prompts, responses, scores or response mask: None, and why.
    """
    import otel_valgen.integrations.verl._conversations as chats

    prompt_ids, responses = held.jagged("prompts"), held.jagged("responses")
    if prompt_ids is None or responses is None or not (held.has("rm_scores") and held.has("response_mask")):
        return None, "the trainer's rows lack prompts, responses, rm_scores or response_mask as 1-D rows"
    size, tokenizer = len(store.keys), trainer.tokenizer
    turns = held.values("num_turns")
    rows = _V1PromptRows.plan(store)
    # TransferQueue answers on its client's thread while this one reads the held tensors and decodes
    # the prompts (the Rust tokenizer lets go of the GIL); its storage unit answers one request at a time.
    fetches = in_side_thread(_held_fetches, store, rows.firsts, turns)
    own = responses.lengths()  # each row's own length, as TransferQueue holds it
    tagged = _tag_spans(store.tags)
    spans = tagged if tagged is not None else own
    width = int(spans.max()) if size else 0
    tensors = {name: held.matrix(name, width) for name in _TENSORS if held.has(name)}
    found = _v1_token_columns(trainer, store.keys, tensors, responses, spans, tokenizer)
    token_data = figures_ahead(found)  # the figures go on while the rows are fetched and the prompts decoded
    ids, texts = rows.decode(tokenizer, [prompt_ids[row] for row in rows.firsts])
    probe, fetched, every = fetches.result()
    present = frozenset(_field_names(probe))
    prompts = rows.prompts_of(ids, texts, fetched)
    num_turns = turns if RAW_PROMPT in present else None
    every_row = _every_row(probe, turns)
    read = ("reward_model",) if every_row else ("reward_model", "extra_fields")
    kept = _KeptRows(store, [name for name in read if name in present], prompts.ids)
    likely = _likely_kept(prompts.ids, prompts.data_sources)
    kept.load([row for row, prompt in enumerate(prompts.ids) if prompt in likely])
    extra_fields = _values(every.get("extra_fields")) if "extra_fields" in _field_names(every) else None
    non_tensor = _v1_non_tensor(prompts, num_turns, extra_fields)
    masks = _v1_masks(tensors["response_mask"], found, kept, spans, need_gaps=_needs_gaps(non_tensor))
    advantages = _numpy(held.matrix("advantages", width)) if held.has("advantages") else None

    decode = ResponseTexts(lambda row: responses[row][: spans[row]].tolist(), tokenizer)

    def advantage(row: int) -> float | None:
        values = advantages[row, : own[row]] if advantages is not None else None
        return _v1_advantage(values, kept, masks, row, int(spans[row]))

    limit = max_response_length(trainer) or width
    eos = _eos_ids(tokenizer)
    inputs, outputs, text_of = _conversations(non_tensor, prompts.texts, decode, masks.gaps)
    prefetch_kept(prompts.ids, prompts.data_sources, decode, text_of, token_data)
    return {
        "prompts": inputs,
        "responses": outputs,
        "rewards": row_sums(held.matrix("rm_scores", width)),
        "prompt_ids": prompts.ids,
        "advantages": chats.Lazy(size, advantage) if advantages is not None else None,
        "response_lengths": masks.lengths,
        "truncated": [
            cut_at_limit(int(span), _last_token(responses[row], int(span)) if span >= limit else None, limit, eos)
            for row, span in enumerate(spans)
        ],
        **_shared_columns(store, kept, present, prompts, extra_fields, token_data),
        **({} if every_row or not kept.has("extra_fields") else {"extra": _kept_extra(kept, probe, size)}),
    }, ""


def _held_fetches(store: _V1Store, firsts: Sequence[int], turns: Sequence[Any] | None) -> tuple[Any, Any, Any]:
    """``_held_columns``' fetches, in order: the probe, the prompt rows, every row's ``extra_fields``.

    The probe is one row (which fields the rows have); the prompt rows are ``data_source`` and
    ``raw_prompt`` of the rows ``firsts``; ``extra_fields`` of every row only when ``_every_row``.
    """
    probe = store.fetch([0], HELD_FETCHED)
    present = frozenset(_field_names(probe))
    fetched = store.fetch(firsts, [name for name in ("data_source", RAW_PROMPT) if name in present])
    every = store.fetch(range(len(store.keys)), ["extra_fields"] if _every_row(probe, turns) else [])
    return probe, fetched, every


def _every_row(probe: Any, turns: Sequence[Any] | None) -> bool:
    """Whether ``extra_fields`` is read for every row: when the figures over every trajectory need it.

    That is turns or tool rewards; else it is read only for the rows read (reward_extra_info), with
    ``reward_model``.
    """
    return "extra_fields" in _field_names(probe) and not _single_turn_rows(probe, turns)


def _single_turn_rows(probe: Any, turns: Sequence[Any] | None) -> bool:
    """Whether no row can have what the figures over every trajectory read in ``extra_fields``.

    True when every row's ``num_turns`` (held) is one turn, and the probe row's ``extra_fields`` has
    no captured turns and no tool rewards or turn scores: the rows come from a loop that keeps no
    conversation (verl's single-turn loop), whose rows' figures their turn counts give. A batch that
    mixes such a loop with a tool loop stopped at its first turn is read as single-turn.
    """
    from otel_valgen.integrations.verl._conversations import SINGLE_TURN  # the package imports this module
    from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN, REWARD_COLUMNS

    if turns is None or not all(isinstance(n, int) and n <= SINGLE_TURN for n in turns):
        return False
    if "extra_fields" not in _field_names(probe):
        return True
    rows = _values(probe.get("extra_fields"))
    row = rows[0] if rows else None
    if not isinstance(row, Mapping):
        return True
    return row.get(MESSAGES_COLUMN) is None and all(not row.get(name) for name in REWARD_COLUMNS)


def _kept_extra(kept: _KeptRows, probe: Any, size: int) -> dict[str, Any] | None:
    """The reward's extra columns read from the rows' ``extra_fields`` when read (the keys of the probe row's)."""
    import otel_valgen.integrations.verl._conversations as chats

    rows = _values(probe.get("extra_fields")) if "extra_fields" in _field_names(probe) else []
    keys = list(_reward_extra_info(rows[0]) if rows else {})
    if not keys:
        return None

    def column(key: str) -> Any:
        return chats.Lazy(size, lambda row: _reward_extra_info(kept.get("extra_fields", row)).get(key))

    return {key: column(key) for key in keys}


_warned: set[str] = set()


def _fetched_instead(why: str) -> None:
    """Count a step whose rows were fetched instead of held (``FETCHED_INSTEAD``); warn once per reason."""
    _process.counters.add(FETCHED_INSTEAD)
    level = logging.WARNING if why not in _warned else logging.DEBUG
    _warned.add(why)
    _logger.log(
        level,
        "otel_valgen: verl's v1 rollouts: %s; the step's rows are fetched from TransferQueue instead, which takes "
        "longer (stats()['%s'] counts such steps)",
        why,
        FETCHED_INSTEAD,
    )


def held_rows(keys: Sequence[str]) -> tuple[StepRows | None, str]:
    """The rows of ``keys`` (the hook's, in its order) that ``_v1_capture`` kept, or None and why not.

    Every capture is dropped here (``_v1_capture.take``).
    """
    found = _v1_capture.take()
    places = {}
    for name, captures in found.items():
        where: dict[str, tuple[int, int]] = {}
        for number, capture in enumerate(captures):
            where.update((key, (number, row)) for row, key in enumerate(capture.keys))
        located = [where.get(key) for key in keys]
        if any(place is None for place in located):
            caller = V1_CAPTURES[name].caller
            return None, f"the rows were not all seen by PPOTrainer.{caller} ({name})"
        places[name] = _Places(
            captures,
            np.array([place[0] for place in located if place is not None]),
            np.array([place[1] for place in located if place is not None]),
        )
    return StepRows(len(keys), places[_v1_capture.ADVANTAGE], places[_v1_capture.METRIC]), ""


@dataclass
class _Places:
    """Where each of the hook's rows is among one function's captures: which capture, which of its rows."""

    captures: list[_v1_capture.Kept]
    which: np.ndarray
    rows: np.ndarray

    def has(self, field: str) -> bool:
        return all(field in self.captures[number].fields for number in set(self.which.tolist()))


class StepRows:
    """A step's rows as the trainer held them, in the hook's order (``take``)."""

    def __init__(self, size: int, advantage: _Places, metric: _Places) -> None:
        self.size = size
        self._advantage = advantage
        self._metric = metric

    def has(self, field: str) -> bool:
        """Whether ``field`` is kept for every row (a padded tensor or a row field)."""
        return self._advantage.has(field) or self._metric.has(field)

    def matrix(self, field: str, width: int) -> Any:
        """``field`` of ``_compute_advantage``'s batch for every row: a torch tensor ``width`` wide, zero-padded.

        verl's own tensor (a view) when one call holds the rows in order; bf16 and fp16 as float32.
        """
        import torch

        places = self._advantage
        if not places.has(field):
            return None
        tensors = [capture.fields[field] for capture in places.captures]
        if len(tensors) == 1 and np.array_equal(places.rows, np.arange(self.size)):
            # verl's tensor itself when it is all of it (verl._correction knows its mask after by identity)
            out = tensors[0] if tensors[0].shape[0] == self.size else tensors[0][: self.size]
        else:
            widest = max(int(tensor.shape[1]) for tensor in tensors)
            out = torch.zeros((self.size, widest), dtype=tensors[0].dtype)
            for number, tensor in enumerate(tensors):
                mine = np.flatnonzero(places.which == number)
                if len(mine):
                    theirs = torch.from_numpy(places.rows[mine])
                    out[torch.from_numpy(mine), : tensor.shape[1]] = tensor[theirs].to(out.dtype)
        if out.shape[1] > width:
            out = out[:, :width]
        elif out.shape[1] < width:
            out = torch.nn.functional.pad(out, (0, width - out.shape[1]))
        return out.float() if out.dtype in (torch.bfloat16, torch.float16) else out

    def jagged(self, field: str) -> Jagged | None:
        """``field`` of ``_compute_metrics``' fetch, each row its own tokens (numpy views); None if not 1-D rows."""
        places = self._metric
        if not places.has(field):
            return None
        flats, starts = [], []
        for capture in places.captures:
            flat, offsets = _flat(capture.fields[field])
            if flat is None:
                return None
            flats.append(flat)
            starts.append(offsets)
        begin = np.array([starts[number][row] for number, row in zip(places.which, places.rows, strict=True)])
        end = np.array([starts[number][row + 1] for number, row in zip(places.which, places.rows, strict=True)])
        return Jagged(flats, places.which, begin.astype(np.int64), end.astype(np.int64))

    def values(self, field: str) -> list[Any] | None:
        """A non-tensor field of ``_compute_metrics``' fetch (``num_turns``), one value per row."""
        places = self._metric
        if not places.has(field):
            return None
        lists = [_values(capture.fields[field]) for capture in places.captures]
        return [lists[number][row] for number, row in zip(places.which.tolist(), places.rows.tolist(), strict=True)]


def _flat(field: Any) -> tuple[np.ndarray | None, np.ndarray]:
    """A nested tensor's 1-D values and row offsets as numpy (a 2-D tensor: its rows whole); None: not 1-D rows."""
    if getattr(field, "is_nested", False):
        values = field.values()
        if values.dim() != 1:
            return None, np.zeros(0)
        return values.detach().cpu().numpy(), field.offsets().detach().cpu().numpy()
    if getattr(field, "dim", lambda: 0)() == 2:
        rows, width = field.shape
        return field.detach().cpu().reshape(-1).numpy(), np.arange(rows + 1, dtype=np.int64) * width
    return None, np.zeros(0)


class Jagged(Sequence[np.ndarray]):
    """Rows of unequal lengths, each a numpy view of its capture's flat values."""

    def __init__(self, flats: list[np.ndarray], which: np.ndarray, begin: np.ndarray, end: np.ndarray) -> None:
        self._flats = flats
        self._which = which.tolist()
        self._begin = begin
        self._end = end

    def lengths(self) -> np.ndarray:
        """Each row's length."""
        return self._end - self._begin  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._begin)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice) -> list[np.ndarray]: ...
    def __getitem__(self, index: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        row: np.ndarray = self._flats[self._which[index]][self._begin[index] : self._end[index]]
        return row


class _V1Store:
    """A v1 batch's rows in TransferQueue (its padding rows left out), fetched by field and by row."""

    def __init__(self, tq: Any, batch: Any) -> None:
        rows = [index for index, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        self.keys: list[str] = [batch.keys[index] for index in rows]
        self.tags: list[Mapping[str, Any]] = [batch.tags[index] for index in rows]
        self._tq = tq
        self._partition = batch.partition_id

    def fetch(self, rows: Sequence[int], fields: Sequence[str]) -> Any:
        """The ``fields`` TransferQueue has of ``rows`` (a TensorDict), in their order; nothing asked: ``{}``."""
        keys = [self.keys[row] for row in rows]
        wanted = list(fields)
        if not keys or not wanted:
            return {}
        return self._tq.kv_batch_get(keys=keys, partition_id=self._partition, select_fields=wanted)


class _V1Plan(NamedTuple):
    """Which fields of a v1 batch are fetched for which rows (``v1_columns``)."""

    present: frozenset[str]  # the fields the batch's rows have
    every: tuple[str, ...]  # fetched for every row
    kept: tuple[str, ...]  # fetched for the rows log_rollouts reads
    spans: np.ndarray | None  # each row's response length, from the tags (None: from response_mask)


def _v1_plan(store: _V1Store, trainer: Any) -> _V1Plan:
    """Probe the batch's first row for its fields, and split them between every row and the rows kept."""
    token_fields, figure_fields = _token_fields()
    wanted = tuple(dict.fromkeys((*V1_FIELDS, *token_fields)))
    present = frozenset(_field_names(store.fetch([0], wanted)))
    spans = _tag_spans(store.tags)
    conversations = RAW_PROMPT in present
    every: list[str] = [name for name in V1_ROW_FIELDS if name in present and (name != "num_turns" or conversations)]
    if _figures_made(present, figure_fields, trainer):
        every += [name for name in figure_fields if name in present]
    # Every row's response_mask also gives the lengths without tags, and the turns without num_turns.
    if "response_mask" in present and (spans is None or (conversations and "num_turns" not in present)):
        every.append("response_mask")
    elif spans is None:
        every.append("responses")
    every = list(dict.fromkeys(every))
    kept = [
        name
        for name in (*V1_KEPT_FIELDS, *token_fields)
        if name in present and (name not in every or name == "responses")  # every row's only for its length
    ]
    return _V1Plan(present, tuple(every), tuple(dict.fromkeys(kept)), spans)


def _token_fields() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``verl._tokens``' ``TOKEN_FIELDS`` and ``FIGURE_FIELDS``; none without the per-token capture."""
    try:
        from otel_valgen.integrations.verl._tokens import FIGURE_FIELDS, TOKEN_FIELDS  # the package imports us
    except ImportError:
        return (), ()
    return tuple(TOKEN_FIELDS), tuple(FIGURE_FIELDS)


def _figures_made(present: frozenset[str], figure_fields: tuple[str, ...], trainer: Any) -> bool:
    """Whether the mismatch figures over every response can be made: both log-probabilities, not bypass mode."""
    if not figure_fields or not {"rollout_log_probs", "old_log_probs"} <= present:
        return False
    from otel_valgen.integrations.verl._tokens import settings_of

    settings = settings_of(trainer)
    return settings is None or not settings.bypass  # bypass: old_log_probs are the rollout's, no figures


def _field_names(fetched: Any) -> list[str]:
    """The fields a fetch returned (TensorDict refuses iteration over its keys as ``in`` does)."""
    return [str(name) for name in fetched.keys()]  # noqa: SIM118


def _tag_spans(tags: Sequence[Mapping[str, Any]]) -> np.ndarray | None:
    """Each row's response length from its ``SPAN_TAG``; None when a row has none."""
    spans = [tag.get(SPAN_TAG) for tag in tags]
    if not all(type(span) is int and span >= 0 for span in spans):
        return None
    return np.array(spans, dtype=np.int64)


class _V1Prompts(NamedTuple):
    """Each row's prompt id and text, and its prompt's dataset columns."""

    ids: list[str]
    texts: list[str]
    data_sources: list[Any] | None
    raw: list[Any] | None  # the prompt's messages (raw_prompt)


class _V1PromptRows(NamedTuple):
    """``V1_PROMPT_FIELDS`` of each uid's first row (of every row without uids), as fetched."""

    fetched: Any  # the fields (None: fetched by the caller, ``plan``)
    uids: list[str] | None
    firsts: list[int]  # the rows fetched
    slots: list[int]  # each row's place among them

    @classmethod
    def plan(cls, store: _V1Store) -> _V1PromptRows:
        """Which rows to fetch: one per uid (every row without uids), nothing fetched yet."""
        uids = _v1_uids(store.keys)
        if uids is None:
            return cls(None, None, list(range(len(store.keys))), list(range(len(store.keys))))
        first: dict[str, int] = {}
        for row, uid in enumerate(uids):
            first.setdefault(uid, row)
        place = {uid: slot for slot, uid in enumerate(first)}
        return cls(None, uids, list(first.values()), [place[uid] for uid in uids])

    @classmethod
    def fetch(cls, store: _V1Store, present: frozenset[str], fields: Sequence[str] = V1_PROMPT_FIELDS) -> _V1PromptRows:
        """Fetch the prompt ``fields`` (those the rows have) of one row per uid."""
        rows = cls.plan(store)
        return rows._replace(fetched=store.fetch(rows.firsts, [name for name in fields if name in present]))

    def prompts(self, tokenizer: Any) -> _V1Prompts:
        """Each row's prompt id and text (``prompt_groups`` of the rows fetched), and its prompt's columns."""
        ids, texts = self.decode(tokenizer, [_row_array(row) for row in _row_values(self.fetched["prompts"])])
        return self.prompts_of(ids, texts, self.fetched)

    def decode(self, tokenizer: Any, tokens: Sequence[np.ndarray]) -> tuple[list[str], list[str]]:
        """The prompt id and text of each row fetched, from its prompt's token ids (``prompt_groups_of``)."""
        uids = self.uids
        non_tensor = {UID_KEY: _objects([uids[row] for row in self.firsts])} if uids is not None else {}
        return prompt_groups_of(len(tokens), tokens.__getitem__, non_tensor, tokenizer)

    def prompts_of(self, ids: Sequence[str], texts: Sequence[str], fetched: Any) -> _V1Prompts:
        """Each row's prompt id, text and prompt columns, from those of the rows ``fetched``."""
        return _V1Prompts(
            [ids[slot] for slot in self.slots],
            [texts[slot] for slot in self.slots],
            self.spread(fetched, "data_source"),
            self.spread(fetched, RAW_PROMPT),
        )

    def spread(self, fetched: Any, name: str) -> list[Any] | None:
        """Field ``name`` of each row: its uid's first row's (None when not fetched)."""
        if name not in _field_names(fetched):
            return None
        values = _values(fetched.get(name))
        return [values[slot] for slot in self.slots]


class _KeptRows:
    """Fields of the rows ``log_rollouts`` reads, fetched a prompt's rows at a time: by ``load``, else when read.

    A fetch that fails fails every read of its rows (``log_rollouts`` counts each such record as dropped).
    """

    def __init__(self, store: _V1Store, fields: Sequence[str], groups: Sequence[str]) -> None:
        self._store = store
        self._fields = tuple(fields)
        self._group_of = list(groups)
        self._members: dict[str, list[int]] = {}
        for row, group in enumerate(groups):
            self._members.setdefault(group, []).append(row)
        self._values: dict[str, dict[int, Any]] = {name: {} for name in self._fields}
        self._loaded: set[str] = set()
        self._failed: dict[str, Exception] = {}

    def load(self, rows: Sequence[int]) -> None:
        """Fetch, in one call, the rows of the prompts of ``rows`` not fetched yet."""
        groups = {self._group_of[row] for row in rows} - self._loaded - set(self._failed)
        if not groups:
            return
        members = sorted(row for group in groups for row in self._members[group])
        try:
            fetched = self._store.fetch(members, self._fields)
            names = _field_names(fetched)
            for name in self._fields:
                if name in names:
                    self._values[name].update(zip(members, _row_values(fetched.get(name)), strict=True))
        except Exception as error:
            self._failed.update(dict.fromkeys(groups, error))
            raise
        self._loaded |= groups

    def has(self, name: str) -> bool:
        """Whether field ``name`` is among those fetched for the kept rows."""
        return name in self._fields

    def loaded(self, row: int) -> bool:
        """Whether row ``row`` is fetched."""
        return self._group_of[row] in self._loaded

    def get(self, name: str, row: int) -> Any:
        """Field ``name`` of row ``row`` (None when the row has not that field); fetched with its prompt's rows."""
        group = self._group_of[row]
        if group in self._failed:
            raise self._failed[group]
        if group not in self._loaded:
            self.load([row])
        return self._values[name].get(row) if name in self._values else None


def _row_values(field: Any) -> list[Any]:
    """A fetched field's value for each row: a tensor (a nested tensor's own length), else the object."""
    import torch

    if isinstance(field, torch.Tensor):
        return list(field.unbind()) if field.is_nested else list(field.unbind(0))
    return _values(field)


def _row_array(value: Any) -> np.ndarray:
    """One row of a tensor field as numpy (bf16 and fp16 as float32, which have no numpy view)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dtype in (torch.bfloat16, torch.float16):
            value = value.float()
        return value.detach().cpu().numpy()  # type: ignore[no-any-return]
    return np.asarray(value)


def _v1_spans(plan: _V1Plan, every: Any) -> np.ndarray:
    """Each row's response length: its tag, else the length of its fetched ``response_mask`` (or ``responses``)."""
    if plan.spans is not None:
        return plan.spans
    lengths = _padded(every["response_mask" if "response_mask" in plan.every else "responses"], None)[1]
    return np.asarray(_numpy(lengths), dtype=np.int64)


def _v1_assemble(
    trainer: Any,
    store: _V1Store,
    plan: _V1Plan,
    prompts: _V1Prompts,
    kept: _KeptRows,
    every: Any,
    spans: np.ndarray,
) -> dict[str, Any]:
    """The columns of ``log_rollouts`` from what ``_v1_columns`` fetched; what only kept rows need is lazy."""
    import otel_valgen.integrations.verl._conversations as chats

    size, tokenizer = len(store.keys), trainer.tokenizer
    names = _field_names(every)
    width = int(spans.max()) if size else 0
    tensors = {
        name: _dense(every[name], width, mask=name == "response_mask")
        for name in plan.every
        if name in names and name in _TENSORS
    }
    tensors.update(
        {name: _kept_column(kept, name, size) for name in plan.kept if name not in ("advantages", "reward_model")}
    )
    responses = tensors.pop("responses", None)
    found = _v1_token_columns(trainer, store.keys, tensors, responses, spans, tokenizer)
    token_data = figures_ahead(found)
    extra_fields = _values(every.get("extra_fields")) if "extra_fields" in names else None
    num_turns = _values(every.get("num_turns")) if "num_turns" in names else None
    non_tensor = _v1_non_tensor(prompts, num_turns, extra_fields)
    masks = _v1_masks(tensors.get("response_mask"), found, kept, spans, need_gaps=_needs_gaps(non_tensor))

    def decode(row: int) -> str:
        ids = _v1_row(kept, "responses", row)
        return "" if ids is None else decode_row(tokenizer, ids[: spans[row]].tolist())

    inputs, outputs, _ = _conversations(non_tensor, prompts.texts, decode, masks.gaps)
    present = plan.present
    return {
        "prompts": inputs,
        "responses": outputs,
        "rewards": row_sums(_dense(every["rm_scores"], width)) if "rm_scores" in names else None,
        "prompt_ids": prompts.ids,
        "advantages": chats.Lazy(
            size, lambda row: _v1_advantage(_v1_row(kept, "advantages", row), kept, masks, row, int(spans[row]))
        )
        if "advantages" in present
        else None,
        "response_lengths": masks.lengths,
        "truncated": _v1_truncated(store, kept, spans, max_response_length(trainer) or width, _eos_ids(tokenizer)),
        **_shared_columns(store, kept, present, prompts, extra_fields, token_data),
    }


def _shared_columns(
    store: _V1Store,
    kept: _KeptRows,
    present: frozenset[str],
    prompts: _V1Prompts,
    extra_fields: list[Any] | None,
    token_data: dict[str, Any] | None,
) -> dict[str, Any]:
    """The columns read alike from held and from fetched rows: versions, ground truths, sources, extras, tokens."""
    import otel_valgen.integrations.verl._conversations as chats

    return {
        "param_versions": [tag.get(PARAM_VERSION_KEY) for tag in store.tags],
        "ground_truths": chats.Lazy(len(store.keys), lambda row: _ground_truth(kept.get("reward_model", row)))
        if "reward_model" in present
        else None,
        "data_sources": prompts.data_sources,
        "extra": _v1_extra(extra_fields),
        **{name: list(values) for name, values in _v1_reward_lists(extra_fields or []).items()},
        "tokens": token_data,
    }


_TENSORS: Final = ("response_mask", "rollout_log_probs", "old_log_probs", "ref_log_prob", "rollout_is_weights")
"""Fields fetched for every row that are handed on as one padded array (``_dense``; the others row by row)."""


def _dense(field: Any, width: int, *, mask: bool = False) -> Any:
    """A fetched tensor field of every row as one array right-padded with zeros to ``width``.

    From a nested tensor's flat values at once (much faster than ``to_padded_tensor``): numpy
    (bf16, fp16 as float32), a ``mask`` as a torch bool tensor (``verl._correction`` compares masks).
    """
    import torch

    values = field.values() if getattr(field, "is_nested", False) else None
    if values is None or values.dim() != 1:
        padded = _padded(field, width)[0]
        return padded.bool() if mask else _row_array(padded)
    flat = _row_array(values)
    lengths = _numpy(field.offsets().diff())
    width = max(width, int(lengths.max(initial=0)))
    out = np.zeros((len(lengths), width), dtype=bool if mask else flat.dtype)
    out[np.arange(width)[None, :] < lengths[:, None]] = flat != 0 if mask else flat
    return torch.from_numpy(out) if mask else out


def _kept_column(kept: _KeptRows, name: str, size: int) -> Any:
    """Field ``name`` of every row as a sequence that fetches a row (``_KeptRows``) when it is read."""
    import otel_valgen.integrations.verl._conversations as chats

    return chats.Lazy(size, lambda row: _v1_row(kept, name, row))


def _v1_row(kept: _KeptRows, name: str, row: int) -> np.ndarray | None:
    """Field ``name`` of kept row ``row`` as numpy; None when the row has none."""
    value = kept.get(name, row)
    return None if value is None else _row_array(value)


def _v1_non_tensor(prompts: _V1Prompts, num_turns: list[Any] | None, extra_fields: list[Any] | None) -> dict[str, Any]:
    """The conversation columns (``verl._conversations.from_columns``) of the v1 rows that were read."""
    from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN  # the package imports this module

    columns: dict[str, Any] = {}
    if prompts.raw is not None:
        columns[RAW_PROMPT] = prompts.raw
    if num_turns is not None:
        columns["num_turns"] = num_turns
    if extra_fields is not None:
        columns[MESSAGES_COLUMN] = [_messages(row) for row in extra_fields]
    return columns


def _needs_gaps(non_tensor: Mapping[str, Any]) -> bool:
    """Whether the rows' turns are told by their masks' gaps: prompt messages and no turn count."""
    from otel_valgen.integrations.verl._layout import NUM_TURNS_COLUMNS  # the package imports this module

    return RAW_PROMPT in non_tensor and not any(name in non_tensor for name in NUM_TURNS_COLUMNS)


def _v1_token_columns(
    trainer: Any,
    keys: list[str],
    tensors: dict[str, Any],
    responses: np.ndarray | Sequence[Any] | None,
    spans: np.ndarray,
    tokenizer: Any,
) -> Any:
    """The per-token columns (``verl._tokens.token_columns``) of the v1 rows; None without the capture."""
    try:
        from otel_valgen.integrations.verl._tokens import trainer_batch  # the package imports this module
    except ImportError:
        return None
    with trainer_batch(trainer, keys):
        return _token_columns(tensors, responses, spans, tokenizer)


class _V1Masks(NamedTuple):
    """What the hook reads of the v1 rows' masks (``_RowFigures`` of the legacy rows)."""

    lengths: Sequence[int]  # the model's tokens (the mask before verl's correction when captured), else the span
    gaps: list[bool] | None  # a token of the span that the mask leaves out; None when not needed or not fetched
    trained: Any  # every row's response_mask (the tokens trained on) when fetched for every row, else None


def _v1_masks(mask: Any, found: Any, kept: _KeptRows, spans: np.ndarray, *, need_gaps: bool) -> _V1Masks:
    """Lengths (and gaps) from every row's mask when it was fetched, else each kept row's length when read."""
    import otel_valgen.integrations.verl._conversations as chats

    if mask is not None and hasattr(mask, "shape"):
        model = getattr(found, "model", None)
        counted = _numpy(model if model is not None else mask)
        lengths = [int(length) for length in np.count_nonzero(counted, axis=1)]
        gaps = chats.response_gaps(counted, spans) if need_gaps else None
        return _V1Masks(lengths, gaps, mask)
    if not kept.has("response_mask"):
        return _V1Masks([int(span) for span in spans], None, None)

    def length(row: int) -> int:
        fetched = _v1_row(kept, "response_mask", row)
        return int(np.count_nonzero(fetched[: spans[row]])) if fetched is not None else int(spans[row])

    return _V1Masks(chats.Lazy(len(spans), length), None, None)


def _v1_advantage(values: np.ndarray | None, kept: _KeptRows, masks: _V1Masks, row: int, span: int) -> float | None:
    """The mean advantage over the row's trained tokens (``response_mask``); None for an empty response.

    ``values``: the row's advantages (its own length).
    """
    if values is None:
        return None
    mask = _row_array(masks.trained[row]) if masks.trained is not None else _v1_row(kept, "response_mask", row)
    trained = mask.astype(bool) if mask is not None else np.arange(len(values)) < span
    shared = min(len(values), len(trained))
    return _advantages(values[None, :shared], trained[None, :shared])[0]


def _v1_truncated(store: _V1Store, kept: _KeptRows, spans: np.ndarray, limit: int, eos: set[int]) -> list[bool]:
    """``cut_at_limit`` of every row: the last token of those at the limit, fetched unless already kept."""
    at_limit = [row for row, span in enumerate(spans) if span >= limit]
    last: dict[int, int | None] = {}
    for row in at_limit:
        if kept.loaded(row):
            last[row] = _last_token(kept.get("responses", row), int(spans[row]))
    missing = [row for row in at_limit if row not in last]
    fetched = store.fetch(missing, ["responses"])
    if missing:
        for row, value in zip(missing, _row_values(fetched["responses"]), strict=True):
            last[row] = _last_token(value, int(spans[row]))
    return [cut_at_limit(int(span), last.get(row), limit, eos) for row, span in enumerate(spans)]


def _last_token(value: Any, span: int) -> int | None:
    if value is None or span <= 0:
        return None
    return int(_row_array(value)[span - 1])


def _ground_truth(reward_model: Any) -> Any:
    return reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None


def _v1_extra(extra_fields: list[Any] | None) -> dict[str, list[Any]] | None:
    """The reward's extra columns: every key of the rows' ``reward_extra_info``, in order of appearance."""
    if not extra_fields:
        return None
    infos = [_reward_extra_info(row) for row in extra_fields]
    keys = dict.fromkeys(key for info in infos for key in info)
    return {key: [info.get(key) for info in infos] for key in keys} or None


_V1_KEY: Final = re.compile(r"(.+)_\d+_\d+")


def _v1_uids(keys: Sequence[Any]) -> list[str] | None:
    """The uid of each v1 row, from its TransferQueue key ``<uid>_<session>_<index>``; None if a key is not one."""
    uids = []
    for key in keys:
        match = _V1_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            return None
        uids.append(match.group(1))
    return uids


def _padded(value: Any, width: int | None) -> tuple[Any, Any]:
    """A TransferQueue field as a right-padded tensor ``width`` wide (default its longest row), and its row lengths."""
    import torch

    if getattr(value, "is_nested", False):
        lengths = value.offsets().diff()
        padded = value.to_padded_tensor(padding=0)
    else:
        padded = value
        lengths = torch.full((value.shape[0],), value.shape[1])
    if width is not None and padded.shape[1] != width:
        padded = (
            torch.nn.functional.pad(padded, (0, width - padded.shape[1]))
            if padded.shape[1] < width
            else padded[:, :width]
        )
    return padded, lengths


def _values(field: Any) -> list[Any]:
    """A non-tensor TransferQueue field's values: a ``NonTensorStack`` (``TensorDict.get``), or a list.

    (``TensorDict[name]`` is the stack's ``tolist()``, at tensordict's cost; ``get`` is the stack.)
    """
    stacked = _stacked_values(field)
    if stacked is not None:
        return stacked
    tolist = getattr(field, "tolist", None)
    return list(tolist()) if callable(tolist) else list(field)


def _stacked_values(field: Any) -> list[Any] | None:
    """A 1-D ``NonTensorStack``'s values as its ``tolist()`` gives them, read from its items; None if not one.

    tensordict's ``tolist`` goes through each item's attribute machinery (about 7 µs a row); an item
    (``NonTensorData``) keeps its value in its ``_non_tensordict["data"]``.
    """
    if type(field).__name__ != "NonTensorStack" or getattr(field, "stack_dim", None) != 0:
        return None
    try:
        items = field.tensordicts
        if not all(type(item).__name__ == "NonTensorData" for item in items):
            return None
        return [item._non_tensordict["data"] for item in items]
    except (AttributeError, KeyError, TypeError):
        return None


def _objects(values: list[Any]) -> np.ndarray:
    """A 1-d object array of ``values`` (numpy would make lists of messages a 2-d array)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _messages(row: Any) -> Any:
    """The captured messages of one row's ``extra_fields`` (``integrations.verl._agent_loop``)."""
    from otel_valgen.integrations.verl._layout import MESSAGES_COLUMN  # the package imports this module

    return row.get(MESSAGES_COLUMN) if isinstance(row, Mapping) else None


def _v1_reward_lists(extra_fields: list[Any]) -> dict[str, np.ndarray]:
    """The ``REWARD_COLUMNS`` of the rows' ``extra_fields``, for those a row has (None in the others)."""
    from otel_valgen.integrations.verl._layout import REWARD_COLUMNS  # the package imports this module

    found = {}
    for name in REWARD_COLUMNS:
        values = [row.get(name) if isinstance(row, Mapping) else None for row in extra_fields]
        if any(value is not None for value in values):
            found[name] = _objects(values)
    return found


def _reward_extra_info(row: Any) -> Mapping[str, Any]:
    """The ``reward_extra_info`` of one row's ``extra_fields`` (v1 keeps the reward's extra columns there)."""
    info = row.get("reward_extra_info") if isinstance(row, Mapping) else None
    return info if isinstance(info, Mapping) else {}

"""verl's training batch as rollout records: ``send_rollout_batch``, the one function the hooks call.

Ids before texts: each response's prompt id is the XXH64 of its prompt's token ids under the
attention mask (int64 bytes), so padding, the step and verl's fresh per-step ``uid`` do not
change it and a prompt that comes back in a later epoch is chosen again. The texts are
sequences that decode a row only when it is read; ``vg.log_rollouts`` reads only the rows of
the k prompts it keeps, so a step decodes k prompts and their k·n responses, not the batch.

Columns (docs/rollouts.md):

- score: ``token_level_scores`` summed over the response (verl's own dump; ``rm_scores``
  when the batch has no ``token_level_scores``);
- advantage: the mean of ``advantages`` over the response mask (GRPO's advantage is one value
  over the whole response; for GAE it is the per-token mean);
- response length: ``response_mask`` summed, verl's ``response_length`` (else the response part
  of ``attention_mask``); the text is decoded from the response part of ``attention_mask``,
  which also holds a multi-turn tool's tokens;
- truncated: the response part of ``attention_mask`` fills the length limit
  (``max_response_length``, default the width of ``responses``) and its last token is not the
  tokenizer's EOS;
- ground truth ``reward_model["ground_truth"]``, data source ``data_source``, and every key of
  ``reward_extra_info`` (default: the batch's ``meta_info["reward_extra_keys"]``, read from
  ``non_tensor_batch`` as verl's ``extract_reward`` does) as an extra column;
- param version (fully-async): ``non_tensor_batch["max_global_steps"]``, the version that
  finished the response, as verl's own ``trajectory_param_versions`` counts it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any, Final, overload

import numpy as np
import xxhash

import otel_valgen as vg
from otel_valgen import _process

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["rollouts_on", "send_rollout_batch"]

PARAM_VERSION_KEY = "max_global_steps"
"""The fully-async batch's per-response parameter version (``min_global_steps``: where a partial rollout began)."""


def rollouts_on() -> bool:
    """Whether rollouts are on (``OTEL_VALGEN_ROLLOUT_COUNT`` > 0): nothing else is read when they are off."""
    emitter = _process.active_emitter()
    return emitter is not None and emitter.settings.rollout_count > 0


def send_rollout_batch(
    batch: DataProto,
    tokenizer: Any,
    *,
    step: int,
    reward_extra_info: Mapping[str, Any] | None = None,
    max_response_length: int | None = None,
    source: str | None = None,
) -> int:
    """Send one trainer step's batch (one row per response) as rollouts; returns what ``log_rollouts`` returns.

    Off (0, no tensor work) unless rollouts are on. Never raises: a failure is counted in
    ``stats()`` and warned about.
    """
    try:
        if not rollouts_on():
            return 0
        columns = rollout_columns(batch, tokenizer, reward_extra_info, max_response_length)
    except Exception as error:
        _process.counters.failed("reading verl's rollout batch", error, _rows(batch))
        return 0
    return vg.log_rollouts(step=step, source=source, **columns)


def _rows(batch: Any) -> int:
    try:
        return len(batch)
    except Exception:
        return 0


def _has(tensors: Any, name: str) -> bool:
    """Whether a TensorDict has ``name`` (TensorDict refuses ``in`` itself)."""
    return name in tensors.keys()  # noqa: SIM118


def _numpy(tensor: Any) -> np.ndarray:
    """A CPU numpy view of a torch tensor (or an array as it is)."""
    detach = getattr(tensor, "detach", None)
    return tensor.detach().cpu().numpy() if callable(detach) else np.asarray(tensor)


def rollout_columns(
    batch: DataProto, tokenizer: Any, reward_extra_info: Mapping[str, Any] | None, max_response_length: int | None
) -> dict[str, Any]:
    """The keyword arguments of ``vg.log_rollouts`` for ``batch`` (texts decoded lazily)."""
    tensors = batch.batch
    responses = _numpy(tensors["responses"])
    width = responses.shape[1]
    prompts = np.ascontiguousarray(_numpy(tensors["prompts"]), dtype=np.int64)  # hashed as int64 bytes
    attention = _numpy(tensors["attention_mask"]).astype(bool)
    prompt_mask = attention[:, : prompts.shape[1]]
    # The response's tokens (right-padded); response_mask also leaves out a multi-turn tool's tokens.
    spans = attention[:, prompts.shape[1] :].sum(axis=1)
    response_mask = _numpy(tensors["response_mask"]).astype(bool) if _has(tensors, "response_mask") else None
    lengths = response_mask.sum(axis=1) if response_mask is not None else spans
    prompt_ids = [xxhash.xxh64_hexdigest(row[mask].tobytes()) for row, mask in zip(prompts, prompt_mask, strict=True)]
    non_tensor = batch.non_tensor_batch
    return {
        "prompts": LazyTexts(len(prompts), _prompt_decoder(prompts, prompt_mask, prompt_ids, tokenizer)),
        "responses": LazyTexts(len(responses), _response_decoder(responses, spans, tokenizer)),
        "rewards": _scores(tensors),
        "prompt_ids": prompt_ids,
        "advantages": _advantages(tensors, response_mask if response_mask is not None else _mask(spans, width)),
        "response_lengths": lengths.tolist(),
        "truncated": _truncated(responses, spans, max_response_length or width, tokenizer),
        "param_versions": _column(non_tensor, PARAM_VERSION_KEY),
        "ground_truths": _ground_truths(non_tensor.get("reward_model")),
        "data_sources": _column(non_tensor, "data_source"),
        "extra": _extra(batch, reward_extra_info),
    }


def _mask(lengths: np.ndarray, width: int) -> np.ndarray:
    """The mask of each row's first ``lengths`` tokens."""
    return np.arange(width)[None, :] < lengths[:, None]  # type: ignore[no-any-return]


class LazyTexts(Sequence[str]):
    """``size`` texts, row i decoded by ``decode(i)`` only when it is read."""

    def __init__(self, size: int, decode: Callable[[int], str]) -> None:
        self._size = size
        self._decode = decode

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if not -self._size <= index < self._size:
            raise IndexError(index)
        return self._decode(index % self._size)


def _prompt_decoder(
    prompts: np.ndarray, mask: np.ndarray, prompt_ids: list[str], tokenizer: Any
) -> Callable[[int], str]:
    """Decode row i's prompt once per prompt id (its n responses share it)."""
    decoded: dict[str, str] = {}

    def decode(index: int) -> str:
        pid = prompt_ids[index]
        if pid not in decoded:
            decoded[pid] = tokenizer.decode(prompts[index][mask[index]].tolist(), skip_special_tokens=True)
        return decoded[pid]

    return decode


def _response_decoder(responses: np.ndarray, lengths: np.ndarray, tokenizer: Any) -> Callable[[int], str]:
    def decode(index: int) -> str:
        return str(tokenizer.decode(responses[index][: lengths[index]].tolist(), skip_special_tokens=True))

    return decode


def _scores(tensors: Any) -> list[float] | None:
    for name in ("token_level_scores", "rm_scores"):
        if _has(tensors, name):
            return _numpy(tensors[name]).sum(axis=1, dtype=np.float64).tolist()  # type: ignore[no-any-return]
    return None


def _advantages(tensors: Any, response_mask: np.ndarray) -> list[float | None] | None:
    """The mean advantage over each response's tokens; None for an empty response."""
    if not _has(tensors, "advantages"):
        return None
    advantages = _numpy(tensors["advantages"])
    counts = response_mask.sum(axis=1)
    sums = np.asarray(np.sum(advantages, axis=1, where=response_mask, dtype=np.float64))
    return [float(total / count) if count else None for total, count in zip(sums, counts, strict=True)]


def _eos_ids(tokenizer: Any) -> set[int]:
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        return {eos}
    return {token for token in eos if isinstance(token, int)} if isinstance(eos, list | tuple) else set()


def _truncated(responses: np.ndarray, lengths: np.ndarray, limit: int, tokenizer: Any) -> list[bool]:
    """Whether each response fills ``limit`` tokens without ending on EOS."""
    eos = _eos_ids(tokenizer)
    rows = np.arange(len(responses))
    last = responses[rows, np.clip(lengths - 1, 0, None)] if responses.shape[1] else np.zeros(len(responses))
    return [bool(length >= limit and int(token) not in eos) for length, token in zip(lengths, last, strict=True)]


def _column(non_tensor: Mapping[str, Any], name: str) -> list[Any] | None:
    values = non_tensor.get(name)
    return None if values is None else list(np.asarray(values).tolist())


def _ground_truths(reward_model: Any) -> list[Any] | None:
    if reward_model is None:
        return None
    return [item.get("ground_truth") if isinstance(item, Mapping) else None for item in reward_model]


def _extra(batch: Any, reward_extra_info: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``reward_extra_info``, else the batch's ``reward_extra_keys`` columns; empty ones left out."""
    if reward_extra_info is None:
        keys = batch.meta_info.get("reward_extra_keys") or ()
        reward_extra_info = {key: batch.non_tensor_batch[key] for key in keys if key in batch.non_tensor_batch}
    filled = {
        name: values
        for name, values in reward_extra_info.items()
        if not isinstance(values, Sized) or len(values)  # verl's reward_extra_info allows empty columns
    }
    return filled or None


# -- the trainers' hook points (patched by integrations.verl.install) -----------------------------


def _max_response_length(trainer: Any) -> int | None:
    """Verl's response length limit (``rollout.response_length``, else ``data.max_response_length``)."""
    for path in (("actor_rollout_ref", "rollout", "response_length"), ("data", "max_response_length")):
        value: Any = getattr(trainer, "config", None)
        for name in path:
            try:
                value = value.get(name) if value is not None else None
            except Exception:
                value = None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def send_legacy_step(trainer: Any, batch: DataProto) -> int:
    """``RayPPOTrainer._update_actor``'s batch: the step's final batch (rewards, advantages), at ``global_steps``.

    ``fit`` puts the reward's extra columns into ``non_tensor_batch`` under
    ``meta_info["reward_extra_keys"]`` before computing advantages, so they come with the batch.
    """
    return send_rollout_batch(
        batch,
        trainer.tokenizer,
        step=trainer.global_steps,
        max_response_length=_max_response_length(trainer),
        source="trainer",
    )


def separation_step(trainer: Any) -> int:
    """The step of a batch that ``_fit_dump_data`` sees: the fully-async trainer's version its update leads to.

    verl logs a sync cycle's training metrics, and validates, at ``current_param_version``, which
    ``_fit_update_local_step`` raises on the cycle's last local step (``local_trigger_step``
    back to 1), before ``_fit_dump_data``; an earlier local step's batch belongs to the version
    the cycle ends at, one more. Without a version (a separation trainer that is not
    fully-async): ``global_steps``.
    """
    version = getattr(trainer, "__dict__", {}).get("current_param_version")
    if isinstance(version, int):
        return version if getattr(trainer, "local_trigger_step", 1) == 1 else version + 1
    return int(trainer.global_steps)


def send_separation_step(trainer: Any, batch: DataProto) -> int:
    """``SeparateRayPPOTrainer._fit_dump_data``'s batch (the fully-async trainer's), with its param versions."""
    extra = getattr(trainer, "reward_extra_infos_dict", None)
    return send_rollout_batch(
        batch,
        trainer.tokenizer,
        step=separation_step(trainer),
        reward_extra_info=extra or None,  # empty: the batch's reward_extra_keys
        max_response_length=_max_response_length(trainer),
        source="trainer",
    )


V1_FIELDS: Final = (
    "prompts",
    "responses",
    "response_mask",
    "rm_scores",
    "advantages",
    "reward_model",
    "data_source",
    "extra_fields",
)
"""What the v1 hook fetches from TransferQueue (verl's ``_log_rollout_data`` fetches a subset)."""


def send_v1_step(trainer: Any, batch: Any, global_steps: int) -> int:
    """The v1 ``PPOTrainer._compute_metrics``'s batch (a ``KVBatchMeta``), fetched from TransferQueue.

    Fetches only ``V1_FIELDS``, and only when rollouts are on; padding rows (``tags`` with
    ``is_padding``) are left out; the param version is the tags' ``max_global_steps``.
    """
    if not rollouts_on():
        return 0
    try:
        data = _v1_batch(batch)
    except Exception as error:
        _process.counters.failed("fetching the v1 rollout batch from TransferQueue", error, _rows(batch.keys))
        return 0
    return send_rollout_batch(
        data, trainer.tokenizer, step=global_steps, max_response_length=_max_response_length(trainer), source="trainer"
    )


def _v1_batch(batch: Any) -> DataProto:
    """A ``DataProto`` of the v1 batch's rows, padded as verl's legacy trainer holds them."""
    import torch
    import transfer_queue as tq  # type: ignore[import-untyped]
    from verl import DataProto

    fetched = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=list(V1_FIELDS))
    present = set(fetched.keys())
    prompts, prompt_lengths = _padded(fetched["prompts"], None)
    responses, response_lengths = _padded(fetched["responses"], None)
    width = responses.shape[1]
    tensors: dict[str, Any] = {
        "prompts": prompts,
        "responses": responses,
        "attention_mask": torch.cat(
            [_lengths_mask(prompt_lengths, prompts.shape[1]), _lengths_mask(response_lengths, width)], dim=1
        ),
    }
    for name, target in (
        ("response_mask", "response_mask"),
        ("rm_scores", "token_level_scores"),
        ("advantages", "advantages"),
    ):
        if name in present:
            tensors[target] = _padded(fetched[name], width)[0]
    non_tensors: dict[str, Any] = {
        PARAM_VERSION_KEY: np.array([tag.get(PARAM_VERSION_KEY) for tag in batch.tags], dtype=object)
    }
    for name in ("reward_model", "data_source"):
        if name in present:
            non_tensors[name] = np.array(_values(fetched[name]), dtype=object)
    extra_keys: list[str] = []
    if "extra_fields" in present:
        infos = [_reward_extra_info(row) for row in _values(fetched["extra_fields"])]
        extra_keys = list(dict.fromkeys(key for info in infos for key in info))
        for key in extra_keys:
            non_tensors[key] = np.array([info.get(key) for info in infos], dtype=object)
    whole = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"reward_extra_keys": extra_keys})
    keep = [index for index, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
    return whole if len(keep) == len(whole) else whole.select_idxs(np.array(keep, dtype=np.int64))  # type: ignore[no-any-return]


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
    """A non-tensor TransferQueue field's values (a ``NonTensorStack``, or the list tensordict gives for one)."""
    tolist = getattr(field, "tolist", None)
    return list(tolist()) if callable(tolist) else list(field)


def _lengths_mask(lengths: Any, width: int) -> Any:
    import torch

    return (torch.arange(width)[None, :] < lengths[:, None]).long()


def _reward_extra_info(row: Any) -> Mapping[str, Any]:
    """The ``reward_extra_info`` of one row's ``extra_fields`` (v1 keeps the reward's extra columns there)."""
    info = row.get("reward_extra_info") if isinstance(row, Mapping) else None
    return info if isinstance(info, Mapping) else {}

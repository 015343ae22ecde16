"""Benchmark: one training step's rollout dump, verl 0.9.1's own against otel-valgen's, on the same batch.

Two paths, one per trainer kind: the legacy trainer's batch (a ``DataProto``, ``RayPPOTrainer``) and
``main_ppo``'s default v1 trainer's (the same rows in a real TransferQueue, ``PPOTrainer``).

The batch is a real verl ``DataProto`` of 256 prompts x 8 responses (2,048 rows): prompts
left-padded to 1,024 tokens, responses right-padded to 4,096 (lognormal lengths, median about
1,450; some hit the limit), ``token_level_scores``, ``advantages`` (GRPO, per prompt group),
``response_mask``, ``attention_mask``, ``uid``/``data_source``/``reward_model``, the agent
loop's ``raw_prompt`` (the prompt as one user message) and ``__num_turns__`` (2, single turn), and
the per-token fields verl has with ``calculate_log_probs``, a reference policy and the rollout
correction's importance weights: ``rollout_log_probs``, ``old_log_probs``, ``ref_log_prob``,
``rollout_is_weights`` (float32, the trainer's a little off the rollout's). ``--no-tokens``: no
per-token field, responses right-padded to 2,048 (median about 720). The tokens are real text of a
byte-level BPE (vocabulary 32k) that the bench trains with ``tokenizers`` on generated text and
wraps in ``transformers.PreTrainedTokenizerFast`` (cached under ``--cache-dir``).

- verl: the real, unbound ``RayPPOTrainer._log_rollout_data`` called on a minimal object that
  carries ``tokenizer``, ``global_steps`` and verl's own ``_dump_generations``,
  ``_write_generations`` and ``_init_dump_executor``. Timed as the training loop sees it (it
  decodes every row, then hands the JSONL write to a thread), and until that write completes.
- v1 (``main_ppo``'s default): the same 2,048 rows in a real TransferQueue (``transfer_queue.init``
  on a local CPU Ray cluster, one SimpleStorage unit, as ``tests/verl`` run it under ``main_ppo``),
  written as verl's ``AgentLoopWorkerTQ`` writes them (one unpadded row per key ``{uid}_{session}_0``,
  ``verl.utils.tensordict_utils.list_of_dict_to_tensordict``: nested ``prompts``, ``responses``,
  ``response_mask``, ``rm_scores``, ``rollout_log_probs``; ``reward_model``, ``data_source``,
  ``raw_prompt``, ``num_turns``, ``extra_fields``; tags with the lengths and param versions), then
  what the trainer writes back (nested ``old_log_probs``, ``ref_log_prob``, ``advantages``,
  ``rollout_is_weights``). Timed: verl's
  real, unbound v1 ``PPOTrainer._log_rollout_data`` (fetches its fields with ``tq.kv_batch_get``,
  decodes every row) on a minimal object as above, and otel-valgen's v1 hook
  ``verl._v1_fetch.send_v1_step(trainer, batch, global_steps)`` on the same ``KVBatchMeta``, after
  what v1's trainer does before it in a step (untimed, verl's own work: its real, unbound
  ``PPOTrainer._compute_advantage`` with GRPO and the rollout correction's per-token weights, which
  writes advantages, weights and mask back, then ``_compute_metrics``' fetch of every row): the
  hook reads what those held (``verl._v1_capture``, installed as otel-valgen's Ray hook installs it)
  and fetches the rest; and the same hook with what was held dropped first, which fetches every
  field from TransferQueue (its fallback).
- otel-valgen, k = 4 prompts (``rollout_count``), sending OTLP/HTTP to the built collector
  (``build/otelcol-valgen``, ``collector-config/collector.yaml``, destinations stand-ins):
  ``otel_valgen.integrations.verl_rollouts.send_rollout_batch`` when this checkout has it (decodes
  one prompt per uid for its id and only the k·n responses it keeps, sends their per-token data when
  the checkout captures it), and always a baseline: ``vg.log_rollouts`` given texts decoded beforehand
  (untimed), the other columns taken from the batch's tensors (timed; no per-token data). Each
  returns once the step's records are flushed to the collector.
- On the wire: one more step of each hook, untimed, with the OTLP exporter's requests looked at:
  the protobuf size of each kept record and of its ``valgen.tokens`` attribute (OTLP/HTTP sends
  them uncompressed by default).

Run: ``python bench/rollout_dump_bench.py [--repeats 5] [--no-v1] [--no-tokens]`` (needs ``make
collector``; the first run trains the tokenizer, about a minute on 2 cores; v1 starts a local Ray
cluster). Prints medians per step, each otel-valgen path's ratio to verl's own dump of the same
trainer and the bytes per kept response; none is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's otel_valgen and tests

import numpy as np
import torch

K = 4
VOCAB = 32_000
SPECIAL = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2
PAD, EOS = 0, 2
CORPUS_WORDS = 1_500_000
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "otel-valgen-bench"


@dataclasses.dataclass(frozen=True)
class Shape:
    """The step's batch: prompts x n responses, their padded widths, and whether it has per-token fields."""

    prompts: int = 256
    n: int = 8
    prompt_len: int = 1024
    response_len: int = 4096
    tokens: bool = True

    @property
    def rows(self) -> int:
        """Responses in the step."""
        return self.prompts * self.n


TOKENS = Shape()
TEXT = Shape(response_len=2048, tokens=False)  # the text-only batch of the earlier figures
TOKEN_FIELDS = ("rollout_log_probs", "old_log_probs", "ref_log_prob", "rollout_is_weights")


def _pseudo_words(rng: random.Random, count: int) -> list[str]:
    """Distinct word-like strings made of syllables, so that BPE has structure to learn."""
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
    return sorted(words)


def _corpus(seed: int = 0) -> list[str]:
    """Generated lines of prose and arithmetic, word frequencies Zipf-like."""
    rng = random.Random(seed)
    words = _pseudo_words(rng, 40_000)
    weights = [1 / (rank + 10) for rank in range(len(words))]
    lines, total = [], 0
    while total < CORPUS_WORDS:
        size = rng.randint(8, 40)
        line = " ".join(rng.choices(words, weights, k=size))
        if rng.random() < 0.3:
            a, b = rng.randint(0, 9999), rng.randint(0, 999)
            line += f" so {a} + {b} = {a + b}, and {a} * {b} = {a * b}."
        lines.append(line.capitalize() + ".")
        total += size
    return lines


def tokenizer_and_pool(cache: Path) -> tuple[Any, np.ndarray]:
    """The fast tokenizer (trained once, then read from ``cache``) and the corpus as one array of token ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    folder = cache / f"bpe-{VOCAB}"
    path, pool_path = folder / "tokenizer.json", folder / "pool.npy"
    if not path.is_file() or not pool_path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"training a byte-level BPE (vocab {VOCAB}) into {folder} ...", flush=True)
        lines = _corpus()
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=VOCAB, special_tokens=list(SPECIAL), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
        bpe.train_from_iterator(lines, trainer)
        bpe.save(str(path))
        pool = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in bpe.encode_batch(lines)])
        np.save(pool_path, pool)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(path), pad_token=SPECIAL[0], bos_token=SPECIAL[1], eos_token=SPECIAL[2]
    )
    return tokenizer, np.load(pool_path)


def _lengths(rng: np.random.Generator, shape: Shape) -> tuple[np.ndarray, np.ndarray]:
    """Prompt lengths (one per prompt, 64..prompt_len) and response lengths (lognormal, 7-9 % cut at the limit)."""
    prompt = rng.integers(min(64, shape.prompt_len), shape.prompt_len + 1, size=shape.prompts)
    mean = 6.6 + math.log(shape.response_len / 2048)  # median about 720 tokens for 2,048, 1,450 for 4,096
    response = rng.lognormal(mean=mean, sigma=0.7, size=shape.rows).astype(np.int64)
    return prompt, np.clip(response, min(16, shape.response_len), shape.response_len)


def _token_fields(rows: int, width: int, response_mask: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    """Per-token float32 fields as verl pads them (0 past the response): log-probabilities and IS weights."""
    generator = torch.Generator().manual_seed(seed)
    rollout = torch.log(torch.rand(rows, width, generator=generator).clamp_min(1e-4))
    trainer = rollout + 0.02 * torch.randn(rows, width, generator=generator)
    reference = rollout + 0.1 * torch.randn(rows, width, generator=generator)
    weights = torch.exp(trainer - rollout).clamp(max=2.0)
    mask = response_mask.float()
    return {
        name: (values * mask).contiguous()
        for name, values in zip(TOKEN_FIELDS, (rollout, trainer, reference, weights), strict=True)
    }


def _messages(tokenizer: Any, prompts: torch.Tensor, lengths: np.ndarray, n: int) -> np.ndarray:
    """Each row's ``raw_prompt``: its prompt as one user message, as the dataset gives verl's agent loop."""
    width = prompts.shape[1]
    texts = tokenizer.batch_decode([prompts[p * n, width - length :] for p, length in enumerate(lengths)])
    out = np.empty(len(lengths) * n, dtype=object)
    out[:] = [[{"role": "user", "content": text}] for text in texts for _ in range(n)]
    return out


def make_batch(pool: np.ndarray, shape: Shape, tokenizer: Any, seed: int = 1) -> Any:
    """A verl DataProto as the trainer has it when it dumps rollouts (after reward and advantage).

    With verl's agent loop's columns: ``raw_prompt`` (the prompt's messages) and ``__num_turns__`` (2:
    single-turn), which make each row a conversation for otel-valgen.
    """
    from verl import DataProto

    rng = np.random.default_rng(seed)
    prompt_lengths, response_lengths = _lengths(rng, shape)
    rows, n, width, prompt_len = shape.rows, shape.n, shape.response_len, shape.prompt_len
    prompts = torch.full((rows, prompt_len), PAD, dtype=torch.long)
    responses = torch.full((rows, width), PAD, dtype=torch.long)
    for p, length in enumerate(prompt_lengths):
        start = int(rng.integers(0, len(pool) - length))
        prompts[p * n : (p + 1) * n, prompt_len - length :] = torch.from_numpy(pool[start : start + length])
    for row, length in enumerate(response_lengths):
        start = int(rng.integers(0, len(pool) - length))
        responses[row, :length] = torch.from_numpy(pool[start : start + length])
        if length < width:  # it ended by itself: its last token is EOS
            responses[row, length - 1] = EOS
    response_mask = (torch.arange(width)[None, :] < torch.from_numpy(response_lengths)[:, None]).long()
    prompt_mask = torch.arange(prompt_len)[None, :] >= (prompt_len - torch.from_numpy(prompt_lengths))[:, None]
    prompt_mask = prompt_mask.long().repeat_interleave(n, dim=0)
    correct = torch.from_numpy(rng.random(rows) < 0.4).float()
    scores = torch.zeros(rows, width)
    scores[torch.arange(rows), torch.from_numpy(response_lengths - 1)] = correct
    grouped = correct.view(shape.prompts, n)
    advantage = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(rows)
    uids = np.repeat(np.array([f"uid-{p:05d}" for p in range(shape.prompts)], dtype=object), n)
    fields = _token_fields(rows, width, response_mask, seed) if shape.tokens else {}
    return DataProto.from_single_dict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
            "response_mask": response_mask,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
            "advantages": advantage[:, None] * response_mask,
            **fields,
            "uid": uids,
            "raw_prompt": _messages(tokenizer, prompts, prompt_lengths, n),
            "__num_turns__": np.full(rows, 2, dtype=np.int32),
            "data_source": np.array(["synthetic/arith"] * rows, dtype=object),
            "reward_model": np.array(
                [{"ground_truth": str(p * 7), "style": "rule"} for p in range(shape.prompts) for _ in range(n)],
                dtype=object,
            ),
        }
    )


VERL_METHODS = (
    "_log_rollout_data",
    "_dump_generations",
    "_write_generations",
    "_init_dump_executor",
    "_shutdown_dump_executor",
)


def verl_dumper(tokenizer: Any) -> Any:
    """The smallest object verl's ``_log_rollout_data`` runs on: verl's own methods, as RayPPOTrainer has them."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    # vars(): the class's own attributes, so that the staticmethod _write_generations stays static.
    dumper = type("VerlDumper", (), {name: vars(RayPPOTrainer)[name] for name in VERL_METHODS})()
    dumper.tokenizer = tokenizer
    dumper.global_steps = 0
    dumper._init_dump_executor()
    return dumper


def verl_dump(dumper: Any, batch: Any, extra: dict[str, list[float]], folder: str, step: int) -> tuple[float, float]:
    """Seconds in ``_log_rollout_data`` (what the training loop waits) and until its JSONL is written."""
    dumper.global_steps = step
    timing: dict[str, float] = {}
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints a line per dump
        started = time.perf_counter()
        dumper._log_rollout_data(batch, extra, timing, folder)
        returned = time.perf_counter()
        for future in dumper._dump_futures:
            future.result()
        written = time.perf_counter()
    return returned - started, written - started


def decoded(batch: Any, tokenizer: Any) -> tuple[list[str], list[str]]:
    """Every row's prompt and response text, as verl decodes them (done before the baseline's clock starts)."""
    prompts = tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True)
    return prompts, tokenizer.batch_decode(batch.batch["responses"], skip_special_tokens=True)


def log_rollouts_baseline(
    batch: Any, texts: tuple[list[str], list[str]], extra: dict[str, list[float]], step: int
) -> float:
    """Seconds for the columns from the batch's tensors plus ``vg.log_rollouts`` of pre-decoded texts."""
    import otel_valgen as vg

    limit = batch.batch["responses"].shape[1]
    started = time.perf_counter()
    lengths = batch.batch["response_mask"].sum(-1)
    accepted = vg.log_rollouts(
        texts[0],
        texts[1],
        batch.batch["token_level_scores"].sum(-1).tolist(),
        step=step,
        prompt_ids=batch.non_tensor_batch["uid"].tolist(),
        advantages=batch.batch["advantages"][:, 0].tolist(),
        response_lengths=lengths.tolist(),
        truncated=(lengths >= limit).tolist(),
        ground_truths=[rm.get("ground_truth") for rm in batch.non_tensor_batch["reward_model"]],
        data_sources=batch.non_tensor_batch["data_source"].tolist(),
        extra=extra,
    )
    elapsed = time.perf_counter() - started
    assert accepted == len(batch), accepted
    return elapsed


def the_hook() -> Callable[..., int] | None:
    """``send_rollout_batch`` of otel_valgen's verl rollout hook, or None on a checkout without it."""
    try:
        from otel_valgen.integrations.verl_rollouts import send_rollout_batch
    except ImportError:
        return None
    hook: Callable[..., int] = send_rollout_batch
    return hook


def hook_run(send: Callable[..., int], batch: Any, tokenizer: Any, extra: dict[str, list[float]], step: int) -> float:
    """Seconds in ``send_rollout_batch`` for the whole batch (the response length limit: the responses' width)."""
    limit = batch.batch["responses"].shape[1]
    started = time.perf_counter()
    send(batch, tokenizer, step=step, reward_extra_info=extra, max_response_length=limit, source="trainer")
    return time.perf_counter() - started


def decode_kept(batch: Any, tokenizer: Any, n: int) -> float:
    """Seconds to decode k·n rows' prompts and responses: what a hook that picks first still decodes."""
    rows = torch.arange(K * n)
    started = time.perf_counter()
    tokenizer.batch_decode(batch.batch["prompts"][rows], skip_special_tokens=True)
    tokenizer.batch_decode(batch.batch["responses"][rows], skip_special_tokens=True)
    return time.perf_counter() - started


V1_METHODS = (*VERL_METHODS[1:],)  # the v1 trainer's own dump methods; _log_rollout_data is v1's too
V1_PARTITION = "train"


TRAINER_FIELDS = ("advantages", "old_log_probs", "ref_log_prob", "rollout_is_weights")
"""What v1's trainer writes back into TransferQueue (``response_to_nested``): the agent loop's rows have the rest."""


def v1_rows(batch: Any) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]], dict[str, list[Any]]]:
    """The batch as verl's ``AgentLoopWorkerTQ`` puts it into TransferQueue: keys, one unpadded dict per row, tags.

    Also the nested fields the trainer writes back (``TRAINER_FIELDS`` the batch has), one row each.
    """
    prompts, responses = batch.batch["prompts"], batch.batch["responses"]
    prompt_mask = batch.batch["attention_mask"][:, : prompts.shape[1]].bool()
    response_mask = batch.batch["response_mask"]
    scores = batch.batch["token_level_scores"]
    rollout = batch.batch["rollout_log_probs"] if "rollout_log_probs" in batch.batch.keys() else None  # noqa: SIM118
    written = [name for name in TRAINER_FIELDS if name in batch.batch.keys()]  # noqa: SIM118
    extra_acc = (scores.sum(-1) > 0).float().tolist()
    sessions: dict[str, int] = {}
    keys, rows, tags = [], [], []
    trainer: dict[str, list[Any]] = {name: [] for name in written}
    for row in range(len(batch)):
        length = int(response_mask[row].sum())
        uid = str(batch.non_tensor_batch["uid"][row])
        session = sessions[uid] = sessions.get(uid, -1) + 1
        keys.append(f"{uid}_{session}_0")
        rows.append(
            {
                "uid": uid,  # the dataset row's columns come with it (verl's agent loop: field.update(kwargs))
                "prompts": prompts[row][prompt_mask[row]].clone(),
                "responses": responses[row, :length].clone(),
                "response_mask": response_mask[row, :length].clone(),
                "rm_scores": scores[row, :length].clone(),
                **({"rollout_log_probs": rollout[row, :length].clone()} if rollout is not None else {}),
                "reward_model": batch.non_tensor_batch["reward_model"][row],
                "raw_prompt": batch.non_tensor_batch["raw_prompt"][row],
                "num_turns": int(batch.non_tensor_batch["__num_turns__"][row]),
                "data_source": str(batch.non_tensor_batch["data_source"][row]),
                "extra_fields": {
                    "reward_extra_info": {"acc": extra_acc[row]},
                    "global_steps": 0,
                    "min_global_steps": 0,
                    "max_global_steps": 0,
                },
            }
        )
        tags.append(
            {
                "status": "success",
                "prompt_len": int(prompt_mask[row].sum()),
                "response_len": length,
                "global_steps": 0,
                "min_global_steps": 0,
                "max_global_steps": 0,
            }
        )
        for name in written:
            trainer[name].append(batch.batch[name][row, :length].clone())
    return keys, rows, tags, trainer


@contextlib.contextmanager
def v1_queue(batch: Any) -> Any:
    """A local CPU Ray cluster and a real TransferQueue holding ``batch`` as v1's trainer has it: its KVBatchMeta."""
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from tensordict import TensorDict
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    keys, rows, tags, trainer = v1_rows(batch)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        for start in range(0, len(keys), 256):  # the agent-loop workers put a few rows at a time
            end = start + 256
            tq.kv_batch_put(
                keys=keys[start:end],
                partition_id=V1_PARTITION,
                fields=list_of_dict_to_tensordict(rows[start:end]),
                tags=tags[start:end],
            )
        meta = None
        for name, values in trainer.items():  # one put per trainer stage, as _compute_old_log_prob ... do
            nested = torch.nested.as_nested_tensor(values, layout=torch.jagged)
            fields = TensorDict({name: nested}, batch_size=[len(keys)])
            meta = tq.kv_batch_put(keys=keys, partition_id=V1_PARTITION, fields=fields)
        yield meta
    finally:
        with contextlib.suppress(Exception):
            tq.close()
        ray.shutdown()


def v1_dumper(tokenizer: Any) -> Any:
    """The smallest object verl's v1 ``PPOTrainer._log_rollout_data`` runs on: v1's own methods."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    methods = {name: vars(PPOTrainer)[name] for name in ("_log_rollout_data", *V1_METHODS)}
    dumper = type("VerlV1Dumper", (), methods)()
    dumper.tokenizer = tokenizer
    dumper.global_steps = 0
    dumper._init_dump_executor()
    return dumper


def v1_verl_dump(dumper: Any, meta: Any, folder: str, step: int) -> tuple[float, float]:
    """Seconds in v1's ``_log_rollout_data`` (fetch from TransferQueue, decode) and until its JSONL is written."""
    dumper.global_steps = step
    with contextlib.redirect_stdout(io.StringIO()):
        started = time.perf_counter()
        dumper._log_rollout_data(meta, {}, folder)
        returned = time.perf_counter()
        for future in dumper._dump_futures:
            future.result()
        written = time.perf_counter()
    return returned - started, written - started


V1_METRIC_FIELDS = (
    "prompts",
    "responses",
    "response_mask",
    "values",
    "advantages",
    "returns",
    "rm_scores",
    "token_level_rewards",
    "num_turns",
)
"""What v1's ``PPOTrainer._compute_metrics`` fetches of every row (verl 0.9.1), just before the rollout hook."""


def v1_trainer(tokenizer: Any, shape: Shape) -> Any:
    """What the v1 hook and verl's ``_compute_advantage`` read of the v1 trainer: tokenizer and config.

    GRPO over ``rollout.n`` responses, and the rollout correction's per-token importance weights
    (decoupled mode), which give the batch its ``rollout_is_weights``.
    """
    from omegaconf import OmegaConf

    from tests.verl.harness import GRPO_CORRECTED

    trainer = type("V1Trainer", (), {})()
    trainer.tokenizer = tokenizer
    trainer.config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"response_length": shape.response_len, "n": shape.n}},
            "algorithm": GRPO_CORRECTED,
        }
    )
    return trainer


def v1_step(trainer: Any, meta: Any, step: int) -> None:
    """What v1's trainer does with the batch before the rollout hook that the hook reads from (untimed: verl's own).

    verl's real, unbound ``PPOTrainer._compute_advantage`` (fetches its fields from TransferQueue,
    runs the rollout correction and GRPO, writes advantages, weights and mask back), then
    ``_compute_metrics``' fetch of every row (``get_metric_data_with_optional_routed_experts`` as that
    method calls it). With otel-valgen's integration installed, both are what ``verl._v1_capture`` watches.
    """
    import transfer_queue as tq
    from verl.trainer.ppo.v1 import trainer_base

    vars(trainer_base.PPOTrainer)["_compute_advantage"](trainer, meta, {})
    trainer_base.get_metric_data_with_optional_routed_experts(
        keys=meta.keys,
        partition_id=meta.partition_id,
        fields=list(V1_METRIC_FIELDS),
        moe_lb_metrics_interval=0,
        global_steps=step,
        accumulator=None,
        kv_batch_get=tq.kv_batch_get,
    )


def v1_hook_run(trainer: Any, meta: Any, step: int, *, held: bool = True) -> float:
    """Seconds in otel-valgen's v1 hook ``send_v1_step`` after the trainer's step (``v1_step``, untimed).

    ``held=False``: what ``verl._v1_capture`` kept is dropped before the hook, which then fetches every field
    (the hook's fallback when it does not find the step's rows held).
    """
    from otel_valgen.integrations.verl import _v1_capture
    from otel_valgen.integrations.verl._v1_fetch import send_v1_step

    v1_step(trainer, meta, step)
    if not held:
        _v1_capture.forget()
    started = time.perf_counter()
    send_v1_step(trainer, meta, step)
    return time.perf_counter() - started


def install_integration() -> None:
    """otel-valgen's verl integration, as its Ray setup hook installs it in every process (when the checkout has it)."""
    try:
        from otel_valgen.integrations import verl as integration
    except ImportError:
        return
    integration.install()


def rollout_summaries(stand_in: Any) -> list[dict[str, Any]]:
    """The rollout step summaries the collector sent to the wandb stand-in."""
    return [
        r.attributes
        for r in stand_in.records()
        if r.event == "valgen.step.summary" and r.attributes.get("valgen.kind") == "rollout"
    ]


def ms(seconds: list[float]) -> float:
    """The median, in milliseconds."""
    return statistics.median(seconds) * 1000


@dataclasses.dataclass
class Wire:
    """The protobuf sizes of a hook's kept records as the OTLP/HTTP exporter sends them."""

    records: list[int] = dataclasses.field(default_factory=list)  # each kept record, whole
    tokens: list[int] = dataclasses.field(default_factory=list)  # its valgen.tokens attribute
    counts: list[int] = dataclasses.field(default_factory=list)  # its response's tokens


@contextlib.contextmanager
def wire_tap(wire: Wire) -> Any:
    """Note the size of each generation record the OTLP/HTTP exporter sends while the block runs.

    The exporter is the SDK's, its request built in place (``_otlp_request``): the same bytes as the
    SDK's encoder, which sizes each record here.
    """
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
    from opentelemetry.exporter.otlp.proto.common._internal._log_encoder import _encode_log

    from otel_valgen import contract
    from otel_valgen._otlp_request import InPlaceHttpExporter as OTLPLogExporter

    export = OTLPLogExporter.export

    def tapped(self: Any, batch: Any) -> Any:
        for readable in batch:
            record = readable.log_record
            if record.event_name != contract.EVENT_GENERATION:
                continue
            wire.records.append(_encode_log(readable).ByteSize())
            packed = (record.attributes or {}).get(contract.TOKENS)
            if packed is not None:
                wire.tokens.append(_encode_attributes({contract.TOKENS: packed})[0].ByteSize())
                wire.counts.append(int(packed["count"]))
        return export(self, batch)

    OTLPLogExporter.export = tapped  # type: ignore[method-assign]
    try:
        yield wire
    finally:
        OTLPLogExporter.export = export  # type: ignore[method-assign]


def measure(
    batch: Any, tokenizer: Any, extra: dict[str, list[float]], repeats: int, shape: Shape, *, v1: bool = True
) -> tuple[dict[str, list[float]], list[dict[str, Any]], dict[str, Wire]]:
    """Seconds per step of each variant, the collector's rollout summaries, each hook's kept records on the wire.

    A first, untimed round warms up; the wire is looked at in one more step of each hook, untimed.
    """
    import otel_valgen as vg
    from tests.e2e import harness

    texts = decoded(batch, tokenizer)
    send = the_hook()
    times: dict[str, list[float]] = {"verl": [], "verl_written": [], "baseline": [], "hook": [], "decode": []}
    times.update({"v1_verl": [], "v1_verl_written": [], "v1_hook": [], "v1_fetched": []})
    wires = {"legacy": Wire(), "v1": Wire()}
    queue = v1_queue(batch) if v1 and send else contextlib.nullcontext()
    install_integration()
    with (
        tempfile.TemporaryDirectory() as tmp,
        harness.bench_collector(Path(tmp), "2s") as (collector, wandb, _),
        queue as meta,
    ):
        vg.configure(
            run_id="bench-rollouts",
            rollout_count=K,
            endpoint=f"http://{collector.http_endpoint}",
            source="trainer",
            directory=os.path.join(tmp, "emitter"),
        )
        verl = verl_dumper(tokenizer)
        if meta is not None:
            v1_verl = v1_dumper(tokenizer)
            trainer = v1_trainer(tokenizer, shape)
        for step in range(1, repeats + 2):  # step 1 warms up (verl's thread, the OTLP connection)
            measured = (
                *verl_dump(verl, batch, extra, os.path.join(tmp, "rollout_data_dir"), step),
                log_rollouts_baseline(batch, texts, extra, step),
                hook_run(send, batch, tokenizer, extra, step + 10_000) if send else float("nan"),
                decode_kept(batch, tokenizer, shape.n),
            )
            if meta is not None:  # v1: verl's dump, then the hook, on the same rows in TransferQueue
                measured += (
                    *v1_verl_dump(v1_verl, meta, os.path.join(tmp, "v1_rollout_data_dir"), step),
                    v1_hook_run(trainer, meta, step + 20_000),
                    v1_hook_run(trainer, meta, step + 50_000, held=False),
                )
            for name, value in zip(times, measured, strict=False):
                times[name] += [value] if step > 1 else []
        if send is not None:
            with wire_tap(wires["legacy"]):
                hook_run(send, batch, tokenizer, extra, 30_000)
        if meta is not None:
            with wire_tap(wires["v1"]):
                v1_hook_run(trainer, meta, 40_000)
        verl._shutdown_dump_executor()
        if meta is not None:
            v1_verl._shutdown_dump_executor()
        vg.shutdown()
        otel_steps = (
            (repeats + 1) * (1 + (send is not None) + 2 * (meta is not None)) + (send is not None) + (meta is not None)
        )
        harness.wait_for(lambda: len(rollout_summaries(wandb)) >= otel_steps, 60, "every rollout summary")
        return times, rollout_summaries(wandb), wires


def report(
    times: dict[str, list[float]], summaries: list[dict[str, Any]], wires: dict[str, Wire], repeats: int, shape: Shape
) -> None:
    """Print the medians, the ratios to verl's dump and the kept records' bytes on the wire."""
    verl_ms, base_ms = ms(times["verl"]), ms(times["baseline"])
    whole = {(s["valgen.prompts_kept"], s["valgen.kept"]) for s in summaries} == {(K, K * shape.n)}
    print("destination: the built collector (build/otelcol-valgen, collector.yaml) over OTLP/HTTP, stand-ins after it")
    print(f"  {len(summaries)} rollout steps closed, each {K} prompts x {shape.n} responses kept: {whole}")
    print(f"per step, median of {repeats} runs:")
    print(f"  verl _log_rollout_data, as the loop waits     {verl_ms:9.1f} ms   1.000x")
    print(f"  verl, until its JSONL write completes         {ms(times['verl_written']):9.1f} ms")
    if math.isnan(times["hook"][0]):
        print("  otel-valgen send_rollout_batch                (absent here: verl_rollouts is not on this branch)")
    else:
        hook_ms = ms(times["hook"])
        print(
            f"  otel-valgen send_rollout_batch                {hook_ms:9.1f} ms   {hook_ms / verl_ms:.3f}x (goal 0.1x)"
        )
    print(f"  baseline: vg.log_rollouts, texts pre-decoded  {base_ms:9.1f} ms   {base_ms / verl_ms:.3f}x")
    print(f"  decoding the k*n = {K * shape.n} kept rows' texts         {ms(times['decode']):9.1f} ms")
    if times["v1_hook"]:
        v1_verl_ms, v1_hook_ms = ms(times["v1_verl"]), ms(times["v1_hook"])
        print("v1 (main_ppo's default), the same rows in a real TransferQueue, per step, median:")
        print(f"  verl v1 _log_rollout_data, as the loop waits  {v1_verl_ms:9.1f} ms   1.000x")
        print(f"  verl v1, until its JSONL write completes      {ms(times['v1_verl_written']):9.1f} ms")
        print(
            f"  otel-valgen send_v1_step                      {v1_hook_ms:9.1f} ms   "
            f"{v1_hook_ms / v1_verl_ms:.3f}x (goal 0.1x)"
        )
        fetched_ms = ms(times["v1_fetched"])
        print(f"  send_v1_step, nothing held (all fetched)      {fetched_ms:9.1f} ms   {fetched_ms / v1_verl_ms:.3f}x")
    else:
        print("v1: not measured (--no-v1, or no verl_rollouts on this branch)")
    for name, wire in wires.items():
        report_wire(name, wire)


def report_wire(name: str, wire: Wire) -> None:
    """One hook's kept records on the wire: the median whole record and ``valgen.tokens``, per token too."""
    if not wire.records:
        return
    record = statistics.median(wire.records)
    print(f"{name} hook, on the wire per kept response (protobuf, uncompressed), median of {len(wire.records)}:")
    if not wire.tokens:
        print(f"  whole record {record / 1024:8.1f} KiB; no valgen.tokens (no per-token data sent)")
        return
    tokens, count = statistics.median(wire.tokens), statistics.median(wire.counts)
    per_token = statistics.median(size / max(n, 1) for size, n in zip(wire.tokens, wire.counts, strict=True))
    full = [size for size, n in zip(wire.tokens, wire.counts, strict=True) if n == max(wire.counts)]
    print(
        f"  whole record {record / 1024:8.1f} KiB, valgen.tokens {tokens / 1024:8.1f} KiB "
        f"({per_token:.1f} B a token) for a median response of {count:.0f} tokens; "
        f"{len(wire.tokens)} of {len(wire.records)} records carry tokens"
    )
    longest = statistics.median(full) / 1024
    print(f"  the longest kept responses ({max(wire.counts)} tokens): valgen.tokens {longest:.1f} KiB")


def main() -> None:
    """Build the batch, time both dumps ``--repeats`` times through the built collector, print medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="where the trained tokenizer is kept")
    parser.add_argument("--no-v1", action="store_true", help="leave out the v1 path (no Ray, no TransferQueue)")
    parser.add_argument("--no-tokens", action="store_true", help="the text-only batch: 2,048-token responses")
    args = parser.parse_args()
    from tests.e2e import harness

    if not harness.COLLECTOR_BIN.is_file():
        sys.exit("build/otelcol-valgen is absent; run `make collector` first")
    shape = TEXT if args.no_tokens else TOKENS
    tokenizer, pool = tokenizer_and_pool(args.cache_dir)
    batch = make_batch(pool, shape, tokenizer)
    lengths = batch.batch["response_mask"].sum(-1)
    extra = {"acc": (batch.batch["token_level_scores"].sum(-1) > 0).float().tolist()}
    print(
        f"machine: {os.cpu_count()} cores, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, "
        f"Python {sys.version.split()[0]}, torch {torch.__version__}; "
        f"tokenizer: byte-level BPE, {len(tokenizer)} tokens, {type(tokenizer).__name__} (fast: {tokenizer.is_fast})"
    )
    fields = ", ".join(TOKEN_FIELDS) if shape.tokens else "none"
    print(
        f"batch: {shape.prompts} prompts x {shape.n} = {shape.rows} rows, prompts {shape.prompt_len} (left-padded), "
        f"responses {shape.response_len} (right-padded); response tokens median {int(lengths.median())}, "
        f"{int((lengths >= shape.response_len).sum())} cut at the limit; per-token fields: {fields}; k = {K} prompts"
    )
    times, summaries, wires = measure(batch, tokenizer, extra, args.repeats, shape, v1=not args.no_v1)
    report(times, summaries, wires, args.repeats, shape)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()

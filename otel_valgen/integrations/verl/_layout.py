"""What otel-valgen relies on in verl's code: class, method and local names, by module.

A verl release that moves things changes this file first; every hook checks what it finds
against it and leaves verl as it is, loudly, when they differ.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Final

TESTED_VERL_VERSIONS: Final = frozenset({"0.9.1"})
"""The verl releases the hooks are tested against (tests/verl)."""

# module -> (class, whether its instances may publish a fully-async trainer's step)
PATCHED_CLASSES: Final = {
    "verl.trainer.ppo.ray_trainer": ("RayPPOTrainer", True),
    "verl.trainer.ppo.v1.trainer_base": ("PPOTrainer", False),
}

HOOKED_METHODS: Final = ("_validate", "_maybe_log_val_generations")
"""The methods of verl's trainer bases that ``install()`` replaces."""

LOG_PARAMETERS: Final = ("self", "inputs", "outputs", "scores")
"""``_maybe_log_val_generations``'s parameters."""


@dataclasses.dataclass(frozen=True)
class ValidateLocals:
    """The names of the per-generation lists verl's ``_validate`` holds when it calls ``_maybe_log_val_generations``.

    The hook reads them from ``_validate``'s frame: verl passes only inputs, outputs and scores,
    while its own ``validation_data_dir`` dump also writes these.
    """

    inputs: str  # the list passed as ``inputs``: how the frame is recognised
    ground_truths: str
    data_sources: str  # one value per generation, or (``data_sources_batched``) one array per batch
    data_sources_batched: bool
    reward_extra_info: str  # {name: one value per generation}; its "reward" column is the score


VALIDATE_LOCALS: Final = {
    "verl.trainer.ppo.ray_trainer": ValidateLocals(
        "sample_inputs", "sample_gts", "data_source_lst", True, "reward_extra_infos_dict"
    ),
    "verl.trainer.ppo.v1.trainer_base": ValidateLocals(
        "sample_inputs", "sample_gts", "data_sources", False, "reward_extra_infos_dict"
    ),
}

REWARD_FUNCTION: Final = "extract_reward"
"""The legacy ``_validate`` calls this module function once per validation batch, with the whole batch."""

V1_STORE: Final = "tq"
"""The v1 ``_validate`` reads each batch's ``prompts`` and ``responses`` through this module's TransferQueue client."""

V1_VALIDATION_PARTITION: Final = "val"


@dataclasses.dataclass(frozen=True)
class RolloutHook:
    """One trainer's rollout hook point: the method called once per training step with its final batch."""

    class_name: str
    method: str
    parameters: tuple[str, ...]
    why: str


ROLLOUT_HOOKS: Final = {
    # RayPPOTrainer.fit calls _log_rollout_data only with rollout_data_dir, and compute_data_metrics is
    # a module function (no trainer, no step). _update_actor is the one method fit calls every step
    # with the final batch (rewards, reward extra columns, advantages); not during critic warmup,
    # when the actor does not train on the batch either.
    "verl.trainer.ppo.ray_trainer": RolloutHook(
        "RayPPOTrainer", "_update_actor", ("self", "batch"), "fit's per-step actor update"
    ),
    # fit's step 5, every step, before step 7 clears the batch from TransferQueue.
    "verl.trainer.ppo.v1.trainer_base": RolloutHook(
        "PPOTrainer",
        "_compute_metrics",
        ("self", "batch", "metrics", "timing_raw", "global_steps", "epoch"),
        "fit's per-step metrics",
    ),
    # fit_step calls it every step, with or without rollout_data_dir (FullyAsyncTrainer inherits it).
    "verl.experimental.separation.ray_trainer": RolloutHook(
        "SeparateRayPPOTrainer", "_fit_dump_data", ("self", "batch"), "fit_step's dump of the step's batch"
    ),
}
"""verl's trainer classes whose method sends each training step's batch as rollouts, by module."""

CORRECTION_MODULE: Final = "verl.trainer.ppo.rollout_corr_helper"
CORRECTION_FUNCTION: Final = "compute_rollout_correction_and_add_to_batch"
CORRECTION_PARAMETERS: Final = ("batch", "rollout_corr_config")
"""The rollout correction (``algorithm.rollout_correction``, decoupled mode) of all three trainers: it
replaces ``batch.batch["response_mask"]`` by the mask with its rejection applied and adds
``rollout_is_weights``; it returns ``(batch, metrics)``. The legacy and separation trainers import it
from this module when they call it."""
CORRECTION_IMPORTERS: Final = {"verl.trainer.ppo.v1.trainer_base": ("_compute_advantage", "batch")}
"""Modules that import the correction by name at import time, so hold their own reference: module ->
(the method that calls it, its TransferQueue batch argument, whose ``keys`` are the rows' in order)."""

V1_TRAINER_MODULE: Final = "verl.trainer.ppo.v1.trainer_base"


@dataclasses.dataclass(frozen=True)
class V1Capture:
    """A module function of the v1 trainer whose result holds a step's rows, kept by key for the v1 rollout hook."""

    parameters: tuple[str, ...]
    keys: str  # the parameter holding the rows' TransferQueue keys, in the result's row order
    fields: tuple[str, ...]  # what is kept of the result (those it has)
    caller: str  # the PPOTrainer method that calls it


V1_CAPTURES: Final = {
    # _compute_advantage of each local step: the DataProto of its rows, padded, after the rollout correction
    # (its response_mask), with the advantages added; rm_scores as fetched.
    "compute_advantage_for_multi_trajectories": V1Capture(
        ("data", "batch_keys", "adv_estimator", "gamma", "lam", "num_repeat", "norm_adv_by_std_in_grpo", "config"),
        "batch_keys",
        (
            "response_mask",
            "rm_scores",
            "advantages",
            "rollout_log_probs",
            "old_log_probs",
            "ref_log_prob",
            "rollout_is_weights",
        ),
        "_compute_advantage",
    ),
    # _compute_metrics' fetch of every row of the step (a TensorDict of nested tensors), just before the hook.
    "get_metric_data_with_optional_routed_experts": V1Capture(
        (
            "keys",
            "partition_id",
            "fields",
            "moe_lb_metrics_interval",
            "global_steps",
            "accumulator",
            "kv_batch_get",
        ),
        "keys",
        ("prompts", "responses", "num_turns"),
        "_compute_metrics",
    ),
}
"""Module functions of ``V1_TRAINER_MODULE`` (imported there by name) whose results the v1 rollout hook reads
instead of fetching the same rows from TransferQueue (``_v1_capture``)."""

AGENT_LOOP_MODULE: Final = "verl.experimental.agent_loop.agent_loop"
AGENT_LOOP_WORKER: Final = "AgentLoopWorker"
"""Every agent loop runs in this class's ``_run_agent_loop`` (one asyncio task per trajectory, holding
``trajectory["validate"]``), which scores it with ``_compute_score(outputs, kwargs)`` before the output
becomes a batch row (``_postprocess``: each ``extra_fields`` key a ``non_tensor_batch`` column; v1:
the row's ``extra_fields`` in TransferQueue)."""
AGENT_LOOP_WORKER_METHODS: Final = {
    "_run_agent_loop": ("self", "sampling_params", "trajectory", "agent_name", "trace", "kwargs"),
    "_compute_score": ("self", "outputs", "kwargs"),
}
TOOL_AGENT_MODULE: Final = "verl.experimental.agent_loop.tool_agent_loop"
TOOL_AGENT_STATE: Final = "AgentData"
"""``ToolAgentLoop``'s per-trajectory state: ``messages`` (``raw_prompt``'s messages, then each parsed
assistant turn with its ``tool_calls`` and each ``tool`` message, appended in order), ``assistant_turns``
and ``response_ids`` (the last generation's tokens)."""
TOOL_AGENT_STATE_FIELDS: Final = ("messages", "assistant_turns", "response_ids")

MESSAGES_COLUMN: Final = "otel_valgen_messages"
"""The ``extra_fields`` key (so a ``non_tensor_batch`` column) of a trajectory's generated messages."""
RAW_PROMPT_COLUMN: Final = "raw_prompt"
"""The prompt's chat messages: ``_agent_loop_postprocess`` copies them into ``extra_fields`` (v1: a field)."""
REWARD_COLUMNS: Final = ("tool_rewards", "turn_scores")
"""Per-trajectory reward lists every agent loop output carries in ``extra_fields`` (so ``non_tensor_batch``
columns; v1: keys of the row's ``extra_fields``): ``ToolAgentLoop`` appends each tool ``execute``'s
reward to ``tool_rewards``; ``turn_scores`` (per-turn scores) stays empty in verl 0.9.1's own loops, an
agent loop of your own may fill it; the single-turn loop sets both to ``[]``."""
NUM_TURNS_COLUMNS: Final = ("__num_turns__", "num_turns")
"""A row's turns (user, assistant and tool; 2 for a single turn): the batch column, v1's TransferQueue field."""

TABLE_MODULE: Final = "verl.utils.tracking"
TABLE_CLASS: Final = "ValidationGenerationsLogger"
"""verl's table writer, which its own ``_maybe_log_val_generations`` calls; hooked ones never do."""


def verl_version() -> str:
    """The installed verl's version, or ``unknown``."""
    try:
        import verl

        return str(verl.__version__)
    except Exception:
        return "unknown"


def untested_note() -> str:
    """`` (verl X is untested; tested: ...)`` when the installed verl is not a tested release, else empty."""
    version = verl_version()
    if version in TESTED_VERL_VERSIONS:
        return ""
    return f" (verl {version} is untested; tested: {', '.join(sorted(TESTED_VERL_VERSIONS))})"


def tested_versions() -> str:
    return ", ".join(sorted(TESTED_VERL_VERSIONS))


def parameter_names(function: Callable[..., Any]) -> tuple[str, ...] | None:
    """The parameter names of ``function``, without the ``_ray_trace_ctx`` that Ray's tracing adds."""
    try:
        return tuple(name for name in inspect.signature(function).parameters if name != "_ray_trace_ctx")
    except (TypeError, ValueError):
        return None

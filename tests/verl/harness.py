"""Drive the REAL, installed verl's validation code paths on CPU (no GPUs, no model, no hub).

Everything verl runs here is verl's own code, unmodified and unpatched: configs come from verl's
yaml through hydra, the fully-async ``FullyAsyncTrainer``/``FullyAsyncRollouter`` Ray actors are
created exactly as ``verl/experimental/fully_async_policy/fully_async_main.py`` creates them, and
validation runs through ``FullyAsyncTrainer._fit_validate`` -> ``FullyAsyncRollouter.do_validate``
-> ``RayPPOTrainer._validate`` -> ``_maybe_log_val_generations`` / ``_dump_generations``.

Only what needs GPUs or model servers is stood in for, from outside, by setting attributes on the
live objects (through Ray's DeveloperAPI ``actor.__ray_call__`` for actors). Every such replacement
is listed in ``REPLACED`` with the reason, and each replacement site looks its entry up there.

Observation uses verl's own outputs only: ``trainer.validation_data_dir`` (verl writes
``{global_steps}.jsonl`` with every generation) and the trainer's real ``Tracking`` with the
``console`` and ``file`` backends (``VERL_FILE_LOGGER_PATH``: one JSON line per ``logger.log``).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import transformers
    from omegaconf import DictConfig
    from verl import DataProto

REPO = Path(__file__).resolve().parents[2]

DATA_SOURCE = "openai/gsm8k"  # verl's default_compute_score grades it with its gsm8k rule ("#### <answer>")
SPECIAL_TOKENS = ("<|pad|>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

# (qualified method or attribute name, why it is replaced). Nothing else is replaced or patched.
REPLACED: list[tuple[str, str]] = [
    (
        "fully_async_main (FullyAsyncTaskRunner, run_ppo, its import order)",
        "not used: verl 0.9.1's launcher cannot get past FullyAsyncTrainer.init_workers on CPU "
        "(ResourcePoolManager.create_resource_pool asks for GPU bundles, verl's platform falls back to "
        "'nvidia', no vLLM/SGLang). create_fully_async makes its calls in this driver instead, after "
        "ray.init, so the import-order case is tested separately (test_import_order_and_drift.py).",
    ),
    (
        "FullyAsyncTrainer.init_workers",
        "creates placement groups on trainer_pool GPUs and FSDP/Megatron DetachActorWorker worker groups that "
        "load the model; not called. Only its result attribute actor_wg/actor_rollout_wg is set (next entry).",
    ),
    (
        "FullyAsyncTrainer.actor_wg, FullyAsyncTrainer.actor_rollout_wg",
        "the GPU actor worker group. Set to CpuActorWorkerGroup: verl's set_rollouter builds the real "
        "CheckpointEngineManager around it, load_checkpoint calls its load_checkpoint, and _fit_update_weights "
        "(naive backend) calls its update_weights; all are recorded no-ops.",
    ),
    (
        "FullyAsyncRollouter.init_workers",
        "starts the RewardLoopManager workers, vLLM/SGLang LLM server replicas and agent-loop workers; not "
        "called. Its CPU-only steps are run as verl runs them (_init_async_objects, SkipManager.init) and the "
        "two attributes below are set.",
    ),
    (
        "FullyAsyncRollouter.llm_server_manager",
        "FullyAsyncLLMServerManager owns the GPU server replicas. Set to CpuLLMServerManager (one replica, "
        "no handles) so verl's set_max_required_samples, get_replicas and the trainer's checkpoint managers work.",
    ),
    (
        "FullyAsyncRollouter.async_rollout_manager",
        "FullyAsyncAgentLoopManager generates with an LLM server and scores with reward-loop workers. Set to "
        "CpuRolloutManager, whose generate_sequences(DataProto) -> DataProto returns deterministic responses "
        "and verl's own gsm8k score (default_compute_score) in the tensors _validate and extract_reward read.",
    ),
    (
        "RayPPOTrainer.init_workers",
        "creates the GPU ActorRolloutRefWorker worker group, LLM servers, reward loop and checkpoint engine; "
        "not called. Only async_rollout_manager is set (next entry): the sync _validate reads nothing else.",
    ),
    (
        "RayPPOTrainer.async_rollout_manager",
        "AgentLoopManager on GPU LLM servers; set to CpuRolloutManager (same as the fully-async one).",
    ),
    (
        "PPOTrainer (v1)._validate",
        "cannot run on CPU without re-implementing verl's agent loop: it needs init()'s GPU worker groups and "
        "LLM servers, and an agent_loop_manager that writes prompts/responses/rm_scores/num_turns/extra_fields "
        "with status tags into TransferQueue for ReplayBuffer.sample. run_v1_log_val_generations calls its real "
        "_maybe_log_val_generations exactly as its _validate does, on an instance built by the real constructor.",
    ),
]
_WHY = dict(REPLACED)


def replaced(name: str) -> str:
    """The reason ``name`` is replaced; raises KeyError if a replacement is not listed in ``REPLACED``."""
    return _WHY[name]


# ---------------------------------------------------------------------------------------------------------------------
# Tokenizer and data
# ---------------------------------------------------------------------------------------------------------------------


def make_tokenizer(directory: str | os.PathLike[str]) -> transformers.PreTrainedTokenizerFast:
    """A tiny lossless byte-level tokenizer (256 byte tokens, no merges) with pad/eos and a chat template.

    Saved with ``save_pretrained`` into ``directory`` and loaded back from there, so the directory can be
    used as ``actor_rollout_ref.model.path`` for verl's ``hf_tokenizer``. RLHFDataset only needs the chat
    template when ``data.filter_overlong_prompts`` is on; verl's AgentLoop always applies it, and so does
    ``CpuRolloutManager``. Decoding with ``skip_special_tokens=True`` gives back the message text exactly.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *alphabet])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<|pad|>",
        eos_token="<|endoftext|>",
        additional_special_tokens=list(SPECIAL_TOKENS[2:]),
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(path))
    return PreTrainedTokenizerFast.from_pretrained(str(path))


def question(index: int) -> str:
    """The prompt text of dataset row ``index``."""
    return f"question {index}: what is {index}+{index}?"


def make_dataset(directory: str | os.PathLike[str], n_prompts: int) -> tuple[str, str]:
    """Train and validation parquet files in the layout verl's RLHFDataset reads (as its gsm8k preprocessing).

    Each row: ``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model.ground_truth``,
    ``extra_info`` (split, index, question, answer). Validation rows are "question i: what is i+i?" for
    i in 0..n_prompts-1; train rows use i in 1000.. so no train text equals a validation text.
    Returns ``(train_path, val_path)``.
    """
    import pandas as pd

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)

    def rows(split: str, start: int, count: int) -> list[dict[str, Any]]:
        return [
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": question(i)}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
                "extra_info": {"split": split, "index": i, "question": question(i), "answer": str(2 * i)},
            }
            for i in range(start, start + count)
        ]

    train_path, val_path = path / "train.parquet", path / "val.parquet"
    pd.DataFrame(rows("train", 1000, max(n_prompts, 4))).to_parquet(train_path)
    pd.DataFrame(rows("test", 0, n_prompts)).to_parquet(val_path)
    return str(train_path), str(val_path)


# ---------------------------------------------------------------------------------------------------------------------
# Configs (verl's own yaml, composed with hydra)
# ---------------------------------------------------------------------------------------------------------------------


def _verl_dir() -> Path:
    import verl

    return Path(verl.__file__).resolve().parent


def _compose(config_dir: Path, config_name: str, overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=overrides)


def _common_overrides(
    tmp: Path, train_path: str, val_path: str, model_path: str, log_val_generations: int, val_n: int
) -> list[str]:
    return [
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        "trainer.logger=[console,file]",
        f"trainer.log_val_generations={log_val_generations}",
        "trainer.test_freq=1",
        "trainer.val_before_train=True",
        "trainer.total_epochs=1",
        "trainer.project_name=otel-valgen",
        "trainer.experiment_name=cpu-harness",
        f"trainer.validation_data_dir={tmp / 'validation_data'}",
        f"trainer.default_local_dir={tmp / 'checkpoints'}",
        "trainer.resume_mode=auto",
        f"data.train_files={train_path}",
        f"data.val_files={val_path}",
        "data.max_prompt_length=64",
        "data.max_response_length=32",
        "data.dataloader_num_workers=0",
        "data.filter_overlong_prompts=False",
        "data.validation_shuffle=False",
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.rollout.val_kwargs.n={val_n}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.prompt_length=64",
        "actor_rollout_ref.rollout.response_length=32",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "algorithm.adv_estimator=grpo",  # no critic: load_checkpoint and need_critic touch only the actor
    ]


def sync_config(
    tmp: str | os.PathLike[str],
    *,
    train_path: str,
    val_path: str,
    model_path: str,
    log_val_generations: int = 4,
    val_n: int = 2,
    use_v1: bool = False,
    extra_overrides: list[str] | None = None,
) -> DictConfig:
    """``verl/trainer/config/ppo_trainer.yaml`` composed with CPU/tiny overrides, prepared as ``main_ppo.main`` does.

    ``main_ppo.main``'s steps: ``auto_set_device``, ``validate_config`` (passes), and the reward-config
    migration that ``run_ppo``'s callers apply.

    ``use_v1`` picks the trainer ``main_ppo.main`` would run (False: legacy ``RayPPOTrainer``; True: v1).
    ``extra_overrides`` are hydra override strings applied last.
    """
    from verl.experimental.reward_loop import migrate_legacy_reward_impl
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    overrides = [
        *_common_overrides(Path(tmp), train_path, val_path, model_path, log_val_generations, val_n),
        f"trainer.use_v1={use_v1}",
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.agent.num_workers=2",
        *(extra_overrides or []),
    ]
    config = _compose(_verl_dir() / "trainer" / "config", "ppo_trainer", overrides)
    auto_set_device(config)  # as main_ppo.main; keeps "cpu" on a machine without accelerators
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return migrate_legacy_reward_impl(config)


def fully_async_config(
    tmp: str | os.PathLike[str],
    *,
    train_path: str,
    val_path: str,
    model_path: str,
    log_val_generations: int = 4,
    val_n: int = 2,
    trigger_parameter_sync_step: int = 1,
    require_batches: int = 1,
    staleness_threshold: float = 0.5,
    extra_overrides: list[str] | None = None,
) -> DictConfig:
    """``fully_async_ppo_trainer.yaml`` composed with CPU/tiny overrides, prepared as ``fully_async_main.main`` does.

    Overrides the constructors need: ``data.train_batch_size=0``, ``data.gen_batch_size=1``,
    ``actor_rollout_ref.hybrid_engine=False``. ``checkpoint_engine.backend=naive`` because verl's nccl
    backend needs cupy (GPU) and is not even registered on CPU, so ``set_rollouter`` could not build its
    ``CheckpointEngineManager``. With ``trigger_parameter_sync_step=1`` every ``_fit_update_local_step``
    advances ``current_param_version`` by one.
    """
    from verl.experimental.reward_loop import migrate_legacy_reward_impl
    from verl.utils.device import auto_set_device

    overrides = [
        *_common_overrides(Path(tmp), train_path, val_path, model_path, log_val_generations, val_n),
        "data.train_batch_size=0",
        "data.gen_batch_size=1",
        "actor_rollout_ref.hybrid_engine=False",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=naive",
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=1",
        "rollout.n=2",
        f"async_training.trigger_parameter_sync_step={trigger_parameter_sync_step}",
        f"async_training.require_batches={require_batches}",
        f"async_training.staleness_threshold={staleness_threshold}",
        "async_training.use_trainer_do_validate=False",
        *(extra_overrides or []),
    ]
    config_dir = _verl_dir() / "experimental" / "fully_async_policy" / "config"
    config = _compose(config_dir, "fully_async_ppo_trainer", overrides)
    # exactly fully_async_main.main's preparation
    auto_set_device(config)
    config.actor_rollout_ref.rollout.nnodes = config.rollout.nnodes
    config.actor_rollout_ref.rollout.n_gpus_per_node = config.rollout.n_gpus_per_node
    return migrate_legacy_reward_impl(config)


# ---------------------------------------------------------------------------------------------------------------------
# CPU stand-ins (see REPLACED)
# ---------------------------------------------------------------------------------------------------------------------


def response_text(index: int, ground_truth: str, draft: int, global_steps: Any) -> str:
    """The deterministic response for prompt ``index``'s ``draft``-th repeat; correct when index+draft is even."""
    answer = ground_truth if (index + draft) % 2 == 0 else str(int(ground_truth) + 1)
    return f"draft {draft} of {index} at step {global_steps}: #### {answer}"


class CpuRolloutManager:
    """CPU stand-in for verl's AgentLoopManager: ``REPLACED['...async_rollout_manager']``.

    ``generate_sequences`` returns what ``AgentLoopManager.generate_sequences`` returns after
    ``AgentLoopWorker._postprocess`` with streaming rewards: ``prompts`` (left-padded), ``responses``,
    ``response_mask``, ``input_ids``, ``attention_mask``, ``position_ids``, ``rm_scores`` (the score on the
    last response token), non-tensor ``__num_turns__`` and the reward extra info ``acc`` (as verl's naive
    reward manager adds), and ``meta_info`` ``{"timing": {}, "reward_extra_keys": ["acc"]}``.
    Scores are verl's own ``default_compute_score(data_source, response, ground_truth)``.
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.calls: list[dict[str, Any]] = []

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Deterministic responses and scores for every row of ``prompts`` (the k-th repeat of a uid is draft k)."""
        import numpy as np
        import torch
        from verl import DataProto
        from verl.utils.reward_score import default_compute_score

        tokenizer = self.tokenizer
        non_tensor = prompts.non_tensor_batch
        size = len(prompts)
        global_steps = prompts.meta_info.get("global_steps")
        seen: Counter[str] = Counter()
        prompt_ids, response_ids, scores = [], [], []
        for row in range(size):
            uid = str(non_tensor["uid"][row])
            draft = seen[uid]
            seen[uid] += 1
            text = tokenizer.apply_chat_template(
                list(non_tensor["raw_prompt"][row]), add_generation_prompt=True, tokenize=False
            )
            prompt_ids.append(tokenizer.encode(text, add_special_tokens=False))
            ground_truth = str(non_tensor["reward_model"][row]["ground_truth"])
            index = int(non_tensor["extra_info"][row]["index"])
            response = response_text(index, ground_truth, draft, global_steps)
            response_ids.append([*tokenizer.encode(response, add_special_tokens=False), tokenizer.eos_token_id])
            scores.append(float(default_compute_score(str(non_tensor["data_source"][row]), response, ground_truth)))

        pad = tokenizer.pad_token_id
        prompt_width = max(len(ids) for ids in prompt_ids)
        response_width = max(len(ids) for ids in response_ids)
        prompt_tensor = torch.full((size, prompt_width), pad, dtype=torch.int64)
        prompt_mask = torch.zeros((size, prompt_width), dtype=torch.int64)
        response_tensor = torch.full((size, response_width), pad, dtype=torch.int64)
        response_mask = torch.zeros((size, response_width), dtype=torch.int64)
        rm_scores = torch.zeros((size, response_width), dtype=torch.float32)
        for row, (p_ids, r_ids) in enumerate(zip(prompt_ids, response_ids, strict=True)):
            prompt_tensor[row, prompt_width - len(p_ids) :] = torch.tensor(p_ids)
            prompt_mask[row, prompt_width - len(p_ids) :] = 1
            response_tensor[row, : len(r_ids)] = torch.tensor(r_ids)
            response_mask[row, : len(r_ids)] = 1
            rm_scores[row, len(r_ids) - 1] = scores[row]
        attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
        position_ids = (torch.cumsum(attention_mask, dim=1) - 1).clamp(min=0)
        self.calls.append({"size": size, "global_steps": global_steps, "validate": prompts.meta_info.get("validate")})
        return DataProto.from_dict(
            tensors={
                "prompts": prompt_tensor,
                "responses": response_tensor,
                "response_mask": response_mask,
                "input_ids": torch.cat([prompt_tensor, response_tensor], dim=1),
                "attention_mask": attention_mask,
                "position_ids": position_ids,
                "rm_scores": rm_scores,
            },
            non_tensors={
                "__num_turns__": np.full(size, 2, dtype=np.int32),
                "acc": np.array(scores, dtype=np.float64),
            },
            meta_info={"timing": {}, "reward_extra_keys": ["acc"]},
        )


class CpuLLMServerManager:
    """CPU stand-in for FullyAsyncLLMServerManager: ``REPLACED['FullyAsyncRollouter.llm_server_manager']``.

    One notional replica with no Ray handles: the trainer's checkpoint managers get an empty replica list.
    """

    def __init__(self) -> None:
        self.hybrid_replicas: dict[str, Any] = {}

    def get_replicas(self) -> list[Any]:
        """No replica handles (nothing to sleep, abort or sync)."""
        return []

    def get_standalone_replicas(self) -> list[Any]:
        """No replica handles."""
        return []

    def get_active_server_count(self) -> int:
        """One server, so verl's ``max_concurrent_samples`` is ``concurrent_samples_per_replica``."""
        return 1

    def get_hybrid_statistics(self) -> dict[str, Any]:
        """No hybrid replicas."""
        return {}

    def get_hybrid_replicas_info(self) -> list[dict[str, Any]]:
        """No hybrid replicas."""
        return []


class CpuActorWorkerGroup:
    """CPU stand-in for the trainer's actor worker group: ``REPLACED['FullyAsyncTrainer.actor_wg, ...']``.

    Records the calls verl's CPU-reachable trainer code makes on it; returns what ``ray.get`` accepts.
    """

    world_size = 1

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        """Called by ``FullyAsyncTrainer.load_checkpoint`` when a ``global_step_N`` folder is found."""
        self.calls.append(("load_checkpoint", {"local_path": local_path}))

    def update_weights(self, global_steps: int | None = None, mode: str | None = None) -> list[Any]:
        """Called by ``CheckpointEngineManager.update_weights`` (naive backend); ``ray.get([])`` is ``[]``."""
        self.calls.append(("update_weights", {"global_steps": global_steps, "mode": mode}))
        return []


# ---------------------------------------------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------------------------------------------


def start_ray(metrics_log: str | os.PathLike[str], num_cpus: int = 32) -> None:
    """A small local Ray cluster for the verl actors (each asks for 10 logical CPUs; no GPUs).

    The runtime env is verl's own ``get_ppo_ray_runtime_env`` plus ``PYTHONPATH`` (so workers import
    ``tests.verl.harness`` for the stand-ins) and ``VERL_FILE_LOGGER_PATH`` (verl's ``file`` Tracking
    backend writes every ``logger.log(data, step)`` of the trainer there).
    """
    import ray
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    runtime_env = get_ppo_ray_runtime_env()
    runtime_env.pop("working_dir", None)
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    runtime_env["env_vars"] = {
        **runtime_env.get("env_vars", {}),
        "PYTHONPATH": pythonpath,
        "VERL_FILE_LOGGER_PATH": str(metrics_log),
    }
    ray.init(
        num_cpus=num_cpus,
        num_gpus=0,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        runtime_env=runtime_env,
        logging_level="WARNING",
    )


# ---------------------------------------------------------------------------------------------------------------------
# Fully async
# ---------------------------------------------------------------------------------------------------------------------


def _rollouter_cpu_init_workers(rollouter: Any) -> str:
    """Run inside the rollouter: the CPU part of ``FullyAsyncRollouter.init_workers`` plus the two stand-ins."""
    from verl.utils.skip import SkipManager

    rollouter._init_async_objects()
    replaced("FullyAsyncRollouter.llm_server_manager")
    rollouter.llm_server_manager = CpuLLMServerManager()
    rollouter.async_rollout_mode = True
    rollouter.async_rollout_manager = CpuRolloutManager(rollouter.tokenizer)
    SkipManager.init(rollouter.config)
    return replaced("FullyAsyncRollouter.async_rollout_manager")


def _trainer_cpu_init_workers(trainer: Any) -> str:
    """Run inside the trainer: what ``FullyAsyncTrainer.init_workers`` leaves behind that CPU code reads."""
    trainer.actor_wg = CpuActorWorkerGroup()
    trainer.actor_rollout_wg = trainer.actor_wg
    return replaced("FullyAsyncTrainer.actor_wg, FullyAsyncTrainer.actor_rollout_wg")


@dataclass
class FullyAsync:
    """The live fully-async components, as ``FullyAsyncTaskRunner.components`` holds them."""

    config: Any
    trainer: Any
    rollouter: Any
    message_queue: Any
    message_queue_client: Any
    total_train_steps: int | None
    max_queue_size: int | None
    replaced: list[tuple[str, str]] = field(default_factory=lambda: list(REPLACED))


def create_fully_async(config: DictConfig, tokenizer: Any, *, update_weights: bool = True) -> FullyAsync:
    """Create the real FullyAsyncTrainer and FullyAsyncRollouter as ``FullyAsyncTaskRunner`` does, on CPU.

    Follows ``_initialize_components``/``_create_trainer``/``_create_rollouter`` call for call, except the two
    ``init_workers`` (see ``REPLACED``): create_role_worker_mapping, FullyAsyncTrainer.remote(...),
    FullyAsyncRollouter.remote(...), set_max_required_samples, set_rollouter, get/set_total_train_steps,
    MessageQueue, set_message_queue_client on both, load_checkpoint on both and, if ``update_weights``,
    the "param sync before fit" ``_fit_update_weights``. It does not run ``_fit_validate(True)``: call
    ``run_fit_validate(trainer, True)`` for that. Needs ``start_ray`` first.
    """
    import ray
    from omegaconf import OmegaConf
    from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter
    from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
    from verl.experimental.fully_async_policy.message_queue import MessageQueue, MessageQueueClient
    from verl.experimental.separation.utils import create_resource_pool_manager, create_role_worker_mapping
    from verl.trainer.ppo.utils import Role

    OmegaConf.resolve(config)
    role_worker_mapping, ray_worker_group_cls = create_role_worker_mapping(config)

    # _create_trainer
    trainer_role_mapping = {role: cls for role, cls in role_worker_mapping.items() if role != Role.Rollout}
    trainer = FullyAsyncTrainer.remote(
        config=config,
        tokenizer=tokenizer,
        role_worker_mapping=trainer_role_mapping,
        resource_pool_manager=create_resource_pool_manager(config, roles=list(trainer_role_mapping.keys())),
        ray_worker_group_cls=ray_worker_group_cls,
        device_name=config.trainer.device,
    )
    replaced("FullyAsyncTrainer.init_workers")
    ray.get(trainer.__ray_call__.remote(_trainer_cpu_init_workers))

    # _setup_hybrid_worker_group: nothing to do (use_trainer_do_validate and dynamic scheduling are off)

    # _create_rollouter
    rollouter = FullyAsyncRollouter.remote(
        config=config, tokenizer=tokenizer, processor=None, device_name=config.trainer.device
    )
    replaced("FullyAsyncRollouter.init_workers")
    ray.get(rollouter.__ray_call__.remote(_rollouter_cpu_init_workers))
    ray.get(rollouter.set_max_required_samples.remote())

    ray.get(trainer.set_rollouter.remote(rollouter))
    total_train_steps = ray.get(rollouter.get_total_train_steps.remote())
    ray.get(trainer.set_total_train_steps.remote(total_train_steps))
    max_queue_size = ray.get(rollouter.get_max_queue_size.remote())
    message_queue = MessageQueue.remote(config, max_queue_size)
    message_queue_client = MessageQueueClient(message_queue)
    ray.get(rollouter.set_message_queue_client.remote(message_queue_client))
    ray.get(trainer.set_message_queue_client.remote(message_queue_client))
    ray.get(trainer.load_checkpoint.remote())
    ray.get(rollouter.load_checkpoint.remote())
    if update_weights:
        ray.get(trainer._fit_update_weights.remote())
    return FullyAsync(
        config, trainer, rollouter, message_queue, message_queue_client, total_train_steps, max_queue_size
    )


def _read_state(actor: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(actor, name, None) for name in names}


def actor_state(actor: Any, *names: str) -> dict[str, Any]:
    """Read attributes of a live actor (read only), e.g. ``current_param_version``, ``global_steps``."""
    import ray

    return ray.get(actor.__ray_call__.remote(_read_state, names))


def _wait_for_dumps(actor: Any) -> int:
    pending = list(getattr(actor, "_dump_futures", []))
    for future in pending:
        future.result()
    return len(pending)


def _generator_calls(actor: Any) -> list[dict[str, Any]]:
    manager = getattr(actor, "async_rollout_manager", None)
    return list(getattr(manager, "calls", []))


def generator_calls(rollouter: Any) -> list[dict[str, Any]]:
    """The ``generate_sequences`` calls the rollouter's CpuRolloutManager received (size, global_steps, validate)."""
    import ray

    return ray.get(rollouter.__ray_call__.remote(_generator_calls))


@dataclass
class ValidationRun:
    """What one ``_fit_validate`` produced, read from verl's own outputs."""

    seconds: float
    trainer_param_version: int
    rollouter_global_steps: int
    dumps: dict[str, list[dict[str, Any]]]  # {file name: rows} written by verl's _dump_generations during the run
    logged: list[dict[str, Any]]  # {"step", "data"} lines verl's file Tracking backend appended during the run


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (empty if it does not exist)."""
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


def run_fit_validate(
    trainer: Any, val_before_train: bool, *, rollouter: Any = None, metrics_log: str | os.PathLike[str] | None = None
) -> ValidationRun | None:
    """``ray.get(trainer._fit_validate.remote(val_before_train))``, exactly as verl's TaskRunner and fit_step call it.

    With ``rollouter`` and ``metrics_log`` (the ``start_ray`` path) it waits for verl's background dump of the
    generations and returns what verl wrote during this call; otherwise returns None.
    """
    import ray

    validation_dir = None
    if rollouter is not None:
        config = ray.get(trainer.__ray_call__.remote(lambda actor: actor.config))
        validation_dir = Path(config.trainer.validation_data_dir)
    log_lines = len(read_jsonl(metrics_log)) if metrics_log else 0
    before = {p.name: p.stat().st_mtime_ns for p in validation_dir.glob("*.jsonl")} if validation_dir else {}
    start = time.monotonic()
    ray.get(trainer._fit_validate.remote(val_before_train))
    if rollouter is None or metrics_log is None or validation_dir is None:
        return None
    ray.get(rollouter.__ray_call__.remote(_wait_for_dumps))
    seconds = time.monotonic() - start
    dumps = {
        p.name: read_jsonl(p)
        for p in sorted(validation_dir.glob("*.jsonl"))
        if before.get(p.name) != p.stat().st_mtime_ns
    }
    state = actor_state(trainer, "current_param_version")
    rollouter_state = actor_state(rollouter, "global_steps")
    return ValidationRun(
        seconds=seconds,
        trainer_param_version=state["current_param_version"],
        rollouter_global_steps=rollouter_state["global_steps"],
        dumps=dumps,
        logged=read_jsonl(metrics_log)[log_lines:],
    )


def advance_param_version(trainer: Any, *, update_weights: bool = True) -> int:
    """One trainer step's version bookkeeping by verl's own ``_fit_update_local_step`` and ``_fit_update_weights``.

    This is what ``FullyAsyncTrainer.fit_step`` runs right before ``_fit_validate()``. With
    ``trigger_parameter_sync_step=1`` it increments ``current_param_version``; ``_fit_update_weights`` then
    runs the real naive CheckpointEngineManager sync (on CpuActorWorkerGroup), the rollouter's real
    ``reset_staleness`` and logs its timing at the new version. The rollouter's ``global_steps`` does not
    change (in a real run it counts fed samples). Returns the new ``current_param_version``.
    """
    import ray

    ray.get(trainer._fit_update_local_step.remote())
    if update_weights:
        ray.get(trainer._fit_update_weights.remote())
    return actor_state(trainer, "current_param_version")["current_param_version"]


def write_checkpoint_marker(config: DictConfig, param_version: int) -> Path:
    """An empty ``global_step_N`` folder plus verl's tracker file under ``trainer.default_local_dir``.

    With ``resume_mode=auto``, verl's ``load_checkpoint`` on the trainer then sets ``current_param_version=N``
    and ``global_steps=N*trigger_parameter_sync_step+1`` (the actor weights go to CpuActorWorkerGroup),
    and on the rollouter ``global_steps=N*required_samples*trigger_parameter_sync_step+1`` (no ``data.pt``:
    verl warns and keeps the dataloader). Call before ``create_fully_async`` or call ``load_checkpoint``
    on both actors again, as ``resume_at_param_version`` does.
    """
    from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename

    root = Path(config.trainer.default_local_dir)
    (root / f"global_step_{param_version}").mkdir(parents=True, exist_ok=True)
    Path(get_checkpoint_tracker_filename(str(root))).write_text(str(param_version))
    return root / f"global_step_{param_version}"


def resume_at_param_version(components: FullyAsync, param_version: int) -> dict[str, Any]:
    """Set both actors' versions by verl's own resume code: a checkpoint marker, then ``load_checkpoint`` on both."""
    import ray

    write_checkpoint_marker(components.config, param_version)
    ray.get(components.trainer.load_checkpoint.remote())
    ray.get(components.rollouter.load_checkpoint.remote())
    return {
        **actor_state(components.trainer, "current_param_version", "global_steps"),
        "rollouter_global_steps": actor_state(components.rollouter, "global_steps")["global_steps"],
    }


# ---------------------------------------------------------------------------------------------------------------------
# Sync (legacy RayPPOTrainer and v1 PPOTrainerSync)
# ---------------------------------------------------------------------------------------------------------------------


def make_sync_trainer(config: DictConfig, tokenizer: Any) -> Any:
    """A real ``RayPPOTrainer`` built as ``main_ppo_v0.TaskRunner.run`` builds it, without ``init_workers``.

    Role mapping and resource pool manager come from verl's own ``BaseTaskRunner`` methods; datasets from
    ``create_rl_dataset``/``create_rl_sampler``. Then, as ``fit`` does before validating, ``global_steps=0``
    and the real ``_load_checkpoint``; ``async_rollout_manager`` is the CPU stand-in (see ``REPLACED``).
    Runs in this process (verl runs it inside the TaskRunner actor); needs no Ray.
    """
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    OmegaConf.resolve(config)
    runner = BaseTaskRunner()
    _, ray_worker_group_cls = runner.add_actor_rollout_worker(config)
    runner.add_reward_model_resource_pool(config)
    runner.add_teacher_model_resource_pool(config)
    resource_pool_manager = runner.init_resource_pool_mgr(config)
    train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None, is_train=True)
    val_dataset = create_rl_dataset(config.data.val_files, config.data, tokenizer, None, is_train=False)
    trainer = RayPPOTrainer(
        config=config,
        tokenizer=tokenizer,
        processor=None,
        role_worker_mapping=runner.role_worker_mapping,
        resource_pool_manager=resource_pool_manager,
        ray_worker_group_cls=ray_worker_group_cls,
        train_dataset=train_dataset,
        val_dataset=val_dataset,
        collate_fn=collate_fn,
        train_sampler=create_rl_sampler(config.data, train_dataset),
    )
    trainer.global_steps = 0  # as RayPPOTrainer.fit, before _load_checkpoint and the first _validate
    replaced("RayPPOTrainer.init_workers")  # never called; _load_checkpoint only touches workers on resume
    trainer._load_checkpoint()
    replaced("RayPPOTrainer.async_rollout_manager")
    trainer.async_rollout_manager = CpuRolloutManager(tokenizer)
    return trainer


def run_validate(trainer: Any) -> dict[str, Any]:
    """The real ``trainer._validate()``; waits for verl's background dump (``validation_data_dir``) to be written."""
    metrics = trainer._validate()
    for future in list(trainer._dump_futures):
        future.result()
    return metrics


def make_v1_trainer(config: DictConfig, tokenizer: Any) -> Any:
    """A real v1 ``PPOTrainerSync`` from its real constructor, plus what ``fit`` sets before ``_validate``.

    ``PPOTrainer.__init__(config)`` runs as is (replay buffer, checkpoint callback). ``init()`` is not
    called (GPU worker groups, LLM servers, TransferQueue; see ``REPLACED``). Set like ``fit`` and ``_setup``
    set them: ``validation_generations_logger`` (verl's ValidationGenerationsLogger), ``tokenizer``,
    ``global_steps=0`` and the dump executor (``_init_dump_executor``).
    """
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.tracking import ValidationGenerationsLogger

    trainer = get_trainer_cls(config.trainer.v1.trainer_mode)(config=config)
    trainer.tokenizer = tokenizer
    trainer.global_steps = 0
    trainer._init_dump_executor()
    trainer.validation_generations_logger = ValidationGenerationsLogger(
        project_name=config.trainer.project_name, experiment_name=config.trainer.experiment_name
    )
    return trainer


def run_v1_log_val_generations(trainer: Any, inputs: list[str], outputs: list[str], scores: list[float]) -> None:
    """``trainer._maybe_log_val_generations(inputs=..., outputs=..., scores=...)`` as v1 ``_validate`` calls it.

    ``_validate`` itself cannot run on CPU: ``REPLACED['PPOTrainer (v1)._validate']``.
    """
    replaced("PPOTrainer (v1)._validate")
    trainer._maybe_log_val_generations(inputs=inputs, outputs=outputs, scores=scores)

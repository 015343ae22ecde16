"""Drive the REAL, installed verl's validation code paths on CPU (no GPUs, no model, no hub).

Everything verl runs here is verl's own code: configs come from verl's yaml through hydra, and
validation runs through verl's own ``_validate`` -> ``_maybe_log_val_generations`` /
``_dump_generations``. Fully-async mode runs through verl's real launcher (``launcher.py``), its
TaskRunner and both actors' ``fit``; sync mode through a real ``RayPPOTrainer`` built here.

Only what needs GPUs or model servers is stood in for: in fully-async mode the two actors'
``init_workers`` and, under ``main_ppo``'s real entry point, the legacy ``RayPPOTrainer.init_workers``
and the v1 ``PPOTrainer._setup``, replaced by the test-only verl plugin ``cpu_plugin.py`` with the
functions below; in the in-process sync tests attributes set on the live trainer. Every such
replacement is listed in ``REPLACED`` with the reason, and each replacement site looks its entry up there.

Observation uses verl's own outputs only: ``trainer.validation_data_dir`` (verl writes
``{global_steps}.jsonl`` with every generation) and the trainer's real ``Tracking`` backends.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import transformers
    from omegaconf import DictConfig
    from verl import DataProto

    from tests.e2e.harness import Collector

REPO = Path(__file__).resolve().parents[2]

RESPONSE_LIMIT = 32  # rollout.response_length and data.max_response_length: responses are cut at 32 tokens
DATA_SOURCE = "openai/gsm8k"  # verl's default_compute_score grades it with its gsm8k rule ("#### <answer>")
GRPO_CORRECTED: dict[str, Any] = {
    "adv_estimator": "grpo",
    "gamma": 1.0,
    "lam": 1.0,
    "norm_adv_by_std_in_grpo": True,
    "use_kl_in_reward": False,
    "rollout_correction": {"rollout_is": "token", "rollout_is_threshold": 2.0, "bypass_mode": False},
}
"""A v1 trainer's ``algorithm``: GRPO with the rollout correction's per-token weights (decoupled mode)."""
SPECIAL_TOKENS = ("<|pad|>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

# (qualified method or attribute name, why it is replaced). Nothing else is replaced or patched.
REPLACED: list[tuple[str, str]] = [
    (
        "FullyAsyncTrainer.init_workers",
        "creates placement groups on trainer_pool GPUs (ResourcePoolManager.create_resource_pool fails with no "
        "GPU) and FSDP/Megatron worker groups that load the model (NCCL needs a CUDA device). cpu_plugin.py "
        "replaces it, in every process, by trainer_cpu_init_workers: it sets only its result actor_wg/"
        "actor_rollout_wg (next entry). Called by verl's own launcher, which is not replaced.",
    ),
    (
        "FullyAsyncTrainer.actor_wg, FullyAsyncTrainer.actor_rollout_wg",
        "the GPU actor worker group. Set to CpuActorWorkerGroup: verl's set_rollouter builds the real "
        "CheckpointEngineManager around it, _fit_update_weights (naive backend) calls its update_weights, "
        "_balance_batch its _query_dispatch_info (one data-parallel rank) and _update_actor its update_actor "
        "(no update; metrics only). Calls are recorded. In fully-async mode's default bypass mode old "
        "log-probs are not recomputed (it trains with the rollout's); with algorithm.rollout_correction."
        "bypass_mode=False verl's _compute_old_log_prob calls its compute_log_prob (zero log-probs, as "
        "RayPPOTrainer.actor_rollout_wg's) and save_model_to_cpu (nothing kept).",
    ),
    (
        "FullyAsyncRollouter.init_workers",
        "starts the RewardLoopManager workers, vLLM/SGLang LLM server replicas and agent-loop workers. "
        "cpu_plugin.py replaces it, in every process, by rollouter_cpu_init_workers: its CPU-only steps run as "
        "verl runs them (_init_async_objects, SkipManager.init) and the two attributes below are set; with "
        "multi-turn on, verl's own _create_reward_loop_manager runs too (real rule-based reward workers).",
    ),
    (
        "FullyAsyncRollouter.llm_server_manager",
        "FullyAsyncLLMServerManager owns the GPU server replicas. Set to CpuLLMServerManager (one replica, "
        "no handles) so verl's set_max_required_samples, get_replicas and the trainer's checkpoint managers work.",
    ),
    (
        "FullyAsyncRollouter.async_rollout_manager",
        "FullyAsyncAgentLoopManager generates with an LLM server and scores with reward-loop workers. Set to "
        "CpuRolloutManager: generate_sequences (validation) and generate_sequences_single (the rollouter's fit) "
        "return deterministic responses, verl's own gsm8k score (default_compute_score) and, for training "
        "samples, zero rollout log-probs, in the fields verl's _validate, extract_reward and the trainer read. "
        "With actor_rollout_ref.rollout.multi_turn.enable=True (real_agent_loop) it is verl's real "
        "FullyAsyncAgentLoopManager with its AgentLoopWorker actors (the configured agent loop, tools and "
        "parser) and the real reward-loop workers; only its llm_client is stood in for (CpuLLMClient, as v1's).",
    ),
    (
        "RayPPOTrainer.init_workers",
        "creates placement groups on GPUs (ResourcePoolManager.create_resource_pool), the FSDP "
        "ActorRolloutRefWorker group that loads the model (init_model), the RewardLoopManager workers, the "
        "vLLM/SGLang LLM servers and AgentLoopManager. In test_sync.py it is not called (only "
        "async_rollout_manager is set: the sync _validate reads nothing else). Under main_ppo's real entry "
        "point (legacy TaskRunner, trainer.use_v1=False) cpu_plugin.py replaces it, in every process, by "
        "sync_cpu_init_workers: it sets what it leaves behind that fit reads (the entries below) and builds "
        "verl's real CheckpointEngineManager (naive backend) around the stand-in worker group. Called by "
        "verl's own TaskRunner.run, which is not replaced.",
    ),
    (
        "RayPPOTrainer.async_rollout_manager",
        "AgentLoopManager on GPU LLM servers; set to CpuRolloutManager (same as the fully-async one). With "
        "multi_turn.enable=True (real_agent_loop) it is verl's real AgentLoopManager, built as init_workers "
        "builds it, with its AgentLoopWorker actors and the real reward-loop workers; only its llm_client is "
        "stood in for (CpuLLMClient, as v1's).",
    ),
    (
        "RayPPOTrainer.actor_rollout_wg",
        "the GPU ActorRolloutRefWorker group. Set to CpuActorWorkerGroup: fit's _balance_batch calls its "
        "_query_dispatch_info, _compute_old_log_prob its compute_log_prob (zero log-probs and entropy), "
        "_update_actor its update_actor (no update; metrics only), the CheckpointEngineManager its "
        "update_weights. Calls are recorded.",
    ),
    (
        "RayPPOTrainer.llm_server_manager",
        "LLMServerManager owns the GPU server replicas. Set to CpuLLMServerManager: no replica for the "
        "CheckpointEngineManager to sleep or sync (fit reads it otherwise only on profiled steps).",
    ),
    (
        "RayPPOTrainer.reward_loop_manager, RayPPOTrainer.teacher_model_manager",
        "RewardLoopManager starts reward workers (GPU reward models when enabled); None here, as for no "
        "reward model (use_rm is False: fit and _validate take rm_scores from the rollout); with multi-turn on "
        "(real_agent_loop), verl's real RewardLoopManager (rule-based reward workers, no model), whose workers "
        "the real AgentLoopManager scores with. No teacher (distillation off), as init_workers sets it.",
    ),
    (
        "PPOTrainer (v1)._validate",
        "in test_sync.py (in-process, no Ray, no TransferQueue) not run: it needs init()'s worker groups and "
        "LLM servers and an agent_loop_manager writing into TransferQueue; run_v1_log_val_generations calls its "
        "real _maybe_log_val_generations exactly as its _validate does. Under main_ppo's real entry point "
        "(test_main_ppo_entry_point.py) it runs unmodified, with the three v1 stand-ins below.",
    ),
    (
        "PPOTrainer (v1)._setup",
        "creates placement groups on GPUs (ResourcePoolManager.create_resource_pool), the FSDP worker groups "
        "that load the model (init_model) and the vLLM/SGLang server replicas (LLMServerManager.create). "
        "cpu_plugin.py replaces it, in every process, by v1_cpu_setup: verl's own CPU steps run as _setup runs "
        "them (_init_tokenizer, _init_dataloader, _init_dump_executor, _init_resource_pool_mgr, the real "
        "RewardLoopManager with its rule-based reward workers, the real CheckpointEngineManager (naive), "
        "sleep_replicas, _load_checkpoint); the worker group and the servers are the next two entries. "
        "Called by verl's own TaskRunnerV1.run through init(), which is not replaced.",
    ),
    (
        "PPOTrainer (v1).actor_rollout_wg",
        "the GPU worker group, whose calls take a TransferQueue KVBatchMeta. Set to CpuV1ActorWorkerGroup: "
        "compute_log_prob writes zero log_probs/entropy per token into TransferQueue for the batch's keys (as "
        "verl's TQ-aware worker does), update_actor updates nothing (metrics only), update_weights (naive "
        "CheckpointEngineManager) and _query_dispatch_info as CpuActorWorkerGroup. Calls are recorded.",
    ),
    (
        "PPOTrainer (v1).llm_server_manager",
        "LLMServerManager owns the GPU server replicas and the load balancer. Set to CpuV1LLMServerManager: no "
        "replicas; get_client gives CpuLLMClient, which verl's own TaskRunnerV1.init_agent_loop_manager hands "
        "to verl's real AgentLoopManagerTQ. Its AgentLoopWorkerTQ actors run verl's single-turn agent loop, "
        "score with the real reward-loop workers and write into TransferQueue; only the server's generate "
        "(a vLLM/SGLang engine on GPU) is stood in.",
    ),
]
_WHY = dict(REPLACED)


def replaced(name: str) -> str:
    """The reason ``name`` is replaced; raises KeyError if a replacement is not listed in ``REPLACED``."""
    return _WHY[name]


@contextmanager
def collector(root: Path) -> Iterator[Collector]:
    """The built collector with its shipped config (``root/collector``), exporting to a wandb and a Loki stand-in.

    ``VALGEN_DECISION_WAIT`` is 10 s: at least twice the jobs' progress interval (docs/configuration.md),
    and v1's agent-loop validation takes longer than 2 s. Stopped on exit. (Imported here: verl's
    processes import this module through ``cpu_plugin`` and need none of the test's servers.)
    """
    from tests.e2e import harness as e2e

    assert e2e.COLLECTOR_BIN.is_file(), "build/otelcol-valgen is missing: `make collector` builds it"
    with e2e.wandb_stand_in() as wandb_stand_in, e2e.loki_stand_in() as loki_stand_in:
        started = e2e.start_collector(
            root,
            "collector",
            ["collector.yaml"],
            {
                "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb_stand_in.endpoint,
                "VALGEN_LOKI_OTLP_ENDPOINT": loki_stand_in.endpoint,
                "VALGEN_DECISION_WAIT": "10s",
            },
        )
        try:
            yield started
        finally:
            started.stop()


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


def make_dataset(directory: str | os.PathLike[str], n_prompts: int, n_train: int | None = None) -> tuple[str, str]:
    """Train and validation parquet files in the layout verl's RLHFDataset reads (as its gsm8k preprocessing).

    Each row: ``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model.ground_truth``,
    ``extra_info`` (split, index, question, answer). Validation rows are "question i: what is i+i?" for
    i in 0..n_prompts-1; train rows use i in 1000.. so no train text equals a validation text. The train
    file has ``n_train`` rows (default ``max(n_prompts, 4)``). Returns ``(train_path, val_path)``.
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
    pd.DataFrame(rows("train", 1000, max(n_prompts, 4) if n_train is None else n_train)).to_parquet(train_path)
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
    tmp: Path,
    train_path: str,
    val_path: str,
    model_path: str,
    log_val_generations: int,
    val_n: int,
    logger: str = "[console,file]",
) -> list[str]:
    return [
        "trainer.device=cpu",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=1",
        f"trainer.logger={logger}",
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
        f"data.max_response_length={RESPONSE_LIMIT}",
        "data.dataloader_num_workers=0",
        "data.filter_overlong_prompts=False",
        "data.validation_shuffle=False",
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.rollout.val_kwargs.n={val_n}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.prompt_length=64",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LIMIT}",
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

    overrides = sync_overrides(
        tmp,
        train_path=train_path,
        val_path=val_path,
        model_path=model_path,
        log_val_generations=log_val_generations,
        val_n=val_n,
        use_v1=use_v1,
        extra_overrides=extra_overrides,
    )
    config = _compose(_verl_dir() / "trainer" / "config", "ppo_trainer", overrides)
    auto_set_device(config)  # as main_ppo.main; keeps "cpu" on a machine without accelerators
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return migrate_legacy_reward_impl(config)


def sync_overrides(
    tmp: str | os.PathLike[str],
    *,
    train_path: str,
    val_path: str,
    model_path: str,
    log_val_generations: int = 4,
    val_n: int = 2,
    use_v1: bool = False,
    logger: str = "[console,file]",
    extra_overrides: list[str] | None = None,
) -> list[str]:
    """The hydra overrides of ``ppo_trainer.yaml`` for a tiny CPU run (also ``main_ppo``'s CLI).

    ``trainer.use_v1`` picks main_ppo's trainer (False: legacy TaskRunner and ``RayPPOTrainer``; verl
    0.9.1's default is True, the v1 ``TaskRunnerV1``). ``extra_overrides`` are applied last.
    """
    return [
        *_common_overrides(Path(tmp), train_path, val_path, model_path, log_val_generations, val_n, logger),
        f"trainer.use_v1={use_v1}",
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.agent.num_workers=2",
        *(extra_overrides or []),
    ]


def make_model_dir(directory: str | os.PathLike[str], tokenizer: Any) -> Path:
    """``directory`` with the tokenizer and a tiny model ``config.json`` (no weights): an HF model path.

    ``main_ppo``'s legacy TaskRunner reads the model through verl's ``HFModelConfig``, which loads the
    tokenizer and ``AutoConfig`` (one architecture) from ``actor_rollout_ref.model.path``; no weights are
    read on CPU because the worker group that would load them is stood in for (``REPLACED``).
    """
    from transformers import LlamaConfig

    path = Path(directory)
    tokenizer.save_pretrained(str(path))
    LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(str(path))
    return path


def fully_async_overrides(
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
    logger: str = "[console,file]",
    extra_overrides: list[str] | None = None,
) -> list[str]:
    """The hydra overrides of ``fully_async_ppo_trainer.yaml`` for a tiny CPU run (also verl's launcher's CLI).

    Overrides the constructors need: ``data.train_batch_size=0``, ``data.gen_batch_size=1``,
    ``actor_rollout_ref.hybrid_engine=False``. ``checkpoint_engine.backend=naive`` because verl's nccl
    backend needs cupy (GPU) and is not even registered on CPU, so ``set_rollouter`` could not build its
    ``CheckpointEngineManager``. With ``trigger_parameter_sync_step=1`` every ``_fit_update_local_step``
    advances ``current_param_version`` by one.
    """
    return [
        *_common_overrides(Path(tmp), train_path, val_path, model_path, log_val_generations, val_n, logger),
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
    last response token), non-tensor ``raw_prompt`` (the input's, as verl's agent loop copies it),
    ``__num_turns__``, ``multi_modal_inputs`` (``{}`` per sample, as
    ``AgentLoopWorker._compute_multi_modal_inputs`` gives with no processor; the sync ``fit`` reads it)
    and the reward extra info ``acc`` (as verl's naive reward manager adds), and ``meta_info``
    ``{"timing": {}, "reward_extra_keys": ["acc"]}``.
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
                "raw_prompt": non_tensor["raw_prompt"],  # AgentLoopWorker._agent_loop_postprocess copies it
                "__num_turns__": np.full(size, 2, dtype=np.int32),
                "multi_modal_inputs": np.array([{} for _ in range(size)], dtype=object),
                "acc": np.array(scores, dtype=np.float64),
            },
            meta_info={"timing": {}, "reward_extra_keys": ["acc"]},
        )

    async def generate_sequences_single(self, prompts: DataProto) -> DataProto:
        """The fully-async rollouter's per-sample call (``FullyAsyncAgentLoopManager.generate_sequences_single``).

        ``generate_sequences`` plus what verl's agent loop adds for training samples: ``rollout_log_probs``
        (``rollout.calculate_log_probs`` is on in fully-async mode, whose default bypass mode trains with them;
        0 here), per-trajectory ``min_global_steps``/``max_global_steps`` (the parameter version a server
        generated with: 0 here, no weights are synced to a stand-in) and ``meta_info["metrics"]`` (per-sample
        timings, all 0).
        """
        import numpy as np
        import torch

        output = self.generate_sequences(prompts)
        size = len(output)
        output.batch["rollout_log_probs"] = torch.zeros(output.batch["responses"].shape, dtype=torch.float32)
        output.non_tensor_batch["min_global_steps"] = np.zeros(size, dtype=np.int64)
        output.non_tensor_batch["max_global_steps"] = np.zeros(size, dtype=np.int64)
        output.meta_info["metrics"] = [{"generate_sequences": 0.0, "tool_calls": 0.0} for _ in range(size)]
        return output


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
        self._dispatch_info: dict[str, list[int]] = {}  # RayWorkerGroup's cache, read by _get_dp_size

    def _query_dispatch_info(self, role: str) -> list[int]:
        """Called by ``_balance_batch`` (``_get_dp_size``): the data-parallel rank of each worker, one rank."""
        self.calls.append(("_query_dispatch_info", {"role": role}))
        return [0]

    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        """Called by ``FullyAsyncTrainer.load_checkpoint`` when a ``global_step_N`` folder is found."""
        self.calls.append(("load_checkpoint", {"local_path": local_path}))

    def update_weights(self, global_steps: int | None = None, mode: str | None = None) -> list[Any]:
        """Called by ``CheckpointEngineManager.update_weights`` (naive backend); ``ray.get([])`` is ``[]``."""
        self.calls.append(("update_weights", {"global_steps": global_steps, "mode": mode}))
        return []

    def save_model_to_cpu(self, version: int) -> None:
        """Called by ``FullyAsyncTrainer._compute_old_log_prob`` (decoupled mode): nothing is kept."""
        self.calls.append(("save_model_to_cpu", {"version": version}))

    def restore_model_from_cpu(self, version: int) -> None:
        """Called by ``FullyAsyncTrainer._compute_old_log_prob`` on a later local step: nothing to restore."""
        self.calls.append(("restore_model_from_cpu", {"version": version}))

    def clear_cpu_model(self, version: int) -> None:
        """Called by ``FullyAsyncTrainer._compute_old_log_prob`` on a later local step: nothing to clear."""
        self.calls.append(("clear_cpu_model", {"version": version}))

    def compute_log_prob(self, data: Any) -> Any:
        """Called by the sync ``_compute_old_log_prob``: zero log-probs and entropy per token (no-padding layout).

        ``data`` is verl's no-padding TensorDict (nested ``input_ids``); the outputs have one value per token,
        which verl's ``no_padding_2_padding`` slices back to the responses.
        """
        import torch
        from verl.utils import tensordict_utils as tu

        tokens = data["input_ids"].values().shape[0]
        self.calls.append(("compute_log_prob", {"batch_size": len(data["input_ids"].offsets()) - 1}))
        outputs = {"log_probs": torch.zeros(tokens), "entropy": torch.zeros(tokens)}
        return tu.get_tensordict(outputs, non_tensor_dict={"metrics": {"mfu": 0.0}})

    def update_actor(self, data: Any) -> Any:
        """Called by ``_update_actor``: no update; the metrics dict verl renames to ``actor/...``."""
        from verl.utils import tensordict_utils as tu

        self.calls.append(("update_actor", {"batch_size": len(data["input_ids"].offsets()) - 1}))
        return tu.get_tensordict({}, non_tensor_dict={"metrics": {"mfu": 0.0, "pg_loss": 0.0}})


# ---------------------------------------------------------------------------------------------------------------------
# Fully async: what the test-only plugin (cpu_plugin.py) runs as the two actors' init_workers
# ---------------------------------------------------------------------------------------------------------------------


def real_agent_loop(config: Any) -> bool:
    """Whether a job runs verl's real agent-loop manager on ``CpuLLMClient``: multi-turn configured.

    v1 always does; the legacy and fully-async stand-ins keep ``CpuRolloutManager`` for single-turn jobs.
    """
    return bool(config.actor_rollout_ref.rollout.multi_turn.enable)


async def rollouter_cpu_init_workers(rollouter: Any) -> str:
    """``FullyAsyncRollouter.init_workers`` on CPU: its CPU part plus the two stand-ins (run in the actor).

    With multi-turn on, verl's own ``_create_reward_loop_manager`` and its real ``FullyAsyncAgentLoopManager``
    (created as ``_init_async_rollout_manager`` creates it) on ``CpuLLMClient``.
    """
    from verl.utils.skip import SkipManager

    rollouter._init_async_objects()
    replaced("FullyAsyncRollouter.llm_server_manager")
    rollouter.llm_server_manager = CpuLLMServerManager()
    rollouter.async_rollout_mode = True
    if real_agent_loop(rollouter.config):
        from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncAgentLoopManager

        await rollouter._create_reward_loop_manager()
        rollouter.async_rollout_manager = await FullyAsyncAgentLoopManager.create(
            config=rollouter.config,
            llm_client=CpuLLMClient(rollouter.config.actor_rollout_ref.model.path),
            reward_loop_worker_handles=rollouter.reward_loop_manager.reward_loop_workers,
        )
    else:
        rollouter.async_rollout_manager = CpuRolloutManager(rollouter.tokenizer)
    SkipManager.init(rollouter.config)
    return replaced("FullyAsyncRollouter.async_rollout_manager")


def trainer_cpu_init_workers(trainer: Any) -> str:
    """``FullyAsyncTrainer.init_workers`` on CPU: what it leaves behind that verl's trainer reads (in the actor)."""
    trainer.actor_wg = CpuActorWorkerGroup()
    trainer.actor_rollout_wg = trainer.actor_wg
    return replaced("FullyAsyncTrainer.actor_wg, FullyAsyncTrainer.actor_rollout_wg")


def sync_cpu_init_workers(trainer: Any) -> None:
    """``RayPPOTrainer.init_workers`` on CPU (main_ppo's legacy TaskRunner, in its actor): what fit reads.

    As verl's ``init_workers`` leaves them: ``actor_rollout_wg`` (and ``ref_policy_wg`` when the reference
    is in the actor), ``reward_loop_manager``, ``async_rollout_mode``, ``teacher_model_manager``,
    ``llm_server_manager``, ``async_rollout_manager`` and verl's real ``CheckpointEngineManager`` built
    from the rollout's ``checkpoint_engine`` config as verl builds it, then ``sleep_replicas`` as verl does.
    With multi-turn on (``real_agent_loop``), verl's real ``RewardLoopManager`` and ``AgentLoopManager`` on
    ``CpuLLMClient``, as ``init_workers`` creates them.
    """
    from verl.checkpoint_engine import CheckpointEngineManager
    from verl.utils.config import omega_conf_to_dataclass

    replaced("RayPPOTrainer.actor_rollout_wg")
    trainer.actor_rollout_wg = CpuActorWorkerGroup()
    if trainer.ref_in_actor:
        trainer.ref_policy_wg = trainer.actor_rollout_wg
    replaced("RayPPOTrainer.reward_loop_manager, RayPPOTrainer.teacher_model_manager")
    trainer.reward_loop_manager = None
    trainer.async_rollout_mode = True
    trainer.teacher_model_manager = None
    trainer.distillation_config = None
    replaced("RayPPOTrainer.llm_server_manager")
    trainer.llm_server_manager = CpuLLMServerManager()
    replaced("RayPPOTrainer.async_rollout_manager")
    if real_agent_loop(trainer.config):
        from verl.experimental.agent_loop import AgentLoopManager
        from verl.experimental.reward_loop import RewardLoopManager

        trainer.reward_loop_manager = RewardLoopManager(config=trainer.config, rm_resource_pool=None)
        trainer.async_rollout_manager = AgentLoopManager.create(
            config=trainer.config,
            llm_client=CpuLLMClient(trainer.config.actor_rollout_ref.model.path),
            reward_loop_worker_handles=trainer.reward_loop_manager.reward_loop_workers,
        )
    else:
        trainer.async_rollout_manager = CpuRolloutManager(trainer.tokenizer)
    trainer.checkpoint_manager = CheckpointEngineManager(
        config=omega_conf_to_dataclass(trainer.config.actor_rollout_ref.rollout.checkpoint_engine),
        actor_wg=trainer.actor_rollout_wg,
        replicas=trainer.llm_server_manager.get_replicas(),
    )
    trainer.checkpoint_manager.sleep_replicas()


class CpuLLMClient:
    """CPU stand-in for the servers behind ``LLMServerClient``: ``REPLACED['PPOTrainer (v1).llm_server_manager']``.

    What verl's agent loop calls (``await client.generate(request_id, prompt_ids=..., sampling_params=...)``)
    answers as a vLLM server would through ``LLMServerClient.generate``: a ``TokenOutput`` with the
    response token ids (ending with eos), rollout log-probs (``rollout_log_prob``) when
    ``sampling_params["logprobs"]``, and
    the weight version it generated with as ``global_steps``/``min_global_steps``/``max_global_steps``
    (0: no weights reach a stand-in, as in ``CpuRolloutManager``). The response is ``response_text``
    for the question index read back from the prompt; the draft number counts calls per prompt. With
    ``TOOL_CALLS_ENV`` set it answers as a tool-calling model in the hermes format (``tool_turn``).
    Picklable (the tokenizer is loaded lazily), as verl sends the client to its agent-loop workers.
    """

    def __init__(self, tokenizer_path: str):
        self.tokenizer_path = tokenizer_path
        self._tokenizer: Any = None
        self._drafts: Counter[int] = Counter()

    def __getstate__(self) -> dict[str, Any]:
        return {"tokenizer_path": self.tokenizer_path, "_tokenizer": None, "_drafts": Counter()}

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any):
        """One completion of ``prompt_ids``."""
        import re

        from transformers import AutoTokenizer
        from verl.workers.rollout.replica import TokenOutput

        if self._tokenizer is None:
            self._tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_path)
        tokenizer = self._tokenizer
        match = re.search(r"question (\d+):", tokenizer.decode(prompt_ids, skip_special_tokens=True))
        assert match, f"not a prompt of make_dataset: {tokenizer.decode(prompt_ids)!r}"
        index = int(match.group(1))
        draft = self._drafts[index]
        self._drafts[index] += 1
        if os.environ.get(TOOL_CALLS_ENV):
            response = tool_turn(index, draft, tokenizer.decode(prompt_ids).count(TOOL_MESSAGE))
        else:
            response = response_text(index, str(2 * index), draft, "v1")
        ids = [*tokenizer.encode(response, add_special_tokens=False), tokenizer.eos_token_id]
        log_probs = [rollout_log_prob(tokenizer.decode([i])) for i in ids] if sampling_params.get("logprobs") else None
        return TokenOutput(
            token_ids=ids,
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": 0, "min_global_steps": 0, "max_global_steps": 0},
        )


MISMATCHED_LOG_PROB = -1.0
"""``CpuLLMClient``'s log-probability of a digit token: the trainer's stand-ins give 0 to every token."""


def rollout_log_prob(piece: str) -> float:
    """The log-probability ``CpuLLMClient`` answers for a token of text ``piece``: known tokens (digits) differ."""
    return MISMATCHED_LOG_PROB if piece.isdigit() else 0.0


TOOL_CALLS_ENV = "VALGEN_TEST_TOOL_CALLS"
"""Set (to ``1``) in a job's environment: ``CpuLLMClient`` answers as a tool-calling model (``tool_turn``)."""
TOOL_NAME = "calc"  # the tool of tool_config(), verl's own BaseTool
TOOL_MESSAGE = "<|tool|>"  # how CHAT_TEMPLATE renders a tool message (not a special token: kept by decode)


def tool_calls_wanted(index: int) -> int:
    """How many tool calls the stand-in model makes for question ``index`` before answering: 1, or 2 when odd."""
    return 1 + index % 2


def tool_turn(index: int, draft: int, done: int) -> str:
    """The model's turn after ``done`` tool results: a hermes tool call, then (all made) ``response_text``."""
    if done >= tool_calls_wanted(index):
        return response_text(index, str(2 * index), draft, "v1")
    arguments = json.dumps({"expression": f"{index}+{index}", "call": done})
    return f'Let me compute ({draft}).<tool_call>{{"name": "{TOOL_NAME}", "arguments": {arguments}}}</tool_call>'


def tool_config(path: str | os.PathLike[str]) -> Path:
    """A ``multi_turn.tool_config_path`` yaml as users write one: verl's own ``BaseTool`` as the ``calc`` tool."""
    file = Path(path)
    file.write_text(
        "tools:\n"
        "  - class_name: verl.tools.base_tool.BaseTool\n"
        "    config:\n"
        "      type: native\n"
        "    tool_schema:\n"
        "      type: function\n"
        "      function:\n"
        f"        name: {TOOL_NAME}\n"
        "        description: Evaluate an arithmetic expression.\n"
        "        parameters:\n"
        "          type: object\n"
        "          properties:\n"
        "            expression:\n"
        "              type: string\n"
        "              description: The expression.\n"
        "          required: [expression]\n"
    )
    return file


class CpuV1LLMServerManager(CpuLLMServerManager):
    """CPU stand-in for v1's ``LLMServerManager``: no replicas; ``get_client`` gives ``CpuLLMClient``."""

    def __init__(self, tokenizer_path: str) -> None:
        super().__init__()
        self.tokenizer_path = tokenizer_path

    def get_client(self, client_cls: Any = None, **kwargs: Any) -> CpuLLMClient:
        """The client verl's ``TaskRunnerV1.init_agent_loop_manager`` hands to ``AgentLoopManagerTQ.create``."""
        return CpuLLMClient(self.tokenizer_path)


class CpuV1ActorWorkerGroup(CpuActorWorkerGroup):
    """CPU stand-in for v1's actor worker group: its calls take a TransferQueue ``KVBatchMeta``.

    ``compute_log_prob`` writes zero ``log_probs``/``entropy`` per token (nested like ``input_ids``) into
    TransferQueue for the batch's keys, as verl's TQ-aware worker does; ``update_actor`` updates nothing.
    """

    def compute_log_prob(self, batch: Any) -> Any:
        """Zero log-probs and entropy for every token of every sample of ``batch`` (a ``KVBatchMeta``)."""
        import torch
        import transfer_queue as tq
        from tensordict import TensorDict

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["input_ids"])
        ids = data["input_ids"]
        self.calls.append(("compute_log_prob", {"batch_size": len(batch.keys)}))

        def zeros() -> torch.Tensor:
            return torch.nested.nested_tensor_from_jagged(torch.zeros(ids.values().shape[0]), ids.offsets())

        fields = TensorDict({"log_probs": zeros(), "entropy": zeros()}, batch_size=[len(batch.keys)])
        tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
        return batch

    def update_actor(self, data: Any) -> Any:
        """No update; the metrics verl renames to ``actor/...``."""
        from verl.utils import tensordict_utils as tu

        self.calls.append(("update_actor", {"batch_size": len(data.keys)}))
        return tu.get_tensordict({}, non_tensor_dict={"metrics": {"mfu": 0.0, "pg_loss": 0.0}})


def v1_cpu_setup(trainer: Any) -> None:
    """v1 ``PPOTrainer._setup`` on CPU (in ``TaskRunnerV1``'s actor): its CPU steps, stand-ins for the rest.

    verl's own steps run as ``_setup`` runs them: ``_init_tokenizer``, ``_init_dataloader``,
    ``_init_dump_executor``, ``_init_resource_pool_mgr``, verl's real ``RewardLoopManager`` (rule-based
    reward workers, no reward model), the real ``CheckpointEngineManager`` (naive backend, as ``_setup``
    forces), ``sleep_replicas`` and ``_load_checkpoint``. Stood in for: the resource pools and worker
    groups (``CpuV1ActorWorkerGroup``) and the LLM servers (``CpuV1LLMServerManager``).
    """
    from verl.checkpoint_engine import CheckpointEngineManager
    from verl.experimental.reward_loop import RewardLoopManager
    from verl.utils.config import omega_conf_to_dataclass

    trainer._init_tokenizer()
    trainer._init_dataloader()
    trainer._init_dump_executor()
    trainer._init_resource_pool_mgr()
    lora_rank = trainer.config.actor_rollout_ref.model.get("lora", {}).get("rank", 0)
    if lora_rank <= 0:
        lora_rank = trainer.config.actor_rollout_ref.model.get("lora_rank", 0)
    trainer.ref_in_actor = lora_rank > 0 or trainer.config.actor_rollout_ref.model.get("lora_adapter_path") is not None
    replaced("PPOTrainer (v1).actor_rollout_wg")
    trainer.actor_rollout_wg = CpuV1ActorWorkerGroup()
    if trainer.ref_in_actor:
        trainer.ref_policy_wg = trainer.actor_rollout_wg
    trainer.reward_loop_manager = RewardLoopManager(config=trainer.config, rm_resource_pool=None)
    trainer.teacher_model_manager = None
    trainer.distillation_config = None
    replaced("PPOTrainer (v1).llm_server_manager")
    trainer.llm_server_manager = CpuV1LLMServerManager(trainer.config.actor_rollout_ref.model.path)
    checkpoint_engine_config = omega_conf_to_dataclass(trainer.config.actor_rollout_ref.rollout.checkpoint_engine)
    checkpoint_engine_config.backend = "naive"
    trainer.checkpoint_manager = CheckpointEngineManager(
        config=checkpoint_engine_config,
        actor_wg=trainer.actor_rollout_wg,
        replicas=trainer.llm_server_manager.get_replicas(),
    )
    trainer.checkpoint_manager.sleep_replicas()
    trainer._load_checkpoint()


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (empty if it does not exist)."""
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


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

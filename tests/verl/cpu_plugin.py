"""Test-only verl plugin: the CPU stand-ins of ``harness.REPLACED`` inside verl's own launcher.

Loaded by verl itself: ``VERL_USE_EXTERNAL_MODULES=tests.verl.cpu_plugin`` (with the checkout on
``PYTHONPATH``) makes ``import verl`` import this module in every process that imports verl: the
launcher's driver, the TaskRunner and every actor. It only registers post-import hooks; when verl's
fully-async trainer and rollouter modules have been imported, their ``init_workers`` (GPU resource
pools, model workers, LLM servers) are replaced by the CPU versions in ``harness``; so is the sync
``RayPPOTrainer.init_workers`` that ``main_ppo``'s legacy TaskRunner calls (every subclass of
``RayPPOTrainer`` in verl 0.9.1 defines its own ``init_workers``) and the v1 ``PPOTrainer._setup`` that
``TaskRunnerV1`` reaches through ``init()`` (``PPOTrainerSync``, of the default
``trainer.v1.trainer_mode=sync``, inherits it). Nothing else of verl changes: the
launchers, TaskRunners, their import order and ``@ray.remote`` decoration stay as verl has them.

It never imports otel_valgen, so otel-valgen's hooks go in exactly when the launcher's ``ray.init``
runs ``RAY_RUNTIME_ENV_HOOK``, after the actor classes were decorated.

Two test-only probes observe verl without changing what it does, each when its variable is set:
``VALGEN_TEST_AGENT_MESSAGES`` (the messages of each tool-agent trajectory) and
``VALGEN_TEST_CORRECTIONS`` (what verl's rollout correction computed, row by row).
"""

from __future__ import annotations

from typing import Any

import wrapt

TRAINER_MODULE = "verl.experimental.fully_async_policy.fully_async_trainer"
ROLLOUTER_MODULE = "verl.experimental.fully_async_policy.fully_async_rollouter"
SYNC_TRAINER_MODULE = "verl.trainer.ppo.ray_trainer"
V1_TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"


async def trainer_init_workers(self: Any) -> None:
    """``FullyAsyncTrainer.init_workers`` on CPU: the actor worker group is ``CpuActorWorkerGroup``."""
    from tests.verl import harness

    harness.replaced("FullyAsyncTrainer.init_workers")
    harness.trainer_cpu_init_workers(self)


async def rollouter_init_workers(self: Any) -> None:
    """``FullyAsyncRollouter.init_workers`` on CPU: its CPU steps plus the server and rollout stand-ins."""
    from tests.verl import harness

    harness.replaced("FullyAsyncRollouter.init_workers")
    await harness.rollouter_cpu_init_workers(self)


def sync_init_workers(self: Any) -> None:
    """``RayPPOTrainer.init_workers`` on CPU: the worker group, rollout and server stand-ins (see ``REPLACED``)."""
    from tests.verl import harness

    harness.replaced("RayPPOTrainer.init_workers")
    harness.sync_cpu_init_workers(self)


def v1_setup(self: Any) -> None:
    """v1 ``PPOTrainer._setup`` on CPU: verl's CPU steps, the worker group and LLM server stand-ins."""
    from tests.verl import harness

    harness.replaced("PPOTrainer (v1)._setup")
    harness.v1_cpu_setup(self)


def _replace_init_workers(actor_class: Any, function: Any) -> None:
    """Set ``init_workers`` on the decorated class's user class and on the class Ray made from it.

    ``@ray.remote`` made a subclass (``__ray_metadata__.modified_class``) holding a copy of every method;
    that subclass is what Ray ships to the actor's process, so the replacement goes there too.
    """
    modified = actor_class.__ray_metadata__.modified_class
    for cls in {modified, getattr(modified, "__ray_actor_class__", modified)}:
        cls.init_workers = function


def _on_trainer(module: Any) -> None:
    _replace_init_workers(module.FullyAsyncTrainer, trainer_init_workers)


def _on_rollouter(module: Any) -> None:
    _replace_init_workers(module.FullyAsyncRollouter, rollouter_init_workers)


def _on_sync_trainer(module: Any) -> None:
    module.RayPPOTrainer.init_workers = sync_init_workers  # a plain class: main_ppo_v0's TaskRunner builds it


def _on_v1_trainer(module: Any) -> None:
    module.PPOTrainer._setup = v1_setup  # a plain class: main_ppo's TaskRunnerV1 builds its subclass


wrapt.register_post_import_hook(_on_trainer, TRAINER_MODULE)
wrapt.register_post_import_hook(_on_rollouter, ROLLOUTER_MODULE)
wrapt.register_post_import_hook(_on_sync_trainer, SYNC_TRAINER_MODULE)
wrapt.register_post_import_hook(_on_v1_trainer, V1_TRAINER_MODULE)


# verl's own record of each tool-agent trajectory: with VALGEN_TEST_AGENT_MESSAGES=<folder>, every process
# appends the messages ToolAgentLoop held when it ended (AgentData.messages) to <folder>/<pid>.jsonl.
TOOL_AGENT_MODULE = "verl.experimental.agent_loop.tool_agent_loop"
AGENT_MESSAGES_ENV = "VALGEN_TEST_AGENT_MESSAGES"


def _on_tool_agent(module: Any) -> None:
    import functools
    import json
    import os
    from pathlib import Path

    folder = os.environ.get(AGENT_MESSAGES_ENV)
    if not folder:
        return
    generating = module.ToolAgentLoop._handle_generating_state

    @functools.wraps(generating)
    async def _handle_generating_state(self: Any, agent_data: Any, *args: Any, **kwargs: Any) -> Any:
        state = await generating(self, agent_data, *args, **kwargs)
        if state == module.AgentState.TERMINATED:
            line = json.dumps(list(agent_data.messages), default=lambda value: value.tolist())
            with (Path(folder) / f"{os.getpid()}.jsonl").open("a", encoding="utf-8") as file:
                file.write(line + "\n")
        return state

    module.ToolAgentLoop._handle_generating_state = _handle_generating_state


wrapt.register_post_import_hook(_on_tool_agent, TOOL_AGENT_MODULE)


# verl's own tensors at its rollout correction: with VALGEN_TEST_CORRECTIONS=<folder>, every process appends one
# JSON line per row of each corrected batch to <folder>/<pid>.jsonl, with what verl computed: the response's ids,
# its rollout and trainer log-probs, the response mask before and after the correction, the importance weights and
# the data source, each up to the response's length. The legacy and separation trainers' DataProto is read where
# they call the correction; v1's rows live in TransferQueue, read by key around PPOTrainer._compute_advantage.
CORRECTION_MODULE = "verl.trainer.ppo.rollout_corr_helper"
CORRECTIONS_ENV = "VALGEN_TEST_CORRECTIONS"
V1_CORRECTION_FIELDS = ("responses", "response_mask", "rollout_log_probs", "old_log_probs", "data_source")


def _write_rows(rows: list[dict[str, Any]]) -> None:
    import json
    import os
    from pathlib import Path

    folder = Path(os.environ[CORRECTIONS_ENV])
    with (folder / f"{os.getpid()}.jsonl").open("a", encoding="utf-8") as file:
        file.writelines(json.dumps(row) + "\n" for row in rows)


def _listed(value: Any, span: int) -> list[Any] | None:
    return None if value is None else value[:span].tolist()


def _padded_rows(batch: Any, before: Any) -> list[dict[str, Any]]:
    """A corrected DataProto's rows, each up to the response part of its attention mask."""
    tensors = batch.batch
    width = tensors["prompts"].shape[1]
    spans = tensors["attention_mask"][:, width:].sum(-1).tolist()
    sources = batch.non_tensor_batch.get("data_source")
    weights = tensors["rollout_is_weights"] if "rollout_is_weights" in tensors.keys() else None  # noqa: SIM118
    return [
        {
            "ids": _listed(tensors["responses"][row], span),
            "rollout": _listed(tensors["rollout_log_probs"][row], span),
            "trainer": _listed(tensors["old_log_probs"][row], span),
            "before": _listed(before[row], span),
            "after": _listed(tensors["response_mask"][row], span),
            "weight": _listed(weights[row], span) if weights is not None else None,
            "data_source": str(sources[row]) if sources is not None else None,
        }
        for row, span in enumerate(spans)
    ]


def _on_correction(module: Any) -> None:
    import functools
    import os

    if not os.environ.get(CORRECTIONS_ENV):
        return
    correct = module.compute_rollout_correction_and_add_to_batch

    @functools.wraps(correct)
    def compute_rollout_correction_and_add_to_batch(batch: Any, rollout_corr_config: Any) -> Any:
        before = batch.batch["response_mask"]
        result = correct(batch, rollout_corr_config)
        if "responses" in batch.batch.keys():  # noqa: SIM118  (v1's copy has none: probed per key below)
            _write_rows(_padded_rows(result[0], before))
        return result

    module.compute_rollout_correction_and_add_to_batch = compute_rollout_correction_and_add_to_batch


def _on_v1_correction(module: Any) -> None:
    import functools
    import os

    if not os.environ.get(CORRECTIONS_ENV):
        return
    compute_advantage = module.PPOTrainer._compute_advantage

    @functools.wraps(compute_advantage)
    def _compute_advantage(self: Any, batch: Any, metrics: dict[str, Any]) -> Any:
        seen = module.tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=list(V1_CORRECTION_FIELDS)
        )
        result = compute_advantage(self, batch, metrics)
        after = module.tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["response_mask", "rollout_is_weights"]
        )
        sources = seen["data_source"]
        sources = list(sources.tolist() if hasattr(sources, "tolist") else sources)
        columns = {
            "ids": seen["responses"],
            "rollout": seen["rollout_log_probs"],
            "trainer": seen["old_log_probs"],
            "before": seen["response_mask"],
            "after": after["response_mask"],
            "weight": after["rollout_is_weights"],
        }
        rows = {name: list(value.unbind()) for name, value in columns.items()}
        _write_rows(
            [
                {**{name: values[row].tolist() for name, values in rows.items()}, "data_source": str(sources[row])}
                for row in range(len(batch.keys))
            ]
        )
        return result

    module.PPOTrainer._compute_advantage = _compute_advantage


wrapt.register_post_import_hook(_on_correction, CORRECTION_MODULE)
wrapt.register_post_import_hook(_on_v1_correction, V1_TRAINER_MODULE)

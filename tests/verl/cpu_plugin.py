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

"""verl integration: every validation of verl's trainers reaches otel-valgen, with no subclass.

Automatic (``install()``; otel-valgen's Ray setup hook runs it in every worker, see
docs/verl.md). When verl's trainer modules are imported, post-import hooks patch verl's own
classes, so every subclass and every actor made from them inherits the change. One module per
concern:

- ``_layout``: what otel-valgen relies on in verl's code (a verl upgrade changes it first).
- ``_validation``: ``RayPPOTrainer`` (the base of the fully-async trainer and rollouter) and the
  v1 ``PPOTrainer``: ``_validate`` runs inside a ``vg.validation`` block at the trainer's step,
  and ``_maybe_log_val_generations`` sends every generation instead of verl's pre-selected k
  (k = ``trainer.log_val_generations``; 0 disables, as in verl). ``RayPPOTrainer.
  current_param_version`` becomes a property whose setter also publishes the value and the
  trainer's tracker runs (``_trainer_step``), so that the fully-async rollouter validates at the
  trainer's step, into the trainer's runs.
- ``_rows``: each row's ground truth, data source, ``reward_extra_info`` columns, response length
  and truncation, read from ``_validate`` as verl's own ``validation_data_dir`` dump writes them.
- ``_agent_loop``: in the agent-loop workers, each trajectory's conversation (the messages verl's
  ``ToolAgentLoop`` held) rides with its row; ``_conversations`` reads it back for both kinds of rows.
- ``_rollout_hooks``: training rollouts (``OTEL_VALGEN_ROLLOUT_COUNT`` > 0): each training step's
  final batch is sent with ``vg.log_rollouts`` (``integrations.verl_rollouts``), with its per-token
  data (``_tokens``); ``_correction`` keeps the response mask verl's rollout correction replaces;
  the v1 trainer's rows are read from TransferQueue (``_v1_fetch``), except what ``_v1_capture``
  keeps of what the trainer held in the same step.
- ``_actors``: Ray actor classes made before the hooks get the hooked methods back.
- ``_tables``: verl's own table, which the hooks never call, still writes, but first says why
  this validation did not reach otel-valgen.

Parts the integration opens carry ``valgen.integration=verl/<verl version>``.

Explicit, for code that writes its own trainer subclass: ``ValGenerationsMixin``,
``ValidationGenerationsLogger`` (verl's call shape) and ``log_val_generations``.

None of this needs ``__init__`` to have run: a subclass that skips ``super().__init__()``
still logs (verl issues #6438, #4794, #5988).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import otel_valgen as vg
from otel_valgen._env import OTEL_VALGEN_VERL, env_bool
from otel_valgen.integrations.verl import _actors, _agent_loop, _correction, _rollout_hooks, _tables
from otel_valgen.integrations.verl._actors import repair_actor_classes
from otel_valgen.integrations.verl._layout import (
    AGENT_LOOP_MODULE,
    HOOKED_METHODS,
    PATCHED_CLASSES,
    ROLLOUT_HOOKS,
    TESTED_VERL_VERSIONS,
    TOOL_AGENT_MODULE,
    V1_TRAINER_MODULE,
)
from otel_valgen.integrations.verl._validation import ValGenerationsMixin, log_val_generations, on_import

__all__ = [
    "HOOKED_METHODS",
    "PATCHED_CLASSES",
    "ROLLOUT_HOOKS",
    "TESTED_VERL_VERSIONS",
    "ValGenerationsMixin",
    "ValidationGenerationsLogger",
    "install",
    "log_val_generations",
    "repair_actor_classes",
]

_logger = logging.getLogger("otel_valgen")


@dataclasses.dataclass
class ValidationGenerationsLogger:
    """verl's ``verl.utils.tracking.ValidationGenerationsLogger``, emitting OTel records.

    ``log(loggers, samples, step)`` takes verl's ``(input, output, score)`` tuples. ``loggers``
    (verl's ``trainer.logger``) is ignored: the collector decides where records go.
    """

    project_name: str | None = None
    experiment_name: str | None = None
    source: ClassVar[str] = "trainer"

    def log(self, loggers: Sequence[str] | None, samples: Sequence[Sequence[Any]], step: int) -> None:
        """Emit ``samples`` at ``step`` and end this source's part of the step."""
        del loggers
        try:
            rows = [tuple(sample) for sample in samples]
            inputs = [row[0] if len(row) > 0 else None for row in rows]
            outputs = [row[1] if len(row) > 1 else None for row in rows]
            scores = [row[2] if len(row) > 2 else None for row in rows]
        except TypeError:
            _logger.warning("otel_valgen: ValidationGenerationsLogger.log expects (input, output, score) tuples")
            return
        with vg.validation(step=step, source=self.source):
            vg.log_generations(inputs, outputs, scores)


_installed = False


def install() -> bool:
    """Hook verl's trainers when (or if already) imported; returns whether hooks are in place.

    Idempotent and cheap: nothing of verl is imported here. ``OTEL_VALGEN_VERL=false`` turns
    it off; verl's own validation table still says, when it runs, that nothing reaches otel-valgen.
    """
    global _installed
    _tables.watch_tables()
    if not env_bool(OTEL_VALGEN_VERL, True):
        _tables.disabled = not _installed
        return False
    if _installed:
        _actors.repair_quietly()
        return True
    try:
        import wrapt

        for module_name, (class_name, publishes_step) in PATCHED_CLASSES.items():
            hook = functools.partial(on_import, class_name=class_name, publishes_step=publishes_step)
            wrapt.register_post_import_hook(hook, module_name)
        for module_name in ROLLOUT_HOOKS:
            wrapt.register_post_import_hook(_rollout_hooks.on_import, module_name)
        for module_name in _correction.watched_modules():
            wrapt.register_post_import_hook(_rollout_hooks.on_correction_import, module_name)
        # after ROLLOUT_HOOKS: it keeps rows only for the v1 hook it finds in place
        wrapt.register_post_import_hook(_rollout_hooks.on_v1_trainer_import, V1_TRAINER_MODULE)
        wrapt.register_post_import_hook(_agent_loop.on_worker_import, AGENT_LOOP_MODULE)
        wrapt.register_post_import_hook(_agent_loop.on_tool_agent_import, TOOL_AGENT_MODULE)
    except Exception:
        _logger.exception("otel_valgen: could not install the verl integration")
        return False
    _installed = True
    _tables.disabled = False
    _actors.repair_quietly()
    return True

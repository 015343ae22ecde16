"""verl integration: every validation of verl's trainers reaches otel-valgen, with no subclass.

Automatic (``install()``; otel-valgen's Ray setup hook runs it in every worker, see
docs/verl.md). When verl's trainer modules are imported, post-import hooks patch verl's own
classes, so every subclass and every actor made from them inherits the change:

- ``RayPPOTrainer`` (``verl.trainer.ppo.ray_trainer``; the base of the fully-async trainer and
  rollouter) and the v1 ``PPOTrainer`` (``verl.trainer.ppo.v1.trainer_base``):
  ``_validate`` runs inside a ``vg.validation`` block at the trainer's step, and
  ``_maybe_log_val_generations`` sends every generation instead of verl's pre-selected k
  (k = ``trainer.log_val_generations``; 0 disables, as in verl).
- ``RayPPOTrainer.current_param_version`` becomes a property whose setter also publishes the
  value (``_trainer_step``), so that the fully-async rollouter validates at the trainer's step.

Explicit, for code that writes its own trainer subclass: ``ValGenerationsMixin``,
``ValidationGenerationsLogger`` (verl's call shape) and ``log_val_generations``.

None of this needs ``__init__`` to have run: a subclass that skips ``super().__init__()``
still logs (verl issues #6438, #4794, #5988).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, ClassVar, Final

import otel_valgen as vg
from otel_valgen import _process
from otel_valgen._env import OTEL_VALGEN_VERL, env_bool
from otel_valgen.integrations import _trainer_step

__all__ = ["ValGenerationsMixin", "ValidationGenerationsLogger", "install", "log_val_generations"]

_logger = logging.getLogger("otel_valgen")

# module -> (class, whether its instances may publish a fully-async trainer's step)
PATCHED_CLASSES: Final = {
    "verl.trainer.ppo.ray_trainer": ("RayPPOTrainer", True),
    "verl.trainer.ppo.v1.trainer_base": ("PPOTrainer", False),
}


@dataclasses.dataclass(frozen=True)
class _Target:
    """Where one validation's generations go: the trainer's step, the part's name, k."""

    step: int | None
    source: str
    count: int | None


# The validation block this context is in: (id of the trainer object, its target).
_active: contextvars.ContextVar[tuple[int, _Target] | None] = contextvars.ContextVar(
    "otel_valgen_verl_validation", default=None
)


def _log_count(trainer: object) -> int | None:
    """The ``trainer.log_val_generations`` of verl's config, or None when the object has no such config."""
    try:
        count = trainer.config.trainer.log_val_generations  # type: ignore[attr-defined]
    except Exception:
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _target(trainer: object) -> _Target | None:
    """The step, source and k of a validation by ``trainer``; None when verl disabled logging."""
    count = _log_count(trainer)
    if count == 0:
        return None
    named = getattr(type(trainer), "valgen_source", None)
    own_version = getattr(trainer, "__dict__", {}).get("current_param_version")
    if isinstance(own_version, int):  # a fully-async trainer validating by itself
        return _Target(own_version, named or "trainer", count)
    published = _trainer_step.read()
    if published is not None:  # a part validating for the fully-async trainer of this job
        return _Target(published, named or "rollouter", count)
    step = getattr(trainer, "global_steps", None)
    return _Target(step if isinstance(step, int) else None, named or "trainer", count)


def _validate_in_block(validate: Callable[..., Any], trainer: object, args: Any, kwargs: Any) -> Any:
    """Run verl's ``_validate`` inside one validation block at the trainer's step."""
    active = _active.get()
    if active is not None and active[0] == id(trainer):  # already inside (mixin over a patched base)
        return validate(*args, **kwargs)
    target = _process.never_raise(None)(_target)(trainer)
    if target is None:
        return validate(*args, **kwargs)
    with vg.validation(step=target.step, source=target.source, count=target.count):  # type: ignore[arg-type]
        token = _active.set((id(trainer), target))
        try:
            return validate(*args, **kwargs)
        finally:
            _active.reset(token)


@_process.never_raise(None)
def _route(trainer: object, inputs: Sequence[Any], outputs: Sequence[Any], scores: Sequence[Any]) -> None:
    """Replaces verl's ``_maybe_log_val_generations``: send every generation, the sampler keeps k."""
    active = _active.get()
    if active is not None and active[0] == id(trainer):
        vg.log_generations(inputs, outputs, scores)  # step, source and k from the block
        return
    target = _target(trainer)
    if target is not None:  # called outside _validate: a block of its own
        log_val_generations(
            inputs,
            outputs,
            scores,
            step=target.step,  # type: ignore[arg-type]  # None: counted as a missing step
            source=target.source,
            count=target.count,
        )


class ValGenerationsMixin:
    """Put first in a verl trainer's bases (``RayPPOTrainer`` or v1 ``PPOTrainer`` subclasses).

    It does what ``install()`` does to verl's classes, for this subclass only. Set
    ``valgen_source`` to name the part (default ``trainer``, or ``rollouter`` when it validates
    for a fully-async trainer). No ``__init__`` is involved.
    """

    valgen_source: ClassVar[str | None] = None

    def _validate(self, *args: Any, **kwargs: Any) -> Any:
        """Run verl's ``_validate`` inside one validation block at the trainer's step."""
        return _validate_in_block(super()._validate, self, args, kwargs)  # type: ignore[misc]

    def _maybe_log_val_generations(self, inputs: Sequence[Any], outputs: Sequence[Any], scores: Sequence[Any]) -> None:
        """Replace verl's hook: send every generation; the sampler keeps ``log_val_generations``."""
        _route(self, inputs, outputs, scores)


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


def log_val_generations(
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    scores: Sequence[Any],
    *,
    step: int,
    source: str = "trainer",
    ground_truths: Sequence[Any] | None = None,
    sample_ids: Sequence[Any] | None = None,
    data_sources: Sequence[Any] | None = None,
    sources_expected: int | None = None,
    count: int | None = None,
    extra: Mapping[str, Sequence[Any]] | None = None,
) -> bool:
    """Emit one validation's generations at the trainer's ``step`` and end this source's part.

    ``extra`` takes verl's ``reward_extra_info`` (``{name: one value per generation}``) as it is:
    each column travels as ``valgen.extra.<name>`` (``vg.log_generations`` has the rules). An
    empty column is left out, as verl's own check allows one (``len 0 or n``).
    Returns whether the step's records were confirmed sent (never raises).
    """
    with vg.validation(step=step, source=source, sources_expected=sources_expected, count=count) as block:
        vg.log_generations(
            inputs,
            outputs,
            scores,
            ground_truths=ground_truths,
            sample_ids=sample_ids,
            data_sources=data_sources,
            extra=_filled_columns(extra),
        )
    return bool(block.flushed)


def _filled_columns(extra: Any) -> Any:
    """The extra columns without the empty ones: verl's reward_extra_info may hold columns of length 0."""
    try:
        if isinstance(extra, Mapping):
            return {name: values for name, values in extra.items() if not isinstance(values, Sized) or len(values)}
    except Exception:  # an odd mapping: log_generations judges it as it is, and never raises
        _logger.debug("otel_valgen: could not filter the extra columns", exc_info=True)
    return extra


def _get_param_version(trainer: Any) -> Any:
    try:
        return trainer.__dict__["current_param_version"]
    except KeyError:
        raise AttributeError("current_param_version") from None


def _set_param_version(trainer: Any, value: Any) -> None:
    trainer.__dict__["current_param_version"] = value
    _trainer_step.publish(value)


def _patch(cls: type, publishes_step: bool) -> None:
    """Give ``cls`` (one of verl's trainer bases) otel-valgen's validation hooks, once."""
    if cls.__dict__.get("_otel_valgen_patched"):
        return
    original = cls.__dict__.get("_validate")
    if not callable(original) or not callable(cls.__dict__.get("_maybe_log_val_generations")):
        _logger.warning(
            "otel_valgen: %s.%s has no _validate/_maybe_log_val_generations; this verl is not supported (0.9.x is)",
            cls.__module__,
            cls.__qualname__,
        )
        return

    @functools.wraps(original)
    def _validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _validate_in_block(functools.partial(original, self), self, args, kwargs)

    def _maybe_log_val_generations(self: Any, inputs: Any, outputs: Any, scores: Any) -> None:
        _route(self, inputs, outputs, scores)

    cls._validate = _validate  # type: ignore[attr-defined]
    cls._maybe_log_val_generations = _maybe_log_val_generations  # type: ignore[attr-defined]
    if publishes_step and "current_param_version" not in cls.__dict__:
        cls.current_param_version = property(_get_param_version, _set_param_version)  # type: ignore[attr-defined]
    cls._otel_valgen_patched = True  # type: ignore[attr-defined]
    _logger.info("otel_valgen: verl's %s.%s sends its validation generations", cls.__module__, cls.__qualname__)


def _on_import(module: Any, class_name: str, publishes_step: bool) -> None:
    try:
        cls = getattr(module, class_name, None)
        if isinstance(cls, type):
            _patch(cls, publishes_step)
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not hook verl's %s.%s", module.__name__, class_name)


_installed = False


def install() -> bool:
    """Hook verl's trainers when (or if already) imported; returns whether hooks are in place.

    Idempotent and cheap: nothing of verl is imported here. ``OTEL_VALGEN_VERL=false`` turns
    it off.
    """
    global _installed
    if not env_bool(OTEL_VALGEN_VERL, True):
        return False
    if _installed:
        return True
    try:
        import wrapt

        for module_name, (class_name, publishes_step) in PATCHED_CLASSES.items():
            hook = functools.partial(_on_import, class_name=class_name, publishes_step=publishes_step)
            wrapt.register_post_import_hook(hook, module_name)
    except Exception:
        _logger.exception("otel_valgen: could not install the verl integration")
        return False
    _installed = True
    return True

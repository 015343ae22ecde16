"""The validation hooks: ``_validate`` in one block at the trainer's step, every generation sent.

``patch`` gives verl's trainer bases (``_layout.PATCHED_CLASSES``) these hooks;
``ValGenerationsMixin`` gives them to one subclass.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import sys
from collections.abc import Callable, Mapping, Sequence, Sized
from types import FrameType
from typing import Any, ClassVar

import otel_valgen as vg
from otel_valgen import _identity, _integration, _process, contract
from otel_valgen.integrations import _trainer_step
from otel_valgen.integrations.verl import _rows
from otel_valgen.integrations.verl._layout import (
    HOOKED_METHODS,
    LOG_PARAMETERS,
    parameter_names,
    untested_note,
    verl_version,
)

_logger = logging.getLogger("otel_valgen")


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one validation's generations go: the trainer's step, the part's name, k."""

    step: int | None
    source: str
    count: int | None


# The validation block this context is in: (id of the trainer object, its target).
active: contextvars.ContextVar[tuple[int, Target] | None] = contextvars.ContextVar(
    "otel_valgen_verl_validation", default=None
)

# hooked class -> {method name: verl's own function}, for repairing Ray actor classes
originals: dict[type, dict[str, Callable[..., Any]]] = {}
# verl's trainer bases that patch left as verl made them (drift), for the unrouted-table warning
left_unhooked: set[type] = set()

_warned: set[str] = set()


def warn_once(key: str, message: str, *args: Any) -> None:
    """Log ``message`` at WARNING the first time ``key`` comes up in this process."""
    if key not in _warned:
        _warned.add(key)
        _logger.warning(message, *args)


def _log_count(trainer: object) -> int | None:
    """The ``trainer.log_val_generations`` of verl's config, or None when the object has no such config."""
    try:
        count = trainer.config.trainer.log_val_generations  # type: ignore[attr-defined]
    except Exception:
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def target(trainer: object) -> Target | None:
    """The step, source and k of a validation by ``trainer``; None when verl disabled logging."""
    count = _log_count(trainer)
    if count == 0:
        return None
    named = getattr(type(trainer), "valgen_source", None)
    own_version = getattr(trainer, "__dict__", {}).get("current_param_version")
    if isinstance(own_version, int):  # a fully-async trainer validating by itself
        return Target(own_version, named or "trainer", count)
    published = _trainer_step.read()
    if published is not None:  # a part validating for the fully-async trainer of this job, in its runs
        _identity.adopt_trainer_run(published.run_id, published.resource)
        return Target(published.step, named or "rollouter", count)
    step = getattr(trainer, "global_steps", None)
    return Target(step if isinstance(step, int) else None, named or "trainer", count)


def validate_in_block(validate: Callable[..., Any], trainer: object, args: Any, kwargs: Any) -> Any:
    """Run verl's ``_validate`` inside one validation block at the trainer's step."""
    current = active.get()
    if current is not None and current[0] == id(trainer):  # already inside (mixin over a patched base)
        return validate(*args, **kwargs)
    found = _process.never_raise(None)(target)(trainer)
    if found is None:
        return validate(*args, **kwargs)
    with routed(), vg.validation(step=found.step, source=found.source, count=found.count):  # type: ignore[arg-type]
        token = active.set((id(trainer), found))
        tallies = _rows.open_tallies(trainer)
        try:
            return validate(*args, **kwargs)
        finally:
            _rows.close_tallies(tallies)
            active.reset(token)


@_process.never_raise(None)
def route(
    trainer: object,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    scores: Sequence[Any],
    caller: FrameType | None = None,
) -> None:
    """Replaces verl's ``_maybe_log_val_generations``: send every generation, the sampler keeps k.

    ``caller`` is the frame that called the hook: verl's ``_validate``, whose lists give each
    generation its ground truth, data source, reward columns, response length and truncation.
    """
    row = _rows.validation_row(trainer, caller, inputs, outputs)
    del caller
    inputs, outputs = row.pop("inputs", inputs), row.pop("outputs", outputs)  # conversations, when verl has them
    current = active.get()
    if current is not None and current[0] == id(trainer):
        vg.log_generations(inputs, outputs, scores, **row)  # step, source and k from the block
        return
    found = target(trainer)
    if found is not None:  # called outside _validate: a block of its own
        with routed():
            log_val_generations(
                inputs,
                outputs,
                scores,
                step=found.step,  # type: ignore[arg-type]  # None: counted as a missing step
                source=found.source,
                count=found.count,
                **row,
            )


def routed() -> contextlib.AbstractContextManager[None]:
    """Parts opened in this context say on their records that this integration routed them."""
    return _integration.marked({contract.INTEGRATION: f"verl/{verl_version()}"})


class ValGenerationsMixin:
    """Put first in a verl trainer's bases (``RayPPOTrainer`` or v1 ``PPOTrainer`` subclasses).

    It does what ``install()`` does to verl's classes, for this subclass only. Set
    ``valgen_source`` to name the part (default ``trainer``, or ``rollouter`` when it validates
    for a fully-async trainer). No ``__init__`` is involved.
    """

    valgen_source: ClassVar[str | None] = None

    def _validate(self, *args: Any, **kwargs: Any) -> Any:
        """Run verl's ``_validate`` inside one validation block at the trainer's step."""
        return validate_in_block(super()._validate, self, args, kwargs)  # type: ignore[misc]

    def _maybe_log_val_generations(self, inputs: Sequence[Any], outputs: Sequence[Any], scores: Sequence[Any]) -> None:
        """Replace verl's hook: send every generation; the sampler keeps ``log_val_generations``."""
        route(self, inputs, outputs, scores, sys._getframe(1))


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
    response_lengths: Sequence[Any] | None = None,
    truncated: Sequence[Any] | None = None,
    tool_rewards: Sequence[Any] | None = None,
    turn_scores: Sequence[Any] | None = None,
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
            extra=filled_columns(extra),
            response_lengths=response_lengths,
            truncated=truncated,
            tool_rewards=tool_rewards,
            turn_scores=turn_scores,
        )
    return bool(block.flushed)


def filled_columns(extra: Any) -> Any:
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


def _log_arguments(
    original: Callable[..., Any], trainer: object, args: Any, kwargs: Any
) -> tuple[Any, Any, Any] | None:
    """``(inputs, outputs, scores)`` of a call to verl's hook, or None when the call does not bind."""
    try:
        bound = inspect.signature(original).bind(trainer, *args, **kwargs)
        return bound.arguments["inputs"], bound.arguments["outputs"], bound.arguments["scores"]
    except Exception:
        return None


def patch(cls: type, publishes_step: bool) -> None:
    """Give ``cls`` (one of verl's trainer bases) otel-valgen's validation hooks, once.

    Anything unexpected (a method renamed, another signature) leaves the class as verl made it
    and logs one WARNING naming what was and was not hooked.
    """
    if cls.__dict__.get("_otel_valgen_patched"):
        return
    name = f"{cls.__module__}.{cls.__qualname__}"
    original = cls.__dict__.get("_validate")
    original_log = cls.__dict__.get("_maybe_log_val_generations")
    missing = [method for method in HOOKED_METHODS if not callable(cls.__dict__.get(method))]
    if missing or original is None or original_log is None:
        _logger.warning(
            "otel_valgen: verl %s: %s has no %s; not hooked: its validations keep verl's own table%s",
            verl_version(),
            name,
            "/".join(missing),
            untested_note() or " (this verl is not supported)",
        )
        left_unhooked.add(cls)
        return
    parameters = parameter_names(original_log)
    if parameters != LOG_PARAMETERS:
        _logger.warning(
            "otel_valgen: verl %s: %s._maybe_log_val_generations takes %s, not %s; not hooked: its validations "
            "keep verl's own table%s",
            verl_version(),
            name,
            parameters,
            LOG_PARAMETERS,
            untested_note(),
        )
        left_unhooked.add(cls)
        return

    @functools.wraps(original)
    def _validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        return validate_in_block(functools.partial(original, self), self, args, kwargs)

    @functools.wraps(original_log)
    def _maybe_log_val_generations(self: Any, *args: Any, **kwargs: Any) -> Any:
        parts = _log_arguments(original_log, self, args, kwargs)
        if parts is None:  # a call shape this hook does not know: verl's own behaviour
            warn_once(
                "log_call_shape",
                "otel_valgen: %s._maybe_log_val_generations got an unknown call; verl's own table used",
                name,
            )
            return original_log(self, *args, **kwargs)
        route(self, *parts, sys._getframe(1))
        return None

    cls._validate = _validate  # type: ignore[attr-defined]
    cls._maybe_log_val_generations = _maybe_log_val_generations  # type: ignore[attr-defined]
    hooked = list(HOOKED_METHODS)
    if publishes_step and "current_param_version" not in cls.__dict__:
        cls.current_param_version = property(_get_param_version, _set_param_version)  # type: ignore[attr-defined]
        hooked.append("current_param_version")
    cls._otel_valgen_patched = True  # type: ignore[attr-defined]
    originals[cls] = {"_validate": original, "_maybe_log_val_generations": original_log}
    _rows.watch_batches(sys.modules.get(cls.__module__))
    note = untested_note()
    if note:
        _logger.warning("otel_valgen: hooked %s (%s)%s", name, ", ".join(hooked), note)
    else:
        _logger.info("otel_valgen: verl's %s sends its validation generations", name)


def on_import(module: Any, class_name: str, publishes_step: bool) -> None:
    """The post-import hook of a module of ``_layout.PATCHED_CLASSES``."""
    try:
        cls = getattr(module, class_name, None)
        if isinstance(cls, type):
            patch(cls, publishes_step)
        else:
            _logger.warning(
                "otel_valgen: verl %s: %s has no class %s; not hooked%s",
                verl_version(),
                module.__name__,
                class_name,
                untested_note(),
            )
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not hook verl's %s.%s", module.__name__, class_name)

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
  value and the trainer's tracker runs (``_trainer_step``), so that the fully-async rollouter
  validates at the trainer's step, into the trainer's runs.
- Training rollouts (``OTEL_VALGEN_ROLLOUT_COUNT`` > 0; off, the hooks only check that number):
  each training step's final batch is sent with ``vg.log_rollouts`` (``ROLLOUT_HOOKS``,
  ``integrations.verl_rollouts``), whether or not ``trainer.rollout_data_dir`` is set.
- ``verl.utils.tracking.ValidationGenerationsLogger.log`` (verl's own table, which the hooks never
  call) still writes verl's table, but first says why this validation did not reach otel-valgen:
  one WARNING per cause, ``stats()["verl_tables_unrouted"]``, and the step's part marked
  ``valgen.integration=unhooked`` (docs/architecture.md). This one stays even with
  ``OTEL_VALGEN_VERL=false``, which only warns.

Parts the integration opens carry ``valgen.integration=verl/<verl version>``.

Explicit, for code that writes its own trainer subclass: ``ValGenerationsMixin``,
``ValidationGenerationsLogger`` (verl's call shape) and ``log_val_generations``.

None of this needs ``__init__`` to have run: a subclass that skips ``super().__init__()``
still logs (verl issues #6438, #4794, #5988).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence, Sized
from types import FrameType
from typing import Any, ClassVar, Final

import otel_valgen as vg
from otel_valgen import _identity, _integration, _process, _stats, contract
from otel_valgen._env import OTEL_VALGEN_ROLLOUT_COUNT, OTEL_VALGEN_VERL, env_bool
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
    if published is not None:  # a part validating for the fully-async trainer of this job, in its runs
        _identity.adopt_trainer_run(published.run_id, published.resource)
        return _Target(published.step, named or "rollouter", count)
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
    with _routed(), vg.validation(step=target.step, source=target.source, count=target.count):  # type: ignore[arg-type]
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
        with _routed():
            log_val_generations(
                inputs,
                outputs,
                scores,
                step=target.step,  # type: ignore[arg-type]  # None: counted as a missing step
                source=target.source,
                count=target.count,
            )


def _routed() -> contextlib.AbstractContextManager[None]:
    """Parts opened in this context say on their records that this integration routed them."""
    return _integration.marked({contract.INTEGRATION: f"verl/{_verl_version()}"})


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


HOOKED_METHODS: Final = ("_validate", "_maybe_log_val_generations")
"""The methods of verl's trainer bases that ``install()`` replaces."""

TESTED_VERL_VERSIONS: Final = frozenset({"0.9.1"})
"""The verl releases the hooks are tested against (tests/verl)."""

_LOG_PARAMETERS: Final = ("self", "inputs", "outputs", "scores")

# hooked class -> {method name: verl's own function}, for repairing Ray actor classes
_originals: dict[type, dict[str, Callable[..., Any]]] = {}
# verl's trainer bases that _patch left as verl made them (drift), for the unrouted-table warning
_left_unhooked: set[type] = set()


def _verl_version() -> str:
    """The installed verl's version, or ``unknown``."""
    try:
        import verl

        return str(verl.__version__)
    except Exception:
        return "unknown"


def _untested_note() -> str:
    """`` (verl X is untested; tested: ...)`` when the installed verl is not a tested release, else empty."""
    version = _verl_version()
    if version in TESTED_VERL_VERSIONS:
        return ""
    return f" (verl {version} is untested; tested: {', '.join(sorted(TESTED_VERL_VERSIONS))})"


def _parameter_names(function: Callable[..., Any]) -> tuple[str, ...] | None:
    """The parameter names of ``function``, without the ``_ray_trace_ctx`` that Ray's tracing adds."""
    try:
        return tuple(name for name in inspect.signature(function).parameters if name != "_ray_trace_ctx")
    except (TypeError, ValueError):
        return None


def _log_arguments(
    original: Callable[..., Any], trainer: object, args: Any, kwargs: Any
) -> tuple[Any, Any, Any] | None:
    """``(inputs, outputs, scores)`` of a call to verl's hook, or None when the call does not bind."""
    try:
        bound = inspect.signature(original).bind(trainer, *args, **kwargs)
        return bound.arguments["inputs"], bound.arguments["outputs"], bound.arguments["scores"]
    except Exception:
        return None


def _patch(cls: type, publishes_step: bool) -> None:
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
            _verl_version(),
            name,
            "/".join(missing),
            _untested_note() or " (this verl is not supported)",
        )
        _left_unhooked.add(cls)
        return
    parameters = _parameter_names(original_log)
    if parameters != _LOG_PARAMETERS:
        _logger.warning(
            "otel_valgen: verl %s: %s._maybe_log_val_generations takes %s, not %s; not hooked: its validations "
            "keep verl's own table%s",
            _verl_version(),
            name,
            parameters,
            _LOG_PARAMETERS,
            _untested_note(),
        )
        _left_unhooked.add(cls)
        return

    @functools.wraps(original)
    def _validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _validate_in_block(functools.partial(original, self), self, args, kwargs)

    @functools.wraps(original_log)
    def _maybe_log_val_generations(self: Any, *args: Any, **kwargs: Any) -> Any:
        parts = _log_arguments(original_log, self, args, kwargs)
        if parts is None:  # a call shape this hook does not know: verl's own behaviour
            _warn_once(
                "log_call_shape",
                "otel_valgen: %s._maybe_log_val_generations got an unknown call; verl's own table used",
                name,
            )
            return original_log(self, *args, **kwargs)
        _route(self, *parts)
        return None

    cls._validate = _validate  # type: ignore[attr-defined]
    cls._maybe_log_val_generations = _maybe_log_val_generations  # type: ignore[attr-defined]
    hooked = list(HOOKED_METHODS)
    if publishes_step and "current_param_version" not in cls.__dict__:
        cls.current_param_version = property(_get_param_version, _set_param_version)  # type: ignore[attr-defined]
        hooked.append("current_param_version")
    cls._otel_valgen_patched = True  # type: ignore[attr-defined]
    _originals[cls] = {"_validate": original, "_maybe_log_val_generations": original_log}
    note = _untested_note()
    if note:
        _logger.warning("otel_valgen: hooked %s (%s)%s", name, ", ".join(hooked), note)
    else:
        _logger.info("otel_valgen: verl's %s sends its validation generations", name)


_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: Any) -> None:
    """Log ``message`` at WARNING the first time ``key`` comes up in this process."""
    if key not in _warned:
        _warned.add(key)
        _logger.warning(message, *args)


def _wrapped_chain(function: Any) -> list[Any]:
    """``function`` and every function it wraps (``__wrapped__``), outermost first."""
    chain: list[Any] = []
    while function is not None and len(chain) < 32 and not any(function is seen for seen in chain):
        chain.append(function)
        function = getattr(function, "__wrapped__", None)
    return chain


def _actor_classes() -> list[Any]:
    """The Ray actor classes (``@ray.remote`` classes) that the modules imported so far hold."""
    actor_module = sys.modules.get("ray.actor")
    actor_class = getattr(actor_module, "ActorClass", None)
    if actor_class is None:
        return []
    found: dict[int, Any] = {}
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for value in list(namespace.values()):
            if issubclass(type(value), actor_class):  # type(): no __class__ lookup on lazy module objects
                found[id(value)] = value
    return list(found.values())


def repair_actor_classes() -> list[str]:
    """Point Ray actor classes made before ``install()`` at the hooked methods; returns their names.

    ``@ray.remote`` copies every inherited method into the actor class it makes, each copy
    wrapping the function of that moment: verl's own ``_validate`` when the class was decorated
    before the hooks were in place (``fully_async_main`` imports its actor classes before
    ``ray.init``). Such copies are removed, so the class inherits the hooked method, and Ray's
    tracing wrapper is put back. Copies of a subclass's own override are left alone.
    """
    repaired: list[str] = []
    for actor in _actor_classes():
        modified = getattr(getattr(actor, "__ray_metadata__", None), "modified_class", None)
        if not isinstance(modified, type):
            continue
        changed = False
        for base, originals in [*_originals.items(), *_rollout_originals.items()]:
            if not issubclass(modified, base):
                continue
            for method, original in originals.items():
                current = getattr(base, method, None)
                chain = _wrapped_chain(modified.__dict__.get(method))
                if chain and any(f is original for f in chain) and not any(f is current for f in chain):
                    delattr(modified, method)
                    changed = True
        if changed:
            _reinject_tracing(modified)
            user_class = getattr(modified, "__ray_actor_class__", modified)
            repaired.append(f"{user_class.__module__}.{user_class.__qualname__}")
    for name in repaired:
        _logger.info("otel_valgen: the Ray actor class %s now sends its validation generations", name)
    return repaired


def _reinject_tracing(modified: type) -> None:
    """Wrap the methods that are inherited again the way ``@ray.remote`` wraps them (Ray tracing)."""
    try:
        from ray.util.tracing.tracing_helper import _inject_tracing_into_class

        _inject_tracing_into_class(modified)  # type: ignore[no-untyped-call]
    except Exception:  # the hooked methods are inherited and work untraced
        _logger.debug("otel_valgen: could not re-add Ray's tracing wrappers to %s", modified, exc_info=True)


def _on_import(module: Any, class_name: str, publishes_step: bool) -> None:
    try:
        cls = getattr(module, class_name, None)
        if isinstance(cls, type):
            _patch(cls, publishes_step)
        else:
            _logger.warning(
                "otel_valgen: verl %s: %s has no class %s; not hooked%s",
                _verl_version(),
                module.__name__,
                class_name,
                _untested_note(),
            )
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not hook verl's %s.%s", module.__name__, class_name)


# -- training rollouts: each training step's final batch, in verl's three trainers --------------------


@dataclasses.dataclass(frozen=True)
class _RolloutHook:
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
    "verl.trainer.ppo.ray_trainer": _RolloutHook(
        "RayPPOTrainer", "_update_actor", ("self", "batch"), "fit's per-step actor update"
    ),
    # fit's step 5, every step, before step 7 clears the batch from TransferQueue.
    "verl.trainer.ppo.v1.trainer_base": _RolloutHook(
        "PPOTrainer",
        "_compute_metrics",
        ("self", "batch", "metrics", "timing_raw", "global_steps", "epoch"),
        "fit's per-step metrics",
    ),
    # fit_step calls it every step, with or without rollout_data_dir (FullyAsyncTrainer inherits it).
    "verl.experimental.separation.ray_trainer": _RolloutHook(
        "SeparateRayPPOTrainer", "_fit_dump_data", ("self", "batch"), "fit_step's dump of the step's batch"
    ),
}
"""verl's trainer classes whose method sends each training step's batch as rollouts, by module."""

# hooked class -> {method name: verl's own function}, for repairing Ray actor classes
_rollout_originals: dict[type, dict[str, Callable[..., Any]]] = {}


def _on_rollout_import(module: Any) -> None:
    try:
        hook = ROLLOUT_HOOKS[module.__name__]
        cls = getattr(module, hook.class_name, None)
        if not isinstance(cls, type):
            _rollout_hook_missing(f"{module.__name__}.{hook.class_name}", "is gone")
            return
        _patch_rollouts(cls, hook)
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not hook the training rollouts of verl's %s", module.__name__)


def _patch_rollouts(cls: type, hook: _RolloutHook) -> None:
    """Make ``cls``'s hook method send the step's batch after verl's own code, once; drift: left as it is, loudly."""
    if cls in _rollout_originals:
        return
    name = f"{cls.__module__}.{cls.__qualname__}.{hook.method}"
    original = cls.__dict__.get(hook.method)
    if not callable(original):
        _rollout_hook_missing(name, "is missing")
        return
    parameters = _parameter_names(original)
    if parameters != hook.parameters:
        _rollout_hook_missing(name, f"takes {parameters}, not {hook.parameters}")
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        _send_rollouts(hook.method, signature, self, args, kwargs)
        return result

    setattr(cls, hook.method, hooked)
    _rollout_originals[cls] = {hook.method: original}
    _logger.info("otel_valgen: verl's %s sends each training step's rollouts (%s)", name, hook.why)


@_process.never_raise(None)
def _send_rollouts(method: str, signature: inspect.Signature, trainer: Any, args: Any, kwargs: Any) -> None:
    """Send the batch of one call of a hooked method; nothing (not even binding) while rollouts are off."""
    # Imported here: it needs numpy, which verl brings and a plain otel-valgen install does not.
    from otel_valgen.integrations import verl_rollouts

    if not verl_rollouts.rollouts_on():
        return
    bound = signature.bind(trainer, *args, **kwargs).arguments
    if method == "_update_actor":
        if not hasattr(type(trainer), "_fit_dump_data"):  # a separation trainer sends from _fit_dump_data
            verl_rollouts.send_legacy_step(trainer, bound["batch"])
    elif method == "_compute_metrics":
        verl_rollouts.send_v1_step(trainer, bound["batch"], bound["global_steps"])
    else:
        verl_rollouts.send_separation_step(trainer, bound["batch"])


def _rollout_hook_missing(name: str, problem: str) -> None:
    """Count a rollout hook point verl no longer has, and say so (WARNING when rollouts are asked for)."""
    _process.counters.add(_stats.VERL_ROLLOUT_HOOKS_MISSING)
    level = logging.WARNING if _rollouts_asked() else logging.INFO
    _logger.log(
        level,
        "otel_valgen: verl %s: %s %s; not hooked: its training rollouts are not sent%s. Fix: use a verl release "
        "otel-valgen is tested with (%s), or send each step's batch with "
        "otel_valgen.integrations.verl_rollouts.send_rollout_batch",
        _verl_version(),
        name,
        problem,
        _untested_note(),
        ", ".join(sorted(TESTED_VERL_VERSIONS)),
    )


def _rollouts_asked() -> bool:
    """Whether this process is configured to send rollouts (without configuring it)."""
    emitter = _process.current_emitter()
    if emitter is not None:
        return emitter.settings.rollout_count > 0
    try:
        return int(os.environ.get(OTEL_VALGEN_ROLLOUT_COUNT, "0")) > 0
    except ValueError:
        return False


_installed = False
_disabled = False  # install() found OTEL_VALGEN_VERL=false before any hook was in place


def install() -> bool:
    """Hook verl's trainers when (or if already) imported; returns whether hooks are in place.

    Idempotent and cheap: nothing of verl is imported here. ``OTEL_VALGEN_VERL=false`` turns
    it off; verl's own validation table still says, when it runs, that nothing reaches otel-valgen.
    """
    global _installed, _disabled
    _watch_tables()
    if not env_bool(OTEL_VALGEN_VERL, True):
        _disabled = not _installed
        return False
    if _installed:
        _repair_quietly()
        return True
    try:
        import wrapt

        for module_name, (class_name, publishes_step) in PATCHED_CLASSES.items():
            hook = functools.partial(_on_import, class_name=class_name, publishes_step=publishes_step)
            wrapt.register_post_import_hook(hook, module_name)
        for module_name in ROLLOUT_HOOKS:
            wrapt.register_post_import_hook(_on_rollout_import, module_name)
    except Exception:
        _logger.exception("otel_valgen: could not install the verl integration")
        return False
    _installed = True
    _disabled = False
    _repair_quietly()
    return True


def _repair_quietly() -> None:
    try:
        repair_actor_classes()
    except Exception:
        _logger.exception("otel_valgen: could not repair Ray actor classes made before the verl hooks")


# -- verl's own validation table: loud when a validation does not reach otel-valgen ----------------

TABLE_MODULE: Final = "verl.utils.tracking"
TABLE_CLASS: Final = "ValidationGenerationsLogger"
"""verl's table writer, which its own ``_maybe_log_val_generations`` calls; hooked ones never do."""

DISABLED: Final = "disabled"
"""The reason of an unrouted table when ``OTEL_VALGEN_VERL=false``: warned about, no records."""

_watching = False


@dataclasses.dataclass(frozen=True)
class _Unrouted:
    """Why verl's own table ran: a reason of ``contract.UNHOOKED_REASONS`` (or DISABLED), the cause, the fix."""

    reason: str
    cause: str
    fix: str


def _watch_tables() -> None:
    """Hook verl's table writer when (or if already) imported, once per process."""
    global _watching
    if _watching:
        return
    try:
        import wrapt

        wrapt.register_post_import_hook(_on_table_import, TABLE_MODULE)
        _watching = True
    except Exception:
        _logger.exception("otel_valgen: could not watch verl's validation table")


def _on_table_import(module: Any) -> None:
    try:
        cls = getattr(module, TABLE_CLASS, None)
        if isinstance(cls, type):
            _watch_table(cls)
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not watch verl's %s.%s", TABLE_MODULE, TABLE_CLASS)


def _watch_table(cls: type) -> None:
    """Make ``cls.log`` report, before it writes verl's table, that the validation did not reach otel-valgen."""
    original = cls.__dict__.get("log")
    if cls.__dict__.get("_otel_valgen_watched") or not callable(original):
        return

    @functools.wraps(original)
    def log(self: Any, *args: Any, **kwargs: Any) -> Any:
        _report_unrouted(sys._getframe(1), _table_step(original, self, args, kwargs))
        return original(self, *args, **kwargs)

    cls.log = log  # type: ignore[attr-defined]
    cls._otel_valgen_watched = True  # type: ignore[attr-defined]


def _table_step(original: Callable[..., Any], table: object, args: Any, kwargs: Any) -> Any:
    """The ``step`` of a call to verl's table writer, or None when the call does not bind."""
    try:
        return inspect.signature(original).bind(table, *args, **kwargs).arguments.get("step")
    except Exception:
        return None


@_process.never_raise(None)
def _report_unrouted(frame: FrameType | None, step: Any) -> None:
    """Count a run of verl's own table, warn once per reason, and mark the step's part unhooked."""
    trainer, method = _table_caller(frame)
    del frame
    why = _why_unrouted(trainer, method)
    _process.counters.add(_stats.VERL_TABLES_UNROUTED)
    _warn_once(
        f"unrouted:{why.reason}",
        "otel_valgen: verl's own validation table ran (step %s), so this validation's generations do not "
        "reach otel-valgen: %s. Fix: %s (docs/troubleshooting.md)",
        step,
        why.cause,
        why.fix,
    )
    if why.reason != DISABLED:
        _send_unhooked(trainer, step, why.reason)


def _is_verl_trainer(candidate: object) -> bool:
    """Whether ``candidate`` is an instance of one of verl's trainer bases (hooked or not)."""
    bases = {(module, name) for module, (name, _) in PATCHED_CLASSES.items()}
    return any((cls.__module__, cls.__qualname__) in bases for cls in type(candidate).__mro__)


def _table_caller(frame: FrameType | None) -> tuple[object | None, str]:
    """The verl trainer whose method called verl's table (walking out from ``frame``), and that method's name."""
    for _ in range(8):
        if frame is None:
            break
        candidate = frame.f_locals.get("self")
        if candidate is not None and _is_verl_trainer(candidate):
            return candidate, frame.f_code.co_name
        frame = frame.f_back
    return None, ""


def _class_name(cls: type) -> str:
    """``module.Class``; a Ray actor class by the class it was made from."""
    cls = getattr(cls, "__ray_actor_class__", cls)
    return f"{cls.__module__}.{cls.__qualname__}"


def _why_unrouted(trainer: object | None, method: str) -> _Unrouted:
    """Why verl's table ran for ``trainer`` (from its ``method``) instead of otel-valgen's hook."""
    if _disabled:
        return _Unrouted(
            DISABLED,
            f"{OTEL_VALGEN_VERL}=false turned the verl integration off",
            f"unset {OTEL_VALGEN_VERL} (or set it to true) in the job's environment",
        )
    mro = type(trainer).__mro__ if trainer is not None else ()
    base = next((cls for cls in mro if cls in _originals), None)
    if base is None:
        return _why_not_hooked(mro)
    # The class whose own code called the table; a closure or helper of unknown name: the trainer's class.
    return _why_bypassed(base, next((cls for cls in mro if method in cls.__dict__), type(trainer)), method)


def _why_not_hooked(mro: tuple[type, ...]) -> _Unrouted:
    """The cause when no class of the trainer's ``mro`` got the hooks."""
    drifted = next((cls for cls in mro if cls in _left_unhooked), None)
    if drifted is not None:
        return _Unrouted(
            "drift",
            f"verl {_verl_version()}'s {_class_name(drifted)} was left unhooked (see the WARNING that names it)",
            f"use a verl release otel-valgen is tested with ({', '.join(sorted(TESTED_VERL_VERSIONS))}), or "
            "send the generations yourself with otel_valgen.integrations.verl.log_val_generations",
        )
    return _Unrouted(
        "unknown",
        "it was not called by a verl trainer otel-valgen hooked",
        "send the generations with otel_valgen.integrations.verl.log_val_generations, or put "
        "ValGenerationsMixin first in the trainer's bases",
    )


def _why_bypassed(base: type, owner: type, method: str) -> _Unrouted:
    """The cause when ``base`` is hooked but ``owner``'s ``method`` called the table."""
    if owner is base:  # the hook itself fell back to verl's method
        return _Unrouted(
            "call_shape",
            f"{_class_name(base)}.{method} got a call it does not know (see the WARNING about it)",
            f"call it as verl {', '.join(sorted(TESTED_VERL_VERSIONS))} does: (inputs, outputs, scores)",
        )
    if any(function is _originals[base].get(method) for function in _wrapped_chain(owner.__dict__.get(method))):
        return _Unrouted(
            "actor_copy",
            f"the Ray actor class {_class_name(owner)} holds a copy of verl's own {method} that otel-valgen "
            "could not repair",
            "run otel_valgen.integrations.verl.install() before the module that makes the actor class is "
            "imported (otel-valgen's Ray setup hook does, docs/verl.md)",
        )
    return _Unrouted(
        "override",
        f"{_class_name(owner)} overrides {method} and calls verl's table itself",
        f"put ValGenerationsMixin first in the bases of {owner.__qualname__}, or call super().{method}(...) there",
    )


def _send_unhooked(trainer: object | None, step: Any, reason: str) -> None:
    """Mark the step's part of this process unhooked: its open block, else a part with no generation."""
    marks = {contract.INTEGRATION: contract.INTEGRATION_UNHOOKED, contract.UNHOOKED_REASON: reason}
    active = _active.get()
    if active is not None and (trainer is None or active[0] == id(trainer)) and _process.mark_open_block(marks):
        return  # the block _validate opened ends with the marks
    target = _target(trainer) if trainer is not None else None
    source = target.source if target is not None else _source_name(trainer)
    with _integration.marked(marks), vg.validation(step=step, source=source):
        pass  # its start and end records, with no generation


def _source_name(trainer: object | None) -> str:
    """The part's name when ``_target`` gives none: ``rollouter`` when the class says so, else ``trainer``."""
    return "rollouter" if "rollouter" in type(trainer).__name__.lower() else "trainer"

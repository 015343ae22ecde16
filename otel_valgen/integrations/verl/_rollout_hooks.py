"""Training rollouts: each training step's final batch, from verl's three trainers (``_layout.ROLLOUT_HOOKS``)."""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable
from typing import Any, Final

from otel_valgen import _process, _stats
from otel_valgen._env import OTEL_VALGEN_ROLLOUT_COUNT
from otel_valgen.integrations.verl import _correction, _v1_capture
from otel_valgen.integrations.verl._layout import (
    ROLLOUT_HOOKS,
    RolloutHook,
    parameter_names,
    tested_versions,
    untested_note,
    verl_version,
)

_logger = logging.getLogger("otel_valgen")

# hooked class -> {method name: verl's own function}, for repairing Ray actor classes
originals: dict[type, dict[str, Callable[..., Any]]] = {}


def on_import(module: Any) -> None:
    """The post-import hook of a module of ``ROLLOUT_HOOKS``."""
    try:
        hook = ROLLOUT_HOOKS[module.__name__]
        cls = getattr(module, hook.class_name, None)
        if not isinstance(cls, type):
            _hook_missing(f"{module.__name__}.{hook.class_name}", "is gone")
            return
        patch(cls, hook)
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not hook the training rollouts of verl's %s", module.__name__)


def patch(cls: type, hook: RolloutHook) -> None:
    """Make ``cls``'s hook method send the step's batch after verl's own code, once; drift: left as it is, loudly."""
    if cls in originals:
        return
    name = f"{cls.__module__}.{cls.__qualname__}.{hook.method}"
    original = cls.__dict__.get(hook.method)
    if not callable(original):
        _hook_missing(name, "is missing")
        return
    parameters = parameter_names(original)
    if parameters != hook.parameters:
        _hook_missing(name, f"takes {parameters}, not {hook.parameters}")
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        _send_rollouts(hook.method, signature, self, args, kwargs)
        return result

    setattr(cls, hook.method, hooked)
    originals[cls] = {hook.method: original}
    _logger.info("otel_valgen: verl's %s sends each training step's rollouts (%s)", name, hook.why)


@_process.never_raise(None)
def _send_rollouts(method: str, signature: inspect.Signature, trainer: Any, args: Any, kwargs: Any) -> None:
    """Send the batch of one call of a hooked method; nothing (not even binding) while rollouts are off."""
    # Imported here: it needs numpy, which verl brings and a plain otel-valgen install does not.
    from otel_valgen.integrations import verl_rollouts
    from otel_valgen.integrations.verl import _v1_fetch
    from otel_valgen.integrations.verl._tokens import trainer_batch

    if not verl_rollouts.rollouts_on():
        return
    bound = signature.bind(trainer, *args, **kwargs).arguments
    if method == "_update_actor":
        if not hasattr(type(trainer), "_fit_dump_data"):  # a separation trainer sends from _fit_dump_data
            with trainer_batch(trainer):
                verl_rollouts.send_legacy_step(trainer, bound["batch"])
    elif method == "_compute_metrics":
        with trainer_batch(trainer, _v1_row_keys(bound["batch"])):
            _v1_fetch.send_v1_step(trainer, bound["batch"], bound["global_steps"])
    else:
        with trainer_batch(trainer):
            verl_rollouts.send_separation_step(trainer, bound["batch"])


def _v1_row_keys(batch: Any) -> list[str] | None:
    """The TransferQueue keys of the rows the v1 hook sends: the batch's, without padding rows (``tags``)."""
    try:
        return [str(key) for key, tag in zip(batch.keys, batch.tags, strict=True) if not tag.get("is_padding", False)]
    except Exception:
        return None


def on_correction_import(module: Any) -> None:
    """The post-import hook of the modules whose rollout correction ``_correction`` watches."""
    try:
        missing = _correction.watch(module)
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not watch verl's rollout correction in %s", module.__name__)
        return
    if missing is not None:
        _correction_missing(*missing)


def on_v1_trainer_import(module: Any) -> None:
    """The post-import hook of the v1 trainer's module: ``_v1_capture`` keeps what its rollout hook reads."""
    try:
        if not any(cls.__module__ == module.__name__ for cls in originals):  # no hook to take what is kept
            return
        problems = _v1_capture.watch(module)
    except Exception:  # an import hook that raises would fail verl's import
        _logger.exception("otel_valgen: could not watch verl's v1 trainer in %s", module.__name__)
        return
    for name, problem in problems:
        _capture_missing(name, problem)


_CAPTURE_MISSED: Final = (
    "the v1 trainer's rollout hook fetches those rows from TransferQueue at every step instead, which takes longer"
)
_CORRECTION_MISSED: Final = (
    "with algorithm.rollout_correction on, the rollouts' per-token data leave out which tokens are the model's "
    "and which the correction masked"
)


def _capture_missing(name: str, problem: str) -> None:
    """Count a v1 function ``_v1_capture`` cannot watch, and say so."""
    _unwatched(name, problem, _CAPTURE_MISSED)


def _correction_missing(name: str, problem: str) -> None:
    """Count a rollout correction verl no longer has as it was, and say so."""
    _unwatched(name, problem, _CORRECTION_MISSED)


def _unwatched(name: str, problem: str, consequence: str) -> None:
    """Count a verl function left unwatched and say what that costs (WARNING when rollouts are asked for)."""
    _process.counters.add(_stats.VERL_ROLLOUT_HOOKS_MISSING)
    _logger.log(
        logging.WARNING if rollouts_asked() else logging.INFO,
        "otel_valgen: verl %s: %s %s; not watched: %s%s (tested: %s)",
        verl_version(),
        name,
        problem,
        consequence,
        untested_note(),
        tested_versions(),
    )


def _hook_missing(name: str, problem: str) -> None:
    """Count a rollout hook point verl no longer has, and say so (WARNING when rollouts are asked for)."""
    _process.counters.add(_stats.VERL_ROLLOUT_HOOKS_MISSING)
    level = logging.WARNING if rollouts_asked() else logging.INFO
    _logger.log(
        level,
        "otel_valgen: verl %s: %s %s; not hooked: its training rollouts are not sent%s. Fix: use a verl release "
        "otel-valgen is tested with (%s), or send each step's batch with "
        "otel_valgen.integrations.verl_rollouts.send_rollout_batch",
        verl_version(),
        name,
        problem,
        untested_note(),
        tested_versions(),
    )


def rollouts_asked() -> bool:
    """Whether this process is configured to send rollouts (without configuring it)."""
    emitter = _process.current_emitter()
    if emitter is not None:
        return emitter.settings.rollout_count > 0
    try:
        return int(os.environ.get(OTEL_VALGEN_ROLLOUT_COUNT, "0")) > 0
    except ValueError:
        return False

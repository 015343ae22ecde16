"""What verl's v1 trainer already holds of a step's rows, kept by TransferQueue key for the v1 rollout hook.

A TransferQueue fetch costs per row and per field, and the v1 hook (``verl._v1_fetch.send_v1_step``,
after ``PPOTrainer._compute_metrics``) would fetch rows the trainer held a moment before. Two module
functions of ``_layout.V1_TRAINER_MODULE``, which it imports by name, are wrapped (``Capture``,
``_layout.V1_CAPTURES``) and what they return is kept, with the rows' keys, while rollouts are on:

- ``compute_advantage_for_multi_trajectories(data, batch_keys, ...)``, called by ``_compute_advantage``
  once per local step: the padded tensors of its ``DataProto`` (rows in ``batch_keys``' order), the
  response mask after verl's rollout correction, ``rm_scores``, the advantages, both log-probabilities,
  the reference's and the importance weights;
- ``get_metric_data_with_optional_routed_experts(keys, ...)``, ``_compute_metrics``' own fetch of every
  row just before the hook: ``prompts``, ``responses`` (nested) and ``num_turns``.

References to verl's tensors, not copies. The hook of the step takes them (``take``), which drops every
capture (a step's keys are its own), so they live from ``_compute_advantage`` to the step's end.
``verl._v1_fetch`` reads them by key (numpy is imported there, not here: this module is imported with
the integration).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from otel_valgen import _process
from otel_valgen.integrations.verl._layout import V1_CAPTURES, parameter_names

_logger = logging.getLogger("otel_valgen")

ADVANTAGE: Final = "compute_advantage_for_multi_trajectories"
METRIC: Final = "get_metric_data_with_optional_routed_experts"

MAX_KEPT: Final = 8
"""Captures of each function kept until a hook takes them (v1 computes advantages once per local step)."""


@dataclass
class Kept:
    """One call's rows: their keys, in order, and the fields kept of its result (verl's own objects)."""

    keys: list[str]
    fields: dict[str, Any]


_lock = threading.Lock()
_kept: dict[str, list[Kept]] = {name: [] for name in V1_CAPTURES}


class Capture:
    """A function of ``V1_CAPTURES`` that keeps what it returns (``Kept``) while rollouts are on.

    An object of a module-level class, not a closure: Ray pickles verl's functions and the module
    globals they name by value, and this pickles as a reference to the class and verl's function.
    """

    def __init__(self, original: Callable[..., Any], name: str) -> None:
        functools.update_wrapper(self, original)  # verl's name, docstring and signature
        self.__wrapped__ = original
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.__wrapped__(*args, **kwargs)
        _keep(self.name, args, kwargs, result)
        return result


@_process.never_raise(None)
def _keep(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
    emitter = _process.active_emitter()
    if emitter is None or emitter.settings.rollout_count <= 0:  # verl_rollouts.rollouts_on, which imports us
        return
    spec = V1_CAPTURES[name]
    place = spec.parameters.index(spec.keys)
    keys = args[place] if len(args) > place else kwargs.get(spec.keys)
    tensors = getattr(result, "batch", result)  # a DataProto's TensorDict, or the TensorDict itself
    present = {str(field) for field in tensors.keys()}  # noqa: SIM118 (TensorDict refuses ``in``)
    if not isinstance(keys, list | tuple) or len(keys) != int(tensors.batch_size[0]):
        _logger.debug("otel_valgen: verl's %s returned rows that do not match its keys; not kept", name)
        return
    fields = {field: tensors.get(field) for field in spec.fields if field in present}
    with _lock:
        kept = _kept[name]
        kept.append(Kept([str(key) for key in keys], fields))
        del kept[:-MAX_KEPT]


def watch(module: Any) -> list[tuple[str, str]]:
    """Wrap ``module``'s ``V1_CAPTURES`` functions in a ``Capture``; what is wrong (name, problem) with the others."""
    problems = []
    for name, spec in V1_CAPTURES.items():
        current = getattr(module, name, None)
        label = f"{module.__name__}.{name}"
        if isinstance(current, Capture):
            continue
        if not callable(current):
            problems.append((label, "is gone"))
            continue
        parameters = parameter_names(current)
        if parameters != spec.parameters:
            problems.append((label, f"takes {parameters}, not {spec.parameters}"))
            continue
        setattr(module, name, Capture(current, name))
    return problems


def forget() -> None:
    """Drop every capture (tests)."""
    with _lock:
        for kept in _kept.values():
            kept.clear()


def take() -> dict[str, list[Kept]]:
    """Every capture, by function (oldest first), all dropped here: the step's hook takes them once."""
    with _lock:
        found = {name: list(kept) for name, kept in _kept.items()}
        for kept in _kept.values():
            kept.clear()
    return found

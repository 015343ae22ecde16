"""The response mask before verl's rollout correction: which tokens are the model's, which the correction masked.

verl's rollout correction (``algorithm.rollout_correction``, decoupled mode;
``_layout.CORRECTION_FUNCTION``) replaces the batch's ``response_mask`` by the mask with its rejection
applied, before any rollout hook runs (legacy ``_update_actor``, separation ``_fit_dump_data``, v1
``_compute_metrics``). The mask it replaces is the agent loop's (1 for the model's tokens, 0 for a
tool's tokens and padding). ``Capture`` wraps the correction where verl calls it from and keeps both
masks, while rollouts are on; the rollout hook takes them back for its batch (``mask_before``):

- legacy and separation: the correction whose mask after is the batch's ``response_mask`` (the very
  tensor, else equal values);
- v1: by TransferQueue key. The correction runs in ``_compute_advantage`` over a padded copy of its
  batch's rows, whose keys that method's frame holds; the hook's rows are looked up by their keys.

Not reconstructed from the batch: the attention mask also covers a tool's tokens, and once verl has
multiplied the masks a rejected token cannot be told from a tool's.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from otel_valgen import _process
from otel_valgen.integrations.verl._layout import (
    CORRECTION_FUNCTION,
    CORRECTION_IMPORTERS,
    CORRECTION_MODULE,
    CORRECTION_PARAMETERS,
    parameter_names,
)

_logger = logging.getLogger("otel_valgen")

MAX_KEPT: Final = 16
"""Corrections kept until a rollout hook takes them (v1 runs one per local step of a sync cycle)."""

_FRAMES_UP: Final = 10  # this module's own frames, and wrappers (a test's probe) between the caller and Capture


@dataclass
class Correction:
    """One call of the correction: the response mask before it (bool) and the one it left in the batch."""

    before: Any  # torch bool tensor [rows, width]
    after: Any  # the tensor verl put in the batch
    keys: list[str] | None  # v1: each row's TransferQueue key; None for a DataProto of the trainer's own


_lock = threading.Lock()
_kept: list[Correction] = []
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_valgen_verl_correction", default=False)


class Capture:
    """verl's correction function, keeping the masks before and after each call (``Correction``).

    An object of a module-level class, not a closure: Ray pickles verl's functions and the module
    globals they name by value, and this pickles as a reference to the class and verl's function.
    ``caller`` (v1): the method that calls it and its TransferQueue batch argument.
    """

    def __init__(self, original: Callable[..., Any], caller: tuple[str, str, str] | None = None) -> None:
        functools.update_wrapper(self, original)  # verl's name, docstring and signature
        self.__wrapped__ = original
        self.caller = caller  # (module, method, argument)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _inside.get():  # a Capture further out keeps this call
            return self.__wrapped__(*args, **kwargs)
        before = _before(args, kwargs)
        token = _inside.set(True)
        try:
            result = self.__wrapped__(*args, **kwargs)
        finally:
            _inside.reset(token)
        if before is not None:
            _keep(before, result, self.caller)
        return result


@_process.never_raise(None)
def _before(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The batch's response mask as verl hands it to the correction (None while rollouts are off)."""
    emitter = _process.active_emitter()
    if emitter is None or emitter.settings.rollout_count <= 0:  # verl_rollouts.rollouts_on, which imports us
        return None
    batch = args[0] if args else kwargs[CORRECTION_PARAMETERS[0]]
    return batch.batch["response_mask"]


@_process.never_raise(None)
def _keep(before: Any, result: Any, caller: tuple[str, str, str] | None) -> None:
    after = result[0].batch["response_mask"]
    keys = _caller_keys(caller) if caller is not None else None
    if caller is not None and (keys is None or len(keys) != len(after)):
        _logger.debug("otel_valgen: the rows of verl's v1 rollout correction have no keys; not kept")
        return
    with _lock:
        _kept.append(Correction(before.bool(), after, keys))
        del _kept[:-MAX_KEPT]


def _caller_keys(caller: tuple[str, str, str]) -> list[str] | None:
    """The keys of the TransferQueue batch in the frame of the method that called the correction."""
    module, method, argument = caller
    frame: Any = sys._getframe()
    for _ in range(_FRAMES_UP):
        if frame is None:
            return None
        if frame.f_code.co_name == method and frame.f_globals.get("__name__") == module:
            keys = getattr(frame.f_locals.get(argument), "keys", None)
            return [str(key) for key in keys] if isinstance(keys, list) else None
        frame = frame.f_back
    return None


def mask_before(mask: Any, row_keys: Sequence[str] | None) -> Any:
    """The response mask before the correction of a batch whose ``response_mask`` is ``mask`` (bool), or None.

    ``row_keys`` (v1): each row's TransferQueue key. The corrections used are forgotten.
    """
    import torch

    with _lock:
        if row_keys is None:
            for index in range(len(_kept) - 1, -1, -1):
                found = _kept[index]
                if found.keys is None and _same(found.after, mask):
                    del _kept[index]
                    return found.before
            return None
        before = _by_keys(mask, row_keys, torch)
        if before is not None:
            _kept[:] = [c for c in _kept if c.keys is None or not set(c.keys) & set(row_keys)]
        return before


def _same(after: Any, mask: Any) -> bool:
    return after is mask or (tuple(after.shape) == tuple(mask.shape) and bool((after == mask).all()))


def _by_keys(mask: Any, row_keys: Sequence[str], torch: Any) -> Any:
    """The mask before of each row from the keyed corrections, if every row has one and its mask after is the row's."""
    if len(row_keys) != len(mask):
        return None
    keys = list(row_keys)
    for correction in _kept:  # the usual case: one correction of these very rows, in this order
        if correction.keys == keys and tuple(correction.before.shape) == tuple(mask.shape):
            if _same(correction.after, mask):
                return correction.before
            break
    where: dict[str, tuple[int, int]] = {}
    for number, correction in enumerate(_kept):
        if correction.keys is not None:
            where.update((key, (number, row)) for row, key in enumerate(correction.keys))
    places = [where.get(key) for key in row_keys]
    if any(place is None for place in places):
        return None
    width = mask.shape[1]
    before = torch.zeros(mask.shape, dtype=torch.bool)
    after = torch.zeros(mask.shape, dtype=mask.dtype)
    for number, correction in enumerate(_kept):
        rows = [i for i, place in enumerate(places) if place is not None and place[0] == number]
        if not rows:
            continue
        theirs = torch.tensor([places[i][1] for i in rows])  # type: ignore[index]
        mine = torch.tensor(rows)
        shared = min(width, correction.before.shape[1])
        before[mine, :shared] = correction.before[theirs, :shared]
        after[mine, :shared] = correction.after[theirs, :shared].to(mask.dtype)
    return before if bool((after == mask).all()) else None


def forget() -> None:
    """Drop every kept correction (tests)."""
    with _lock:
        _kept.clear()


# -- the hook points (``_rollout_hooks.on_correction_import``, registered by integrations.verl.install) -----


def watch(module: Any) -> tuple[str, str] | None:
    """Wrap ``module``'s correction function in a ``Capture``; what is wrong (its name, the problem) when it cannot."""
    caller = CORRECTION_IMPORTERS.get(module.__name__)
    current = getattr(module, CORRECTION_FUNCTION, None)
    name = f"{module.__name__}.{CORRECTION_FUNCTION}"
    if isinstance(current, Capture) and (caller is None or current.caller is not None):
        return None
    if not callable(current):
        return name, "is gone"
    original = current.__wrapped__ if isinstance(current, Capture) else current
    parameters = parameter_names(original)
    if parameters != CORRECTION_PARAMETERS:
        return name, f"takes {parameters}, not {CORRECTION_PARAMETERS}"
    setattr(module, CORRECTION_FUNCTION, Capture(original, (module.__name__, *caller) if caller else None))
    return None


def watched_modules() -> tuple[str, ...]:
    """The modules whose correction function ``watch`` wraps."""
    return (CORRECTION_MODULE, *CORRECTION_IMPORTERS)

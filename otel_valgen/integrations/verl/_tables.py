"""verl's own validation table (``_layout.TABLE_CLASS``): loud when a validation does not reach otel-valgen.

Whenever the table runs where ``install()`` ran, one WARNING per cause says why and how to fix
it, ``stats()["verl_tables_unrouted"]`` counts it, and the step's part is marked
``valgen.integration=unhooked`` (docs/architecture.md). This stays on with
``OTEL_VALGEN_VERL=false``, which only warns.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

import otel_valgen as vg
from otel_valgen import _integration, _process, _stats, contract
from otel_valgen._env import OTEL_VALGEN_VERL
from otel_valgen.integrations.verl import _actors, _validation
from otel_valgen.integrations.verl._layout import (
    PATCHED_CLASSES,
    TABLE_CLASS,
    TABLE_MODULE,
    tested_versions,
    verl_version,
)

_logger = logging.getLogger("otel_valgen")

DISABLED: Final = "disabled"
"""The reason of an unrouted table when ``OTEL_VALGEN_VERL=false``: warned about, no records."""

_watching = False
disabled = False  # install() found OTEL_VALGEN_VERL=false before any hook was in place


@dataclasses.dataclass(frozen=True)
class _Unrouted:
    """Why verl's own table ran: a reason of ``contract.UNHOOKED_REASONS`` (or DISABLED), the cause, the fix."""

    reason: str
    cause: str
    fix: str


def watch_tables() -> None:
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
    _validation.warn_once(
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
    if disabled:
        return _Unrouted(
            DISABLED,
            f"{OTEL_VALGEN_VERL}=false turned the verl integration off",
            f"unset {OTEL_VALGEN_VERL} (or set it to true) in the job's environment",
        )
    mro = type(trainer).__mro__ if trainer is not None else ()
    base = next((cls for cls in mro if cls in _validation.originals), None)
    if base is None:
        return _why_not_hooked(mro)
    # The class whose own code called the table; a closure or helper of unknown name: the trainer's class.
    return _why_bypassed(base, next((cls for cls in mro if method in cls.__dict__), type(trainer)), method)


def _why_not_hooked(mro: tuple[type, ...]) -> _Unrouted:
    """The cause when no class of the trainer's ``mro`` got the hooks."""
    drifted = next((cls for cls in mro if cls in _validation.left_unhooked), None)
    if drifted is not None:
        return _Unrouted(
            "drift",
            f"verl {verl_version()}'s {_class_name(drifted)} was left unhooked (see the WARNING that names it)",
            f"use a verl release otel-valgen is tested with ({tested_versions()}), or "
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
            f"call it as verl {tested_versions()} does: (inputs, outputs, scores)",
        )
    own = _validation.originals[base].get(method)
    if any(function is own for function in _actors.wrapped_chain(owner.__dict__.get(method))):
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
    active = _validation.active.get()
    if active is not None and (trainer is None or active[0] == id(trainer)) and _process.mark_open_block(marks):
        return  # the block _validate opened ends with the marks
    target = _validation.target(trainer) if trainer is not None else None
    source = target.source if target is not None else _source_name(trainer)
    with _integration.marked(marks), vg.validation(step=step, source=source):
        pass  # its start and end records, with no generation


def _source_name(trainer: object | None) -> str:
    """The part's name when ``_validation.target`` gives none: ``rollouter`` if the class says so, else ``trainer``."""
    return "rollouter" if "rollouter" in type(trainer).__name__.lower() else "trainer"

"""Ray actor classes made before the hooks: point them at the hooked methods again.

``@ray.remote`` copies every inherited method into the actor class it makes, each copy
wrapping the function of that moment: verl's own ``_validate`` when the class was decorated
before the hooks were in place (``fully_async_main`` imports its actor classes before
``ray.init``).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from otel_valgen.integrations.verl import _agent_loop, _rollout_hooks, _validation

_logger = logging.getLogger("otel_valgen")


def wrapped_chain(function: Any) -> list[Any]:
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

    Copies of verl's own methods are removed, so the class inherits the hooked method, and Ray's
    tracing wrapper is put back. Copies of a subclass's own override are left alone.
    """
    repaired: list[str] = []
    for actor in _actor_classes():
        modified = getattr(getattr(actor, "__ray_metadata__", None), "modified_class", None)
        if not isinstance(modified, type):
            continue
        changed = False
        hooked = [*_validation.originals.items(), *_rollout_hooks.originals.items(), *_agent_loop.originals.items()]
        for base, originals in hooked:
            if not issubclass(modified, base):
                continue
            for method, original in originals.items():
                current = getattr(base, method, None)
                chain = wrapped_chain(modified.__dict__.get(method))
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


def repair_quietly() -> None:
    try:
        repair_actor_classes()
    except Exception:
        _logger.exception("otel_valgen: could not repair Ray actor classes made before the verl hooks")

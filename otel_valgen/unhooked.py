"""Sources whose validation ran in verl's own table instead of otel-valgen: a step that shows less than it did.

A process where the verl integration is installed but a validation did not reach it (a trainer
subclass overrides the hooked method, a Ray actor class copy, a verl that drifted) sends, for
that step, a part with no generation whose start or end record says
``valgen.integration=unhooked`` (``contract.INTEGRATION``). The collector's sampler lists such
sources in the summary's ``valgen.sources_unhooked``; ``otel-valgen show`` reads the same from
the summary, else from the records (``otel_valgen.selection``), and warns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

__all__ = ["UNHOOKED_FIX", "unhooked_warning"]

UNHOOKED_FIX: Final = (
    "the process logged an otel_valgen WARNING that says why and how to fix it (e.g. a trainer subclass that "
    "overrides _maybe_log_val_generations: put ValGenerationsMixin first in its bases); see docs/troubleshooting.md"
)


def unhooked_warning(run_id: str, step: int, sources: Sequence[str]) -> str:
    """The warning about a step some of whose sources ("source@instance") ran verl's own table."""
    return (
        f"run {run_id} step {step}: verl's own validation table ran in {', '.join(sources)} instead of otel-valgen, "
        f"so their generations are not in this step; {UNHOOKED_FIX}"
    )

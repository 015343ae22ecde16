"""otel-valgen: validation generations of LLM training jobs as OpenTelemetry log records.

Typical use, from any process or Ray actor::

    import otel_valgen as vg

    with vg.validation(step=100, source="rollouter") as v:
        vg.log_generations(inputs, outputs, scores)

and, for training rollouts (k prompts per step, each with all its responses; off unless
``OTEL_VALGEN_ROLLOUT_COUNT`` or ``count=`` asks for some)::

    vg.log_rollouts(prompts, responses, rewards, step=step, prompt_ids=uids, advantages=adv)

Nothing here ever raises into the training loop; see ``stats()`` for what was dropped.
"""

from otel_valgen._api import (
    configure,
    current_settings,
    end_step,
    flush,
    log_generations,
    shutdown,
    stats,
)
from otel_valgen._rollouts import log_rollouts
from otel_valgen._settings import Settings
from otel_valgen._validation import Validation, validation
from otel_valgen.sampling import sample_key

__all__ = [
    "Settings",
    "Validation",
    "configure",
    "current_settings",
    "end_step",
    "flush",
    "log_generations",
    "log_rollouts",
    "sample_key",
    "shutdown",
    "stats",
    "validation",
]

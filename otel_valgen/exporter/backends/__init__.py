"""The trackers the exporter writes closed steps to, one module each.

A backend writes one ``ClosedStep`` at a time into the training job's own run of its tracker
(named by the step's resource attributes, see each module) and keeps its own ``Ledger``, so
that every backend writes each step once whatever the others do. Tracker libraries are
imported only by the backends that are used.

``write`` raises ``BackendUnavailable`` when the tracker cannot take the step now (the
service holds it and retries), ``StepNotWritable`` when the records name no run the tracker
can write to; any other exception means the step can never be written there (it is dropped,
counted and logged with its traceback).

Every backend writes a step's validation (``val/generations`` by default) and its training
rollouts (``train/generations``) under different keys (``TableKeys.key``), and its ledger keeps
the two kinds apart.

A step that came in parts (``otel_valgen.partials``: agents re-routed it between samplers) is
written again when a part from another sampler merges into it after its first write
(``correction``). MLflow rewrites it in place (the step's artifact is replaced); the trackers
whose past steps cannot be changed (wandb, TensorBoard, ClearML, Trackio) write the merged
step whole under the step's key with ``CORRECTED`` appended, at the same step, so that the
correction is visible next to what was first written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final, Protocol

from otel_valgen.exporter.ledger import Ledger, ledger_dir
from otel_valgen.exporter.steps import ClosedStep

__all__ = [
    "BACKENDS",
    "CORRECTED",
    "Backend",
    "BackendUnavailable",
    "StepNotWritable",
    "TableKeys",
    "commit_step",
    "correction",
    "create_backends",
    "parse_backends",
    "superseded",
    "written_before",
    "written_key",
]

BACKENDS: Final = ("wandb", "mlflow", "tensorboard", "clearml", "trackio")
CORRECTED: Final = "/corrected"
"""Appended to a step's key where an append-only tracker writes a merged step again (``correction``)."""
"""The backends this version writes to, by the name ``--backend`` takes."""
VALIDATION_KEY: Final = "val/generations"
ROLLOUT_KEY: Final = "train/generations"

_logger = logging.getLogger("otel_valgen.exporter")


class BackendUnavailable(Exception):
    """The tracker cannot take the step now; it may be retried as it is."""


class StepNotWritable(Exception):
    """The step can never be written to this tracker (its records name no run there).

    The service counts it as a failed step; the backend has logged why (once per run).
    """


@dataclass(frozen=True, kw_only=True)
class TableKeys:
    """What every backend's config says of keys: where each kind goes, and whether scalars go with it.

    Attributes:
        table_key: the key of validation steps; their scalars go under ``<table_key>/``.
        rollout_key: the same for training rollout steps (another key than ``table_key``).
        scalars: write the summary's scalars.

    """

    table_key: str = VALIDATION_KEY
    rollout_key: str = ROLLOUT_KEY
    scalars: bool = True

    def key(self, step: ClosedStep) -> str:
        """The key ``step`` is written under: the rollout key for training rollouts, else the table key."""
        return self.rollout_key if step.rollout else self.table_key


class Backend(Protocol):
    """What the service needs of a tracker."""

    name: str
    ledger: Ledger

    def write(self, step: ClosedStep) -> int | None:
        """Write one step; return the rows added, or None when it was written before or another attempt is shown."""
        ...

    def close(self, *, teardown: bool = False) -> None:
        """Release the tracker's runs and files (``teardown``: the process is ending)."""
        ...


def superseded(backend: Backend, step: ClosedStep) -> bool:
    """Whether another attempt of the step is shown in this backend and the shared rule keeps it.

    Of the attempts of one step (``valgen.attempt``: resume, retry) the one that
    ``otel_valgen.selection.choose_attempt`` picks is shown: latest complete, else latest.
    """
    shown = backend.ledger.superseded_by(step.group_id, step.step, step.shown_attempt(), step.kind)
    if shown is None:
        return False
    _logger.info(
        "%s: run %s step %d (%s): attempt %r not written, attempt %r is shown",
        backend.name,
        step.group_id,
        step.step,
        step.kind,
        step.attempt,
        shown.attempt,
    )
    return True


def written_before(backend: Backend, step: ClosedStep) -> bool:
    """Whether a backend that writes a step whole has nothing to do: written with all its parts, or superseded."""
    if superseded(backend, step):
        return True
    return backend.ledger.is_committed(*step.key) and step.samplers <= backend.ledger.samplers(*step.key)


def correction(backend: Backend, step: ClosedStep) -> bool:
    """Whether ``step`` merges a part of another sampler into a step this backend has written already."""
    return backend.ledger.is_committed(*step.key) and not step.samplers <= backend.ledger.samplers(*step.key)


def written_key(backend: Backend, step: ClosedStep, key: str) -> str:
    """``key``, with ``CORRECTED`` appended when the step is a correction of what was written (``correction``)."""
    return key + CORRECTED if correction(backend, step) else key


def commit_step(backend: Backend, step: ClosedStep) -> int:
    """Record a whole step as written in the backend's ledger; the rows it had."""
    sample_ids = [g.sample_id for g in step.generations]
    backend.ledger.commit(
        step.group_id, step.step, sample_ids, shown=step.shown_attempt(), kind=step.kind, samplers=step.samplers
    )
    return len(sample_ids)


def parse_backends(value: str) -> list[str]:
    """``wandb,mlflow`` as a list of known backend names, in order, without repeats.

    Raises:
        ValueError: a name is not a backend.

    """
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise ValueError(f"unknown backend {', '.join(unknown) or '(none)'}; choose from {', '.join(BACKENDS)}")
    return list(dict.fromkeys(names))


def create_backends(names: list[str], state_dir: str | None, configs: dict[str, Any]) -> list[Backend]:
    """The named backends, each with its ledger under ``<state_dir>/<name>`` and its config from ``configs``."""
    backends: list[Backend] = []
    for name in names:
        ledger = Ledger(ledger_dir(state_dir, name))
        config = configs.get(name)
        if name == "wandb":
            from otel_valgen.exporter.backends.wandb import WandbBackend, WriterConfig

            backends.append(WandbBackend(config or WriterConfig(), ledger))
        elif name == "mlflow":
            from otel_valgen.exporter.backends.mlflow import MlflowBackend, MlflowConfig

            backends.append(MlflowBackend(config or MlflowConfig(), ledger))
        elif name == "tensorboard":
            from otel_valgen.exporter.backends.tensorboard import TensorBoardBackend, TensorBoardConfig

            backends.append(TensorBoardBackend(config or TensorBoardConfig(), ledger))
        elif name == "clearml":
            from otel_valgen.exporter.backends.clearml import ClearMLBackend, ClearMLConfig

            backends.append(ClearMLBackend(config or ClearMLConfig(), ledger))
        elif name == "trackio":
            from otel_valgen.exporter.backends.trackio import TrackioBackend, TrackioConfig

            backends.append(TrackioBackend(config or TrackioConfig(), ledger))
        else:
            raise ValueError(f"unknown backend {name!r}")
    return backends

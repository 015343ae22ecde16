"""Write sampled validation generations into the training job's own tracker runs.

The service (``otel-valgen exporter``, alias ``wandb-exporter``) receives OTLP logs from the
collector, one closed step per request, and hands each step to every configured backend
(``otel_valgen.exporter.backends``: wandb, MLflow, TensorBoard, ClearML, Trackio), each of which writes it once
into the run its records name. ``otel-valgen push`` does the same from OTLP-JSON files.
Tracker libraries and grpc are imported only where they are used.
"""

from __future__ import annotations

from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.steps import ClosedStep, assemble

__all__ = ["ClosedStep", "Ledger", "assemble"]

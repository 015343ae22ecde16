"""Write sampled validation generations into the training job's own wandb run.

The service (``otel-valgen wandb-exporter``) receives OTLP logs from the collector,
buffers each (run, step) until its ``valgen.step.summary`` record, and writes the step
as a ``val/generations`` table into the run the records name. ``otel-valgen push`` does
the same from OTLP-JSON files. wandb and grpc are imported only where they are used.
"""

from __future__ import annotations

from otel_valgen.wandb_exporter.buffer import BufferLimits, StepBuffer
from otel_valgen.wandb_exporter.ledger import Ledger
from otel_valgen.wandb_exporter.model import ClosedStep, RunRef

__all__ = ["BufferLimits", "ClosedStep", "Ledger", "RunRef", "StepBuffer"]

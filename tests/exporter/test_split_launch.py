"""One launch split into attempts: the exporter service warns once per step, names the fix, counts it."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from otel_valgen import contract
from otel_valgen.exporter.service import ExporterService, ServiceConfig
from otel_valgen.exporter.steps import ClosedStep
from otel_valgen.otlp_json import to_otlp_json
from tests.support.otlp_values import any_value

from .conftest import generation, request, summary

MS = 1_000_000
T0 = 1_700_000_000_000 * MS


class Recorder:
    """A backend that keeps the steps it is given."""

    name = "recorder"

    def __init__(self) -> None:
        self.steps: list[ClosedStep] = []

    def write(self, step: ClosedStep) -> int | None:
        """Keep the step."""
        self.steps.append(step)
        return len(step.generations)

    def close(self, *, teardown: bool = False) -> None:
        """Nothing to close."""


def attempt_request(attempt: str, instance: str, start_ms: int, end_ms: int, concurrent: int | None) -> dict[str, Any]:
    """The sampler's request for one attempt of run r step 3: two ranked generations (at start_ms, end_ms), its summary.

    ``concurrent`` is the summary's valgen.attempts_concurrent; None: a collector that does not send it.
    """
    logs: list[LogRecord] = []
    for i, t_ms in enumerate((start_ms, end_ms)):
        record = generation("r", 3, i, attempt=attempt, rank=i + 1)
        record.time_unix_nano = T0 + t_ms * MS
        logs.append(record)
    closing = summary("r", 3, 2, attempt=attempt, attempt_start=T0 + start_ms * MS)
    if concurrent is not None:
        closing.attributes.append(KeyValue(key=contract.ATTEMPTS_CONCURRENT, value=any_value(concurrent)))
    resource = {"service.name": "job", "service.instance.id": instance}
    return to_otlp_json(request(*logs, closing, resource=resource))


def split_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The service's warnings that name the launch-id fix."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "OTEL_VALGEN_LAUNCH_ID" in r.getMessage()
    ]


@pytest.fixture
def service() -> ExporterService:
    """A service (workers not started: nothing is written) with one recording backend."""
    return ExporterService(ServiceConfig(), [Recorder()])


@pytest.mark.parametrize("marked", [True, False], ids=["summary says so", "older collector"])
def test_concurrent_attempts_of_a_step_are_warned_once_and_counted(
    service: ExporterService, caplog: pytest.LogCaptureFixture, marked: bool
) -> None:
    """Two processes' attempts at the same time, no common source: one warning with the fix, one split step."""
    caplog.set_level(logging.WARNING, logger="otel_valgen.exporter")
    service.accept(attempt_request("pA.1", "i-0", 0, 100, 1 if marked else None))
    service.accept(attempt_request("pB.1", "i-1", 50, 150, 1 if marked else None))
    service.accept(attempt_request("pB.1", "i-1", 50, 150, 1 if marked else None))  # a retried request
    (warning,) = split_warnings(caplog)
    assert warning.startswith("run r step 3: 2 attempts ran at the same time with no common source")
    assert "set OTEL_VALGEN_LAUNCH_ID to one new value per launch for all processes" in warning
    assert "torchrun/Slurm/MPI/Ray" in warning
    assert service.stats()["split_steps"] == 1


@pytest.mark.parametrize(
    ("second", "concurrent"),
    [
        (("L2.1", "i-1", 5000, 5100), None),  # a resumed launch: starts after the first stopped
        (("L1.2", "i-0", 50, 150), None),  # the same process validating the step again
        (("L2.1", "i-1", 50, 150), 0),  # the sampler saw no split: its word counts
    ],
    ids=["resumed", "shared source", "summary says no"],
)
def test_other_attempts_of_a_step_are_not_warned(
    service: ExporterService,
    caplog: pytest.LogCaptureFixture,
    second: tuple[str, str, int, int],
    concurrent: int | None,
) -> None:
    """A resumed launch, or attempts sharing a source, or the sampler's 0: no warning, nothing counted."""
    caplog.set_level(logging.WARNING, logger="otel_valgen.exporter")
    service.accept(attempt_request("L1.1", "i-0", 0, 100, concurrent))
    service.accept(attempt_request(*second, concurrent))
    assert split_warnings(caplog) == []
    assert service.stats()["split_steps"] == 0


@pytest.mark.parametrize("unhooked", [["rollouter@i-1"], []], ids=["a source unhooked", "none"])
def test_a_step_with_a_source_that_ran_verls_own_table_is_warned_and_counted(
    service: ExporterService, caplog: pytest.LogCaptureFixture, unhooked: list[str]
) -> None:
    """The summary's valgen.sources_unhooked: one warning naming the source and the fix, one unhooked step."""
    caplog.set_level(logging.WARNING, logger="otel_valgen.exporter")
    closing = summary("r", 3, 1)
    closing.attributes.append(KeyValue(key=contract.SOURCES_UNHOOKED, value=any_value(unhooked)))
    service.accept(to_otlp_json(request(generation("r", 3, 0, rank=1), closing)))
    warnings = [r.getMessage() for r in caplog.records if "verl's own validation table" in r.getMessage()]
    if unhooked:
        (warning,) = warnings
        assert warning.startswith("run r step 3: verl's own validation table ran in rollouter@i-1")
        assert "ValGenerationsMixin" in warning
    else:
        assert warnings == []
    assert service.stats()["unhooked_steps"] == len(warnings)

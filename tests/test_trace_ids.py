"""The Python side's step trace ids equal the ``valgen_spans`` connector's, by its shared vectors.

The connector (collector/valgenspanconnector/ids.go) and Python (``otel_valgen._tracing``) each
derive a step's trace id from (run, step, kind). The SDK gives a validation step's records that id
when no trace context reached the process, and the exporter's MLflow backend links the trace of
that id to the job's run (``trace_id_of``). The connector's vectors (testdata/spans) hold the trace
ids it emits; here they are recomputed from each trace's root, and from the vectors' own input
records as the exporter assembles them into steps, so the two implementations cannot drift.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from otel_valgen import contract
from otel_valgen._tracing import derived_ids, step_trace_id
from otel_valgen.exporter.backends.mlflow import trace_id_of
from otel_valgen.exporter.steps import assemble
from otel_valgen.otlp_json import to_otlp_json
from otel_valgen.reader import split_request
from tests.support.otlp_values import any_value

VECTORS = Path(__file__).resolve().parent.parent / "testdata" / "spans"
CASES = sorted(VECTORS.glob("*.json"))
StepOf = tuple[str, int, str]  # (valgen.run_id, step, kind)


def _expected(case: dict[str, Any]) -> dict[StepOf, set[str]]:
    """The trace ids the connector emitted, by the (run, step, kind) its root names."""
    out: dict[StepOf, set[str]] = {}
    for trace in case["expected"]["traces"]:
        (root,) = [span for span in trace["spans"] if span["parent"] == -1]
        attributes = root["attributes"]
        step_of = (attributes[contract.RUN_ID], attributes[contract.STEP], attributes[contract.KIND])
        out.setdefault(step_of, set()).update(span["trace_id"] for span in trace["spans"])
    return out


def _request(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """One batch of a vector as the OTLP/JSON request the exporter reads: each record in its own resource."""
    message = ExportLogsServiceRequest()
    for item in batch:
        resource_logs = message.resource_logs.add()
        resource_logs.resource.attributes.extend(
            KeyValue(key=key, value=any_value(value)) for key, value in item.get("resource", {}).items()
        )
        record = LogRecord(event_name=item["event"], time_unix_nano=item.get("time_unix_nano", 0))
        record.attributes.extend(KeyValue(key=key, value=any_value(value)) for key, value in item["attributes"].items())
        if "body" in item:
            record.body.CopyFrom(any_value(item["body"]))
        resource_logs.scope_logs.add().log_records.append(record)
    return to_otlp_json(message)


@pytest.mark.parametrize("path", CASES, ids=[path.stem for path in CASES])
def test_step_trace_ids_match_the_connectors_vectors(path: Path) -> None:
    """Every trace of a vector has the id ``step_trace_id`` gives its root's (run, step, kind)."""
    expected = _expected(json.loads(path.read_text(encoding="utf-8")))
    assert expected
    for (run, step, kind), trace_ids in expected.items():
        assert trace_ids == {f"{step_trace_id(run, step, kind):032x}"}
        if kind == contract.KIND_VALIDATION:  # the id the SDK gives the step's records
            assert derived_ids(run, step)[0] == step_trace_id(run, step, kind)


@pytest.mark.parametrize("path", CASES, ids=[path.stem for path in CASES])
def test_the_exporter_links_the_trace_the_connector_made_of_each_step(path: Path) -> None:
    """The vector's input records, assembled by the exporter: each step's ``trace_id_of`` is its trace's id."""
    case = json.loads(path.read_text(encoding="utf-8"))
    expected = _expected(case)
    steps = [step for batch in case["batches"] for step in assemble(split_request(_request(batch)).records).steps]
    assert {(step.group_id, step.step, step.kind) for step in steps} == set(expected)
    for step in steps:
        (trace_id,) = expected[(step.group_id, step.step, step.kind)]
        assert trace_id_of(step) == f"tr-{trace_id}"


def test_the_kind_is_in_a_rollouts_trace_id_only() -> None:
    """A step's rollouts have a trace of their own; validation keeps the SDK's derived id."""
    assert step_trace_id("run-1", 12) == derived_ids("run-1", 12)[0]
    assert step_trace_id("run-1", 12, contract.KIND_ROLLOUT) != step_trace_id("run-1", 12)
    assert step_trace_id("run-1", 13) != step_trace_id("run-1", 12)

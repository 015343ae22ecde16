"""User story: whatever a training job or a stranger sends, nothing crashes and nothing vanishes uncounted.

Property-based (hypothesis, bounded examples) against the built collector:
- through the public API: arbitrary texts (non-UTF-8 bytes, lone surrogates, control
  characters, texts over ``max_field_bytes``), scores (NaN, inf, huge ints, strings), ids and
  attribute types; every generation is either sent or counted as dropped in ``vg.stats()``,
  and each step's summary counts exactly what was sent;
- straight at the collector: OTLP log records with missing or mistyped ``valgen.*``
  attributes, and bodies that are not OTLP; every generation record the sampler received is
  either in a step summary's ``seen`` or in ``otelcol_valgen_sampler_records_dropped{reason}``.
The collector stays healthy throughout.
"""

from __future__ import annotations

import itertools
import math
import urllib.error
import urllib.request
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

import otel_valgen as vg
from otel_valgen import contract
from tests.e2e.harness import Record, StandIn, wait_for
from tests.e2e.steps import by_step
from tests.faults.conftest import Collectors, RunningCollector, file_records, metric_sum
from tests.support.otlp_values import any_value

K = 3
_HYPOTHESIS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure reproduces
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

texts = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.binary(max_size=40),  # decoded with U+FFFD for invalid UTF-8
    st.integers(),
    st.floats(allow_nan=True),
    st.sampled_from(["\x00\x1b[31m\r\n\t", "\udcff lone surrogate"]),
    st.builds(lambda: "é" * 40_000),  # 80,000 UTF-8 bytes, over max_field_bytes (built: keeps reprs short)
)
scores = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.text(max_size=5),
    st.booleans(),
)
ids = st.one_of(st.none(), st.text(max_size=20), st.integers(), st.binary(max_size=8))
rows = st.lists(st.tuples(texts, texts, scores, ids, texts), max_size=6)


def _collector(collectors: Collectors, wandb: StandIn, loki: StandIn) -> RunningCollector:
    return collectors.start(
        "c",
        {
            "VALGEN_TRACKER_EXPORTER_ENDPOINT": wandb.endpoint,
            "VALGEN_LOKI_OTLP_ENDPOINT": loki.endpoint,
            "VALGEN_COUNT": str(K),
            "VALGEN_DECISION_WAIT": "2s",
        },
    )


@pytest.mark.timeout(120)
# The OTel SDK draws trace and span ids from the random module inside the test; that is not ours to change.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_arbitrary_api_input_is_sent_or_counted_and_the_collector_samples_it(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """Each call's generations are emitted or dropped with a reason; each step's summary sees what was emitted."""
    collector = _collector(collectors, wandb_stand_in, loki_stand_in)
    vg.configure(run_id="faults-bad-api", count=K, endpoint=f"http://{collector.http_endpoint}", presample=False)
    steps = itertools.count(1)
    emitted_per_step: dict[int, int] = {}

    @_HYPOTHESIS
    @given(rows=rows, mismatch=st.booleans())
    def one_step(rows: list[tuple[Any, Any, Any, Any, Any]], mismatch: bool) -> None:
        step = next(steps)
        columns = [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(5)]
        inputs, outputs, score_list, id_list, sources = columns
        if mismatch and rows:
            score_list = score_list[:-1]
        before = vg.stats()
        accepted = vg.log_generations(
            inputs, outputs, score_list, step=step, sample_ids=id_list, data_sources=sources, source="h"
        )
        vg.end_step(step, source="h", sources_expected=1)
        after = vg.stats()
        emitted = after["generations_emitted"] - before["generations_emitted"]
        dropped = after["generations_dropped"] - before["generations_dropped"]
        assert emitted == accepted
        assert emitted + dropped == len(rows)
        if mismatch and rows:
            assert after.get("dropped.length_mismatch", 0) - before.get("dropped.length_mismatch", 0) == len(rows)
        emitted_per_step[step] = emitted

    one_step()
    assert vg.flush(10)
    stats = vg.stats()
    for repair in ("truncated_fields", "replaced_chars", "invalid_scores", "dropped.length_mismatch"):
        assert stats.get(repair, 0) > 0, f"the examples never exercised {repair}: {stats}"
    assert stats.get("internal_errors", 0) == 0, stats
    assert stats["records_unconfirmed"] == 0, stats
    assert stats["records_export_failed"] == 0, stats

    wait_for(lambda: set(emitted_per_step) <= set(by_step(file_records(collector.file_path))[1]), 30, "every summary")
    kept, summaries = by_step(file_records(collector.file_path))
    for step, emitted in emitted_per_step.items():
        summary = summaries[step][0].attributes
        assert len(summaries[step]) == 1
        assert summary[contract.SEEN] == emitted, (step, summary)
        assert summary[contract.KEPT] == len(kept[step]) == min(K, emitted), (step, summary)
        assert summary[contract.CLOSED_REASON] == "complete", (step, summary)
    assert metric_sum(collector.metrics(), "otelcol_valgen_sampler_records_dropped") == 0
    assert collector.healthy()


# Values of any OTLP type, or None for "attribute absent".
any_values = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.binary(max_size=6),
    st.lists(st.integers(min_value=0, max_value=9), max_size=2),
)
_KEYS = (
    contract.RUN_ID,
    contract.STEP,
    contract.SAMPLE_ID,
    contract.SAMPLE_KEY,
    contract.SAMPLE_COUNT,
    contract.SEED,
    contract.KEY_VERSION,
    contract.SCORE,
    contract.SOURCE,
)


_VALID = {
    contract.RUN_ID: st.sampled_from(["r1", "r2"]),
    contract.STEP: st.integers(min_value=0, max_value=3),
    contract.SAMPLE_ID: st.text(max_size=6),
    contract.SAMPLE_KEY: st.integers(min_value=0, max_value=2**63 - 1),
    contract.SAMPLE_COUNT: st.integers(min_value=-2, max_value=5),
    contract.KEY_VERSION: st.sampled_from([1, 2]),  # unknown versions come from any_values
}


def _value_for(key: str) -> st.SearchStrategy[Any]:
    """About half the time a well-typed value (so that groups form), else anything or nothing."""
    return st.one_of(_VALID[key], any_values) if key in _VALID else any_values


def _post(endpoint: str, body: bytes, content_type: str = "application/x-protobuf") -> int:
    request = urllib.request.Request(
        f"http://{endpoint}/v1/logs", data=body, headers={"Content-Type": content_type}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.xfail(
    strict=True,
    reason="upstream otlpreceiver v0.161.0: a JSON body that is not valid UTF-8 (e.g. b'\\x80') gets "
    "500 {'code': 13, 'message': 'failed to marshal error message'} instead of 400: the parse error it "
    "echoes contains the invalid bytes, and marshalling the Status fails",
)
@pytest.mark.timeout(30)
def test_non_utf8_json_body_is_refused_with_400(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """A non-UTF-8 body sent as application/json is a client error (400), not a server error."""
    collector = _collector(collectors, wandb_stand_in, loki_stand_in)
    assert _post(collector.http_endpoint, b"\x80", "application/json") == 400


@pytest.mark.timeout(120)
def test_malformed_otlp_never_crashes_the_collector_and_every_record_is_counted(
    collectors: Collectors, wandb_stand_in: StandIn, loki_stand_in: StandIn
) -> None:
    """Mistyped/missing attributes and non-OTLP bodies: 200 or 400, healthy; received = summaries' seen + dropped."""
    collector = _collector(collectors, wandb_stand_in, loki_stand_in)
    sent = 0

    @_HYPOTHESIS
    @given(
        records=st.lists(st.fixed_dictionaries({key: _value_for(key) for key in _KEYS}), min_size=1, max_size=5),
        body=any_values,
        garbage=st.binary(max_size=64),
    )
    def one_request(records: list[dict[str, Any]], body: Any, garbage: bytes) -> None:
        nonlocal sent
        message = ExportLogsServiceRequest()
        scope = message.resource_logs.add().scope_logs.add()
        for values in records:
            attributes = [KeyValue(key=k, value=any_value(v)) for k, v in values.items() if v is not None]
            body_value = any_value(body) if body is not None else AnyValue()
            scope.log_records.append(
                LogRecord(event_name=contract.EVENT_GENERATION, attributes=attributes, body=body_value)
            )
        assert _post(collector.http_endpoint, message.SerializeToString()) == 200
        sent += len(records)
        # Bytes that are not an OTLP request: refused (400) or, if they happen to parse, accepted.
        assert _post(collector.http_endpoint, garbage) in {200, 400}
        json_status = _post(collector.http_endpoint, garbage, "application/json")
        assert json_status in ({200, 400} if _is_utf8(garbage) else {200, 400, 500})  # 500: see the xfail below
        assert collector.healthy()

    one_request()
    # Garbage that parses as protobuf may carry records too; the sampler's own count is the reference.
    wait_for(lambda: metric_sum(collector.metrics(), "otelcol_valgen_sampler_records_received") >= sent, 10, "received")
    # Every group closes decision_wait (2 s) after its last record; then each has one summary in the file.
    wait_for(lambda: metric_sum(collector.metrics(), "otelcol_valgen_sampler_groups_open") == 0, 20, "groups closed")
    closed = metric_sum(collector.metrics(), "otelcol_valgen_sampler_groups_closed")

    def summaries() -> list[Record]:
        return [s for group in by_step(file_records(collector.file_path))[1].values() for s in group]

    wait_for(lambda: len(summaries()) == closed, 20, f"{closed:.0f} summaries in the file")
    values = collector.metrics()
    received = metric_sum(values, "otelcol_valgen_sampler_records_received")
    dropped = {
        reason: metric_sum(values, "otelcol_valgen_sampler_records_dropped", reason=reason)
        for reason in ("missing_attribute", "invalid_attribute", "late")
    }
    assert dropped["missing_attribute"] > 0, dropped
    assert dropped["invalid_attribute"] > 0, dropped
    seen = sum(s.attributes[contract.SEEN] for s in summaries())
    assert not math.isnan(received)
    assert seen > 0  # well-typed records formed groups, so both outcomes were exercised
    # A generation of a usable group whose id, key or seed is not usable is counted twice by design:
    # in its group's seen (as valgen.dropped.invalid) and in the dropped metric (the processor's README).
    in_groups = sum(s.attributes[f"{contract.DROPPED_PREFIX}invalid"] for s in summaries())
    assert seen + sum(dropped.values()) - in_groups == received, (seen, dropped, in_groups, received)

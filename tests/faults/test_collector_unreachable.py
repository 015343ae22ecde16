"""User story: the collector is unreachable for the whole training job.

The job waits at most ``OTEL_VALGEN_FLUSH_TIMEOUT`` once, at the first step end; from then
on the endpoint counts as away and no step end waits for it. It never sees an exception and
finds every record accounted for in ``vg.stats()``: spooled to local files (spool on, sent by
the courier once the endpoint is back) or counted as failed (spool off).
No collector binary is needed: nothing listens on the endpoint.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen import contract
from tests.e2e.harness import free_port, wait_for
from tests.faults.conftest import file_records

FLUSH_TIMEOUT_S = 1.0
SLACK_S = 0.5  # thread start/join and scheduling on a loaded 2-core machine
STEPS = 3
PER_STEP = 40
K = 8


def _handed(stats: dict[str, int]) -> int:
    """Records handed to the SDK: generations and the start, progress and end records of the blocks."""
    return sum(
        stats.get(name, 0)
        for name in ("generations_emitted", "start_records_emitted", "progress_records_emitted", "end_records_emitted")
    )


def _job() -> tuple[list[float], list[bool | None]]:
    """A training loop of STEPS validation steps; how long each step's end blocked, and what it returned."""
    blocked, confirmed = [], []
    for step in range(1, STEPS + 1):
        with vg.validation(step=step, source="trainer", sources_expected=1) as block:
            inputs = [f"prompt {step}-{i} \x00 \udc80" for i in range(PER_STEP)]
            vg.log_generations(inputs, [f"out {i}" for i in range(PER_STEP)], [float(i) for i in range(PER_STEP)])
            started = time.monotonic()
        blocked.append(time.monotonic() - started)
        confirmed.append(block.flushed)
    return blocked, confirmed


@pytest.mark.parametrize(
    ("protocol", "spool", "presample"),
    [("http/protobuf", True, True), ("grpc", False, True), ("http/protobuf", True, False)],
    ids=["http-spool-presampled", "grpc-no-spool-presampled", "http-spool-all-records"],
)
@pytest.mark.timeout(60)
def test_unreachable_collector_is_waited_for_once_and_every_record_is_accounted(
    protocol: str, spool: bool, presample: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first step end waits <= flush timeout, later ones do not wait; spooled + failed = every record."""
    # The SDK retries longer than the caller may wait, whatever its jitter: within 4 s it retries
    # after 0.8-1.2 s and again after 1.6-2.4 s more, so an export takes at least 2.4 s, more than
    # the 1 s flush timeout. (With 3 s it could give up after the first retry, at 0.8 s: then a
    # step end might not time out, and flush_timeouts could stay 0.)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "4")
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    vg.configure(
        run_id="faults-down",
        count=K,
        endpoint=endpoint,
        protocol=protocol,
        spool=spool,
        presample=presample,
        flush_timeout_s=FLUSH_TIMEOUT_S,
    )
    blocked, confirmed = _job()
    assert confirmed == [False] * STEPS  # no step end claims a delivery that did not happen
    assert blocked[0] <= FLUSH_TIMEOUT_S + SLACK_S, blocked
    # Away from the first failure on: no wait for the endpoint (the spool write, if any, is milliseconds;
    # the figures are in bench/endpoint_failures_bench.py).
    assert max(blocked[1:]) < FLUSH_TIMEOUT_S / 2, blocked
    started = time.monotonic()
    vg.shutdown()  # also bounded by the flush timeout
    assert time.monotonic() - started <= FLUSH_TIMEOUT_S + SLACK_S

    generations = STEPS * (K if presample else PER_STEP)
    stats = vg.stats()  # final: shutdown ended every block and stopped the progress thread
    assert stats["start_records_emitted"] == STEPS  # one start record per step
    assert stats["end_records_emitted"] == STEPS  # one end record per step
    assert stats["generations_seen"] == STEPS * PER_STEP
    assert stats["generations_emitted"] == generations
    handed = _handed(stats)  # plus a progress record per progress interval a block was open
    undelivered = "records_spooled" if spool else "records_export_failed"
    wait_for(lambda: vg.stats()[undelivered] == handed, 20, f"{undelivered} == {handed}")
    stats = vg.stats()
    assert stats["records_exported"] == 0
    assert stats["records_unconfirmed"] == 0
    assert stats["records_spooled"] + stats["records_export_failed"] == handed
    assert stats["endpoint_outages"] == 1, stats  # one outage: waited for once, then spooled
    assert stats.get("internal_errors", 0) == 0

    spooled = [r for path in sorted((tmp_path / "sink" / "spool").glob("*.jsonl")) for r in file_records(path)]
    if not spool:
        assert spooled == []
        return
    generation_records = [r for r in spooled if r.event == contract.EVENT_GENERATION]
    assert len(generation_records) == generations
    assert len({(r.attributes[contract.STEP], r.attributes[contract.SAMPLE_ID]) for r in generation_records}) == (
        generations
    )
    assert len(spooled) == handed
    for event in (contract.EVENT_VALIDATION_START, contract.EVENT_VALIDATION_END):
        steps = sorted(r.attributes[contract.STEP] for r in spooled if r.event == event)
        assert steps == list(range(1, STEPS + 1)), event


@pytest.mark.timeout(60)
def test_unreachable_collector_spools_records_even_when_the_sdk_queue_overflows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more records than the SDK's queue holds, every record still ends spooled (README: nothing lost)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "100")  # a small queue stands in for a 20,000-record step
    monkeypatch.setenv("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "50")
    vg.configure(
        run_id="faults-overflow", endpoint=f"http://127.0.0.1:{free_port()}", presample=False, flush_timeout_s=1
    )
    with vg.validation(step=1, source="trainer"):
        vg.log_generations([f"p{i}" for i in range(300)], ["o"] * 300)
    vg.shutdown()
    stats = vg.stats()
    assert (stats["start_records_emitted"], stats["generations_emitted"], stats["end_records_emitted"]) == (1, 300, 1)
    handed = _handed(stats)
    wait_for(lambda: vg.stats()["records_unconfirmed"] == 0, 10, "every record confirmed either way")
    stats = vg.stats()
    assert stats["records_spooled"] == handed, stats
    assert stats.get("dropped.queue_full", 0) == 0, stats

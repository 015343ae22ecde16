"""User story: two processes of one run share a spool folder while one of them is cut off.

Process A cannot reach its endpoint and writes its records to its spool; process B of the same
run starts with a working endpoint. B's courier sends the spools that ended processes of the run
left behind, but never a live process's: A still appends to its file, and a file sent and
removed under it would lose what A writes next. Once A has ended, the run's next process sends
A's whole spool, every step of it.

The endpoint is a real OTLP/HTTP server on loopback; A is a process of its own; both are the real
library with its real OTLP/HTTP exporter and courier.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen import contract
from tests.e2e.harness import Record, records_of_request, wait_for
from tests.support.otlp_http import OtlpHttpStandIn, otlp_http_stand_in
from tests.support.ports import free_port

RUN_ID = "shared-run"
K = 4
PER_STEP = 6
# How long B's courier is given to (wrongly) send A's live spool: it claims spools as it starts.
CLAIM_WINDOW_S = 2.0

# Process A: one block-less step while its endpoint refuses connections (spooled), then, when told
# on stdin, a second step, and its end with the spool still unsent.
_PROCESS_A = textwrap.dedent(
    """
    import sys, time
    import otel_valgen as vg

    run_id, endpoint = sys.argv[1:3]
    vg.configure(run_id=run_id, endpoint=endpoint, source="A", count={k}, flush_timeout_s=1, progress_interval_s=0)

    def step(n):
        ids = [f"A-{{n}}-{{i}}" for i in range({per_step})]
        inputs, outputs = [f"q {{i}}" for i in ids], [f"a {{i}}" for i in ids]
        vg.log_generations(inputs, outputs, [0.5] * len(ids), step=n, sample_ids=ids)

    step(1)
    deadline = time.monotonic() + 30
    while not vg.stats()["records_spooled"] and time.monotonic() < deadline:
        time.sleep(0.05)
    print("spooled", vg.stats()["records_spooled"], flush=True)
    sys.stdin.readline()
    step(2)
    vg.shutdown()
    print("ended", vg.stats()["records_spooled"], flush=True)
    """
).format(k=K, per_step=PER_STEP)


def _records_of_a(stand_in: OtlpHttpStandIn) -> list[Record]:
    return [
        record
        for request in list(stand_in.requests)
        for record in records_of_request(request)
        if record.attributes.get(contract.SOURCE) == "A"
    ]


def _received_of_a(stand_in: OtlpHttpStandIn) -> set[tuple[int, str, object]]:
    """Each of A's records the endpoint received, as (step, event, sample id): one delivered twice is one."""
    return {
        (int(r.attributes[contract.STEP]), r.event, r.attributes.get(contract.SAMPLE_ID))
        for r in _records_of_a(stand_in)
    }


@pytest.mark.timeout(90)
def test_a_live_processs_spool_is_never_sent_by_another_process_of_its_run(tmp_path: Path) -> None:
    """A spool whose process still runs is never sent by another process of its run; once it ended, all of it is."""
    shared = tmp_path / "valgen"
    env = {**os.environ, "OTEL_VALGEN_DIR": str(shared)}
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: connections are refused
    log_of_a = tmp_path / "process-a.log"
    with log_of_a.open("w", encoding="utf-8") as log:
        process_a = subprocess.Popen(
            [sys.executable, "-c", _PROCESS_A, RUN_ID, dead],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        assert process_a.stdout is not None
        assert process_a.stdin is not None
        spooled = process_a.stdout.readline().split()
        assert spooled[:1] == ["spooled"], log_of_a.read_text(encoding="utf-8")
        assert int(spooled[1]) > 0
        (spool_of_a,) = (shared / "spool").glob("*.jsonl")

        with otlp_http_stand_in(path=None) as stand_in:
            vg.configure(run_id=RUN_ID, endpoint=stand_in.base_url, source="B", directory=str(shared))
            time.sleep(CLAIM_WINDOW_S)
            assert _records_of_a(stand_in) == [], "B sent the spool of a process that still runs"
            assert spool_of_a.exists()
            assert vg.stats()["records_resent"] == 0

            process_a.stdin.write("\n")
            process_a.stdin.flush()
            ended = process_a.stdout.readline().split()
            assert ended[:1] == ["ended"], log_of_a.read_text(encoding="utf-8")
            assert process_a.wait(30) == 0
            vg.shutdown()

            # The run's next process (configured after A ended) sends A's spool: both steps, whole.
            vg.configure(run_id=RUN_ID, endpoint=stand_in.base_url, source="B", directory=str(shared))
            wait_for(lambda: len(_received_of_a(stand_in)) >= 2 * (K + 2), 30, "A's spool sent once A ended")
            wait_for(lambda: not spool_of_a.exists(), 30, "A's spool removed once sent in full")
            vg.shutdown()
        events = sorted((step, event) for step, event, _ in _received_of_a(stand_in))
        whole = [contract.EVENT_GENERATION] * K + [contract.EVENT_VALIDATION_END, contract.EVENT_VALIDATION_START]
        assert events == [(step, event) for step in (1, 2) for event in sorted(whole)]  # both steps, whole
    finally:
        if process_a.poll() is None:
            process_a.kill()
            process_a.wait(10)

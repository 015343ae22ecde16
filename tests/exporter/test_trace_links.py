"""``TraceLinks``: a link waits for its trace off the caller's thread, bounded in time and number.

The tracker is a stand-in here (what it links, which traces it has); tests/exporter/test_mlflow.py
links against a real MLflow tracking server, tests/e2e/test_mlflow_run_links.py end to end.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from otel_valgen.exporter.trace_links import LinkRefused, TraceLinks

from .conftest import wait_for

FIX = "do this"


class Tracker:
    """Links made and traces present; a link or a look-up can be made to fail."""

    def __init__(self) -> None:
        self.traces: set[str] = set()
        self.links: list[tuple[str, list[str]]] = []
        self.down = False
        self.refuse = False
        self.calls = 0
        self.lock = threading.Lock()

    def link(self, run_id: str, trace_ids: list[str]) -> None:
        with self.lock:
            self.calls += 1
            if self.refuse:
                raise LinkRefused("ENDPOINT_NOT_FOUND: no such endpoint")
            if self.down:
                raise OSError("connection refused")
            self.links.append((run_id, list(trace_ids)))

    def exists(self, trace_id: str) -> bool:
        with self.lock:
            if self.down:
                raise OSError("connection refused")
            return trace_id in self.traces


def links_for(tracker: Tracker, **kwargs: float) -> TraceLinks:
    """Links to ``tracker`` with short waits between tries (``kwargs`` override them)."""
    settings = {"wait_s": 5.0, "first_interval_s": 0.05, "max_interval_s": 0.2} | kwargs
    return TraceLinks("tracker", tracker.link, tracker.exists, fix=FIX, **settings)  # type: ignore[arg-type]


def test_a_trace_that_comes_after_the_write_is_linked_when_it_comes() -> None:
    """``add`` returns at once; the link is made at once and counted as made once the trace is there."""
    tracker = Tracker()
    links = links_for(tracker)
    started = time.monotonic()
    links.add("tr-1", "run-a", "run r step 1 (validation)")
    assert time.monotonic() - started < 0.05
    wait_for(lambda: tracker.links == [("run-a", ["tr-1"])], 5)
    time.sleep(0.3)  # a few tries without the trace
    assert links.stats() == {"made": 0, "pending": 1, "given_up": 0}
    tracker.traces.add("tr-1")
    wait_for(lambda: links.stats() == {"made": 1, "pending": 0, "given_up": 0}, 5)
    assert tracker.links == [("run-a", ["tr-1"])]  # linked once: later tries only looked for the trace
    links.add("tr-1", "run-a", "run r step 1 (validation)")  # the step written again (a correction)
    time.sleep(0.2)
    assert links.stats()["made"] == 1
    assert tracker.calls == 1
    links.close()


def test_a_trace_that_never_comes_is_given_up_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    """Past the wait the link is given up: counted, and the first one logged as a warning with the fix."""
    tracker = Tracker()
    links = links_for(tracker, wait_s=0.4)
    with caplog.at_level(logging.WARNING, logger="otel_valgen.exporter"):
        links.add("tr-1", "run-a", "run r step 1 (validation)")
        links.add("tr-2", "run-a", "run r step 2 (validation)")
        wait_for(lambda: links.stats() == {"made": 0, "pending": 0, "given_up": 2}, 5)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "run r step 1 (validation) (tr-1) could not be linked to run run-a" in warning
    assert "did not reach the tracker within 0.4 s" in warning
    assert FIX in warning
    links.close()


def test_a_tracker_that_is_down_is_retried_until_it_is_back() -> None:
    """Failures to link or to look are retried; nothing is given up before the wait."""
    tracker = Tracker()
    tracker.down = True
    tracker.traces.add("tr-1")
    links = links_for(tracker)
    links.add("tr-1", "run-a", "step 1")
    wait_for(lambda: tracker.calls >= 3, 5)
    assert links.stats() == {"made": 0, "pending": 1, "given_up": 0}
    tracker.down = False
    wait_for(lambda: links.stats() == {"made": 1, "pending": 0, "given_up": 0}, 5)
    links.close()


def test_a_refused_link_is_given_up_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """A tracker that can never link (no such endpoint) gives the link up without waiting."""
    tracker = Tracker()
    tracker.refuse = True
    links = links_for(tracker, wait_s=60)
    with caplog.at_level(logging.WARNING, logger="otel_valgen.exporter"):
        links.add("tr-1", "run-a", "step 1")
        wait_for(lambda: links.stats()["given_up"] == 1, 5)
    assert "the tracker refused the link: ENDPOINT_NOT_FOUND" in caplog.text
    links.close()


def test_the_pending_list_is_bounded_the_oldest_given_up_for_room() -> None:
    """One link more than ``max_pending`` gives up the oldest; the others still wait."""
    tracker = Tracker()
    links = TraceLinks("tracker", tracker.link, tracker.exists, wait_s=60, fix=FIX, max_pending=2)
    for n in (1, 2, 3):
        links.add(f"tr-{n}", "run-a", f"step {n}")
    assert links.stats() == {"made": 0, "pending": 2, "given_up": 1}
    tracker.traces |= {"tr-2", "tr-3"}
    wait_for(lambda: links.stats() == {"made": 2, "pending": 0, "given_up": 1}, 5)
    links.close()


def test_links_are_made_per_run_in_calls_of_at_most_100() -> None:
    """Links due together are made in one call per run, 100 ids at most per call; each once."""
    tracker = Tracker()
    tracker.traces |= {f"tr-{n}" for n in range(150)} | {"tr-x"}
    links = links_for(tracker)
    with links._cond:  # queue them all before the first try
        for n in range(150):
            links.add(f"tr-{n}", "run-a", f"step {n}")
        links.add("tr-x", "run-b", "step x")
    wait_for(lambda: links.stats()["made"] == 151, 5)
    assert sorted((run, len(ids)) for run, ids in tracker.links) == [("run-a", 50), ("run-a", 100), ("run-b", 1)]
    linked = [trace_id for _, ids in tracker.links for trace_id in ids]
    assert sorted(linked) == sorted({*(f"tr-{n}" for n in range(150)), "tr-x"})
    links.close()


def test_close_tries_the_links_never_tried() -> None:
    """A link added just before ``close`` is still made (``push`` closes right after its writes)."""
    tracker = Tracker()
    tracker.traces.add("tr-1")
    links = links_for(tracker)
    links.add("tr-1", "run-a", "step 1")
    links.close()
    assert tracker.links == [("run-a", ["tr-1"])]
    assert links.stats()["made"] == 1

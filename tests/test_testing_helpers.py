"""otel_valgen.testing, which users' own tests rely on."""

from __future__ import annotations

from pathlib import Path

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.testing import capture_records


def test_capture_records_restores_the_configuration_it_replaced(tmp_path: Path) -> None:
    """After the block, the job's own configuration is back: same run id, same sink."""
    outer = vg.configure(run_id="outer", directory=str(tmp_path / "outer"))
    assert outer is not None
    with capture_records(run_id="inner", count=2) as records:
        vg.log_generations(["q"], ["a"], [1.0], step=1)
    assert {r["attributes"][contract.RUN_ID] for r in records} == {"inner"}
    assert contract.EVENT_GENERATION in [r["event_name"] for r in records]
    restored = vg.current_settings()
    assert restored is not None
    assert (restored.run_id, restored.directory) == ("outer", outer.directory)


def test_capture_records_without_a_previous_configuration_leaves_none() -> None:
    """Nothing configured before the block: nothing configured after it."""
    with capture_records(run_id="only") as records:
        vg.log_generations(["q"], ["a"], None, step=1)
    assert [r["event_name"] for r in records].count(contract.EVENT_GENERATION) == 1
    assert vg.current_settings() is None

"""The watch-list rate (``valgen.sample_rate``) is a rule of rollout steps only.

``otel-valgen show``, like the collector, applies a record's rate to rollout groups: a validation
step keeps its k smallest keys whatever rate its records carry, and says no rate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import otel_valgen as vg
from otel_valgen import contract
from tests.support.process import run_show

K = 3
N = 6
# A rate whose threshold (floor(rate * 2**63) = 2) no sample key of these prompts is below.
TINY_RATE = math.ldexp(1.0, -62)


def _with_rate(line: str, rate: float) -> str:
    """One OTLP/JSON line with ``valgen.sample_rate`` added to every record."""
    request = json.loads(line)
    for resource_logs in request["resourceLogs"]:
        for scope_logs in resource_logs["scopeLogs"]:
            for record in scope_logs["logRecords"]:
                record["attributes"].append({"key": contract.SAMPLE_RATE, "value": {"doubleValue": rate}})
    return json.dumps(request)


def test_show_keeps_k_of_a_validation_step_whatever_rate_its_records_carry(tmp_path: Path) -> None:
    """A validation step whose records carry a watch-list rate still keeps its k smallest keys, with no rate."""
    plain, rated = tmp_path / "plain", tmp_path / "rated"
    vg.configure(run_id="r", count=K, seed=3, launch_id="L", directory=str(plain), progress_interval_s=0)
    with vg.validation(step=1, source="trainer"):
        vg.log_generations([f"q{i}" for i in range(N)], ["a"] * N, [0.5] * N)
    vg.shutdown()
    rated.mkdir()
    for path in plain.glob("*.jsonl"):
        lines = path.read_text(encoding="utf-8").splitlines()
        (rated / path.name).write_text("".join(_with_rate(line, TINY_RATE) + "\n" for line in lines), encoding="utf-8")

    (expected,) = map(json.loads, run_show(plain, "json").splitlines())
    (step,) = map(json.loads, run_show(rated, "json").splitlines())
    assert (step["kind"], step["seen"], step["kept"]) == ("validation", N, K)
    assert [g["sample_id"] for g in step["generations"]] == [g["sample_id"] for g in expected["generations"]]
    assert len(step["generations"]) == K
    assert step["sample_rate"] is None

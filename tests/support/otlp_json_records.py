"""OTLP/JSON generation records as an SDK sends them, for tests that build requests by hand."""

from __future__ import annotations

from typing import Any

from otel_valgen import contract
from otel_valgen.sampling import LEGACY_KEY_VERSION, sample_key

SEED = 42


def otlp_generation(sample_id: str, version: int | None, *, keyed: bool = True, count: int = 6) -> dict[str, Any]:
    """An OTLP/JSON generation record as an SDK of key ``version`` sends it (None: an old SDK)."""
    attributes: dict[str, Any] = {
        contract.RUN_ID: "r",
        contract.STEP: 1,
        contract.SAMPLE_ID: sample_id,
        contract.SEED: SEED,
        contract.SAMPLE_COUNT: count,
    }
    if keyed:
        attributes[contract.SAMPLE_KEY] = sample_key(SEED, sample_id, version or LEGACY_KEY_VERSION)
    if version is not None:
        attributes[contract.KEY_VERSION] = version

    def value(v: Any) -> dict[str, Any]:
        return {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}

    log = {
        "eventName": contract.EVENT_GENERATION,
        "attributes": [{"key": key, "value": value(v)} for key, v in attributes.items()],
        "body": {"kvlistValue": {"values": []}},
    }
    return {"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": [log]}]}]}

"""Key versions: the SDK sends version 2, old files (version 1) stay readable, a step uses one version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import contract
from otel_valgen.cli.main import main
from otel_valgen.reader import Generation, ReadError, read_paths, records_from_request
from otel_valgen.sampling import KEY_VERSION, LEGACY_KEY_VERSION, SortKey, bottom_k, sample_key
from otel_valgen.selection import select_steps
from otel_valgen.testing import capture_records
from tests.support.otlp_json_records import SEED, otlp_generation

IDS = [f"p{i}/0" for i in range(40)]


def _read(requests: list[dict[str, Any]]) -> list[Generation]:
    records = [record for request in requests for record in records_from_request(request)]
    return [record for record in records if isinstance(record, Generation)]


def _oracle(version: int) -> list[str]:
    return [sid for _, sid in bottom_k(((SortKey.of(sample_key(SEED, sid, version), sid), sid) for sid in IDS), 6)]


def test_the_sdk_sends_version_2_keys() -> None:
    """Every generation record carries valgen.key_version 2 and the version-2 key of its id."""
    with capture_records(run_id="r", count=50, seed=SEED) as records:
        vg.log_generations(["a", "b", "a"], ["x", "y", "z"], None, step=1)
        vg.log_generations(["c"], ["w"], None, step=1, sample_ids=["uid-9"])
        vg.end_step(1)
    generations = [r for r in records if r["event_name"] == contract.EVENT_GENERATION]
    assert len(generations) == 4
    for record in generations:
        attributes = record["attributes"]
        assert attributes[contract.KEY_VERSION] == KEY_VERSION == 2
        assert attributes[contract.SAMPLE_KEY] == sample_key(SEED, attributes[contract.SAMPLE_ID])


@pytest.mark.parametrize("keyed", [True, False])
def test_old_files_are_sampled_with_version_1(keyed: bool) -> None:
    """Records without valgen.key_version (earlier releases) are version 1, keyed or not."""
    generations = _read([otlp_generation(sid, None, keyed=keyed) for sid in IDS])
    assert all(g.key_version is None for g in generations)
    (step,) = select_steps(generations)
    assert [g.sample_id for g in step.generations] == _oracle(LEGACY_KEY_VERSION)


@pytest.mark.parametrize("keyed", [True, False])
def test_version_2_files_are_sampled_with_version_2(keyed: bool) -> None:
    """Records with valgen.key_version 2 are compared by version-2 keys, sent or computed."""
    (step,) = select_steps(_read([otlp_generation(sid, KEY_VERSION, keyed=keyed) for sid in IDS]))
    assert [g.sample_id for g in step.generations] == _oracle(KEY_VERSION)
    assert _oracle(KEY_VERSION) != _oracle(LEGACY_KEY_VERSION)  # the test tells the versions apart


@pytest.mark.parametrize("first", [KEY_VERSION, None])
def test_a_step_mixing_versions_uses_its_first_generations_version(first: int | None) -> None:
    """The other version's keys are recomputed from seed and id: the bottom-k of all in the first's version."""
    other = None if first == KEY_VERSION else KEY_VERSION
    requests = [otlp_generation(sid, first) for sid in IDS[:20]] + [otlp_generation(sid, other) for sid in IDS[20:]]
    (step,) = select_steps(_read(requests))
    assert [g.sample_id for g in step.generations] == _oracle(first or LEGACY_KEY_VERSION)


@pytest.mark.parametrize("version", ["3", 0, 3])
def test_unknown_key_versions_are_skipped_with_a_warning(tmp_path: Path, version: Any) -> None:
    """A generation of a key version this release does not know is reported and left out."""
    request = otlp_generation("p0/0", None)
    log = request["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    log["attributes"].append(
        {
            "key": contract.KEY_VERSION,
            "value": {"intValue": str(version)} if isinstance(version, int) else {"stringValue": version},
        }
    )
    path = tmp_path / "unknown.jsonl"
    path.write_text(json.dumps(otlp_generation("p1/0", None)) + "\n" + json.dumps(request) + "\n", encoding="utf-8")
    errors: list[ReadError] = []
    generations = [r for r in read_paths([path], errors.append) if isinstance(r, Generation)]
    assert [g.sample_id for g in generations] == ["p1/0"]
    assert len(errors) == 1
    assert contract.KEY_VERSION in errors[0].message
    result = CliRunner().invoke(main, ["show", str(path), "--format", "json"])
    assert contract.KEY_VERSION in result.stderr

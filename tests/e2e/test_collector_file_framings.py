"""`otel-valgen show` reads every file the collector's file exporter writes, whatever its framing.

The built collector writes the same records through several file exporters: plain JSON lines,
``compression: zstd`` (length-prefixed zstd frames by default; one zstd stream of JSON lines
with the ``exporter.file.nativeCompression`` gate), and ``format: proto`` (length-prefixed,
with and without zstd). Records come from the real SDK over OTLP/HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import otel_valgen as vg
from otel_valgen import _process
from otel_valgen._framing import ZSTD_MAGIC
from otel_valgen.cli.main import main
from otel_valgen.reader import Generation, ReadError, read_paths
from otel_valgen.sampling import untagged
from tests.e2e import harness
from tests.support.require import require_or_skip

NATIVE_GATE = "exporter.file.nativeCompression"
STEPS, K = 3, 4

# name -> exporter settings beyond its path; each name is also the file's name
EXPORTERS = {
    "plain.jsonl": {"format": "json"},
    "json.jsonl.zst": {"format": "json", "compression": "zstd"},
    "proto.binpb": {"format": "proto"},
    "proto.binpb.zst": {"format": "proto", "compression": "zstd"},
    "rotated.jsonl.zst": {"format": "json", "compression": "zstd", "rotation": {"max_megabytes": 10}},
}


def _config(directory: Path) -> Path:
    exporters = {
        f"file/{index}": {"path": str(directory / name), "flush_interval": "100ms", **settings}
        for index, (name, settings) in enumerate(EXPORTERS.items())
    }
    for settings in exporters.values():
        if "rotation" in settings:
            del settings["flush_interval"]  # rotation writes unbuffered
    config = {
        "extensions": {"health_check": {"endpoint": "${env:VALGEN_HEALTH_ENDPOINT}"}},
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": "${env:VALGEN_OTLP_HTTP_ENDPOINT}"}}}},
        "exporters": exporters,
        "service": {
            "extensions": ["health_check"],
            "pipelines": {"logs": {"receivers": ["otlp"], "exporters": list(exporters)}},
            "telemetry": {"metrics": {"level": "none"}},
        },
    }
    path = directory / "config.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return path


def _emit(endpoint: str, sink: Path) -> None:
    """STEPS steps of 20 generations each, one OTLP request (at least) per step."""
    vg.configure(
        run_id="framings", count=K, endpoint=endpoint, protocol="http/protobuf", directory=str(sink), source="trainer"
    )
    for step in range(1, STEPS + 1):
        with vg.validation(step=step):
            vg.log_generations(
                [f"question {i}" for i in range(20)],
                [f"answer {i} at {step}" for i in range(20)],
                [i / 20 for i in range(20)],
                ground_truths=[str(i) for i in range(20)],
                sample_ids=[f"uid-{i}" for i in range(20)],
            )
        vg.flush()
    vg.shutdown()
    _process.reset_for_testing()  # this runs once per module, outside the per-test reset


def _write_files(tmp_path: Path, feature_gates: tuple[str, ...]) -> Path:
    directory = tmp_path / ("native" if feature_gates else "default")
    directory.mkdir()
    collector = harness.start_collector(tmp_path, directory.name, [str(_config(directory))], {}, feature_gates)
    try:
        _emit(f"http://{collector.http_endpoint}", directory / "sink")
    finally:
        assert collector.stop() == 0, collector.log_tail()
    return directory


def _show(path: Path) -> list[dict[str, Any]]:
    """What `show` prints, each id without its part's tag (the two collectors' files come from two emissions)."""
    result = CliRunner().invoke(main, ["show", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert not result.stderr
    steps = [json.loads(line) for line in result.stdout.splitlines()]
    for step in steps:
        for generation in step["generations"]:
            generation["sample_id"] = untagged(generation["sample_id"])
    return steps


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The files the collector wrote, with the exporter's default framings and with native compression."""
    # the skipping fixture is per test, so it runs after this one
    require_or_skip(
        harness.COLLECTOR_BIN.is_file(), f"{harness.COLLECTOR_BIN} is absent; build it with `make collector`"
    )
    tmp_path = tmp_path_factory.mktemp("framings")
    default, native = _write_files(tmp_path, ()), _write_files(tmp_path, (NATIVE_GATE,))
    return {
        **{f"default/{name}": default / name for name in EXPORTERS},
        **{f"native/{name}": native / name for name in EXPORTERS},
    }


def test_the_files_have_the_framings_the_exporter_documents(written: dict[str, Path]) -> None:
    """Each file starts as its framing does, so the reading tests below cover every framing."""
    heads = {name: path.read_bytes()[:8] for name, path in written.items()}
    assert heads["default/plain.jsonl"] == b'{"resour'
    assert heads["default/json.jsonl.zst"][4:] == ZSTD_MAGIC  # a length, then one zstd frame per message
    assert heads["default/proto.binpb"][4:5] == b"\x0a"  # a length, then protobuf field 1 (resource_logs)
    assert heads["default/proto.binpb.zst"][4:] == ZSTD_MAGIC
    for name in ("json.jsonl.zst", "proto.binpb.zst", "rotated.jsonl.zst"):
        assert heads[f"native/{name}"][:4] == ZSTD_MAGIC  # one zstd stream over the whole file


@pytest.mark.parametrize(
    "name",
    [
        "default/json.jsonl.zst",
        "default/proto.binpb",
        "default/proto.binpb.zst",
        "default/rotated.jsonl.zst",
        "native/json.jsonl.zst",
        "native/proto.binpb.zst",
        "native/rotated.jsonl.zst",
        "native/plain.jsonl",
    ],
)
def test_show_reads_each_framing_as_the_plain_json_lines(written: dict[str, Path], name: str) -> None:
    """`show` prints the same steps from every file the collector wrote as from its plain JSON lines."""
    expected = _show(written["default/plain.jsonl"])
    assert [(o["run_id"], o["step"], o["kept"]) for o in expected] == [("framings", s, K) for s in (1, 2, 3)]
    assert _show(written[name]) == expected


def _unexpected(error: ReadError) -> None:
    raise AssertionError(error)


@pytest.mark.parametrize("name", ["default/json.jsonl.zst", "native/rotated.jsonl.zst"])
def test_a_collector_file_cut_short_keeps_what_came_before_and_says_so(
    written: dict[str, Path], name: str, tmp_path: Path
) -> None:
    """A copy cut inside its last message or frame yields the earlier records and one truncation error."""
    data = written[name].read_bytes()
    cut = tmp_path / Path(name).name
    cut.write_bytes(data[: len(data) - 20])
    errors: list[ReadError] = []
    records = list(read_paths([cut], errors.append))
    full = list(read_paths([written[name]], _unexpected))
    assert 0 < len(records) < len(full)
    assert records == full[: len(records)]
    assert [(e.line, "truncated" in e.message) for e in errors] == [(0, True)]
    assert any(isinstance(r, Generation) for r in records)

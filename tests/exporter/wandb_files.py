"""Read an offline wandb run back from its files: the ``.wandb`` record stream and table JSON.

wandb 0.31 ships no Python reader for the ``.wandb`` file; it is a LevelDB-style log
(a 7-byte ``:W&B`` header, then 32 KiB blocks of chunks, each with a 7-byte header of
CRC, length and type) of ``wandb_internal_pb2.Record`` messages.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

_BLOCK = 32768
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def raw_records(path: Path) -> Iterator[bytes]:
    """Yield the payload of each record in a ``.wandb`` file."""
    data = path.read_bytes()
    ident, _magic, _version = struct.unpack("<4sHB", data[:_HEADER])
    assert ident == b":W&B"
    pos, pending = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        pos += _HEADER
        if length == 0 and kind == 0:
            pos += left - _HEADER
            continue
        chunk, pos = data[pos : pos + length], pos + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""


def records(path: Path) -> Iterator[Any]:
    """Yield the ``Record`` messages of a ``.wandb`` file."""
    for raw in raw_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        yield record


def _nested(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        keys = list(item.nested_key) or [item.key]
        target = out
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = json.loads(item.value_json)
    return out


@dataclass
class RunFiles:
    """What one run id holds across its offline run folders."""

    run_ids: set[str] = field(default_factory=set)
    history: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[Any] = field(default_factory=list)
    exits: list[Any] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)
    artifacts: list[Any] = field(default_factory=list)

    def tables(self, key: str) -> list[tuple[int, dict[str, Any]]]:
        """Return (valgen/step, table JSON) for each history row that logged ``key``."""
        out = []
        for row, folder in self._rows_with_folder():
            value = _get(row, key)
            if isinstance(value, dict) and "path" in value:
                table = json.loads((folder / "files" / value["path"]).read_text(encoding="utf-8"))
                out.append((int(_get(row, "valgen/step")), table))
        return out

    def artifact_tables(self, key: str) -> list[tuple[dict[str, Any], dict[str, Path]]]:
        """Each table logged under ``key`` as the run's table artifact holds it: (table JSON, its files by path).

        wandb writes a logged table to the run's files and to an artifact; only the artifact keeps
        media cells (``wandb.Html``, images) as files of their own, which is what its UI shows.
        Offline, the artifact's files wait in wandb's staging folder, named by the manifest.
        """
        out = []
        for artifact in self.artifacts:
            files = {entry.path: Path(entry.local_path) for entry in artifact.manifest.contents}
            for path, local in files.items():
                if path.endswith(f"{key}.table.json"):
                    out.append((json.loads(local.read_text(encoding="utf-8")), files))
        return out

    def scalars(self, key: str) -> list[tuple[int, Any]]:
        """Return (valgen/step, value) for each history row that logged the scalar ``key``."""
        return [
            (int(_get(row, "valgen/step")), _get(row, key)) for row, _ in self._rows_with_folder() if _has(row, key)
        ]

    def _rows_with_folder(self) -> list[tuple[dict[str, Any], Path]]:
        return [(row, row["__folder"]) for row in self.history]


def _get(row: dict[str, Any], key: str) -> Any:
    if key in row:
        return row[key]
    target: Any = row
    for part in key.split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    return target


def _has(row: dict[str, Any], key: str) -> bool:
    return key in row and not isinstance(row[key], dict)


def read_run(wandb_dir: Path, run_id: str) -> RunFiles:
    """Collect every offline run folder of ``run_id`` under ``wandb_dir``, oldest first."""
    found = RunFiles()
    for folder in sorted((wandb_dir / "wandb").glob(f"offline-run-*-{run_id}")):
        found.folders.append(folder)
        for record in records(folder / f"run-{run_id}.wandb"):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                found.run_ids.add(record.run.run_id)
            elif kind == "history":
                row = {item.key: json.loads(item.value_json) for item in record.history.item if item.key}
                row.update(_nested(item for item in record.history.item if item.nested_key))
                row["__folder"] = folder
                found.history.append(row)
            elif kind == "metric":
                found.metrics.append(record.metric)
            elif kind == "exit":
                found.exits.append(record.exit)
            elif kind == "artifact":
                found.artifacts.append(record.artifact)
    return found

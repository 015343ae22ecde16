"""The TensorBoard backend: verl's per-step text and the step's scalars, in the job's log folder.

The target folder: the records' ``tensorboard.log_dir`` resource attribute (``configure``
fills it from ``TENSORBOARD_DIR``, the variable verl's TensorBoard logger reads) taken under
this exporter's root folder (``--tensorboard-dir``, default the working directory): a relative
path is joined to the root, an absolute one is used when it lies inside the root. Records
that name no folder, or one outside the root, go to ``<root>/otel-valgen/<valgen.run_id>``
(logged once per run): the exporter never writes outside the folder it was given.

Each folder gets an event file of its own (suffix ``.otel-valgen``) next to the trainer's;
TensorBoard merges the files of a folder. Per step it writes verl's markdown under the table
key (``val/generations``, text plugin) and the summary's scalars under ``<table key>/``
(``seen``, ``kept``, ``score_mean``, ...). Events are written with the tensorboard package's
own event-file writer; torch is not needed. A rollout step's text (a section per prompt with
each of its responses, ``otel_valgen.exporter.tables.rollout_markdown``) and scalars go under
the rollout key (``train/generations``) instead. A sample with a conversation shows its turns
in place of the one-line input and output (``conversation_cells.markdown``: a bold role line per
message, each text in a code fence, so it reads as written).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_valgen.exporter.backends import BackendUnavailable, TableKeys, commit_step, written_before, written_key
from otel_valgen.exporter.ledger import Ledger
from otel_valgen.exporter.steps import ClosedStep, summary_scalars
from otel_valgen.exporter.tables import markdown, rollout_markdown

__all__ = ["LOG_DIR_ATTRIBUTE", "TensorBoardBackend", "TensorBoardConfig", "target_dir"]

LOG_DIR_ATTRIBUTE = "tensorboard.log_dir"
_logger = logging.getLogger("otel_valgen.exporter")


@dataclass(frozen=True)
class TensorBoardConfig(TableKeys):
    """Where and what to write (keys and scalars: ``TableKeys``; the text's tag is the key).

    Attributes:
        root: the folder the exporter may write under.
        max_writers: event files kept open at once.

    """

    root: str = "."
    max_writers: int = 16


def target_dir(root: Path, resource: dict[str, Any], group_id: str) -> tuple[Path, bool]:
    """The step's folder under ``root``, and whether it is the one the records named."""
    root = root.resolve()
    named = resource.get(LOG_DIR_ATTRIBUTE)
    if isinstance(named, str) and named.strip():
        candidate = (root / named).resolve()  # an absolute path replaces root in the join
        if candidate == root or root in candidate.parents:
            return candidate, True
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in group_id).strip(".") or "run"
    return root / "otel-valgen" / safe, False


class TensorBoardBackend:
    """Writes closed steps into TensorBoard event files."""

    name = "tensorboard"

    def __init__(self, config: TensorBoardConfig, ledger: Ledger) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
        from tensorboard.plugins.text import plugin_data_pb2

        self.config = config
        self.ledger = ledger
        self._event, self._summary = event_pb2, summary_pb2
        self._tensor, self._shape = TensorProto, TensorShapeProto
        self._text_plugin = plugin_data_pb2.TextPluginData(version=0).SerializeToString()
        self._writers: OrderedDict[Path, Any] = OrderedDict()
        self._warned: set[str] = set()

    def _writer(self, folder: Path) -> Any:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        writer = self._writers.get(folder)
        if writer is not None:
            self._writers.move_to_end(folder)
            return writer
        while len(self._writers) >= self.config.max_writers:
            _, oldest = self._writers.popitem(last=False)
            oldest.close()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            writer = EventFileWriter(str(folder), filename_suffix=".otel-valgen")
        except OSError as error:
            raise BackendUnavailable(f"cannot open an event file in {folder}: {error}") from error
        self._writers[folder] = writer
        return writer

    def _text_value(self, tag: str, text: str) -> Any:
        metadata = self._summary.SummaryMetadata(
            plugin_data=self._summary.SummaryMetadata.PluginData(plugin_name="text", content=self._text_plugin)
        )
        tensor = self._tensor(
            dtype=7,  # DT_STRING
            string_val=[text.encode("utf-8", errors="replace")],
            tensor_shape=self._shape(dim=[self._shape.Dim(size=1)]),
        )
        return self._summary.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)

    def write(self, step: ClosedStep) -> int | None:
        """Write one step's text and scalars; None when it was written before or another attempt is shown.

        Raises:
            BackendUnavailable: the event file cannot be written now.

        """
        if written_before(self, step):
            return None
        folder, named = target_dir(Path(self.config.root), step.resource, step.group_id)
        if not named and step.group_id not in self._warned:
            self._warned.add(step.group_id)
            _logger.warning(
                "tensorboard: run %s names no %s inside %s; writing to %s",
                step.group_id,
                LOG_DIR_ATTRIBUTE,
                self.config.root,
                folder,
            )
        key = written_key(self, step, self.config.key(step))
        values = [self._text_value(key, rollout_markdown(step) if step.rollout else markdown(step))]
        if self.config.scalars:
            for name, value in summary_scalars(step.summary).items():
                values.append(self._summary.Summary.Value(tag=f"{key}/{name}", simple_value=value))
        event = self._event.Event(wall_time=time.time(), step=step.step, summary=self._summary.Summary(value=values))
        writer = self._writer(folder)
        try:
            writer.add_event(event)
            writer.flush()
        except OSError as error:
            self._writers.pop(folder, None)
            raise BackendUnavailable(f"cannot write to {folder}: {error}") from error
        return commit_step(self, step)

    def close(self, *, teardown: bool = False) -> None:
        """Close every event file."""
        del teardown
        while self._writers:
            _, writer = self._writers.popitem(last=False)
            writer.close()

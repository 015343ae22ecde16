"""Read TensorBoard event folders back with TensorBoard's own reader (EventAccumulator)."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator


def _accumulator(folder: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(folder), size_guidance={TENSORS: 0, "scalars": 0})
    accumulator.Reload()
    return accumulator


def read_texts(folder: Path, tag: str) -> dict[int, str]:
    """The text written under ``tag``, by step (the last one written at a step).

    By the events' time: two writers of one second in one process name their files by a counter,
    which does not sort as text past 9.
    """
    accumulator = _accumulator(folder)
    if tag not in accumulator.Tags()["tensors"]:
        return {}
    events = sorted(accumulator.Tensors(tag), key=lambda event: event.wall_time)
    return {event.step: event.tensor_proto.string_val[0].decode() for event in events}


def read_scalars(folder: Path, tag: str) -> dict[int, float]:
    """The scalars written under ``tag``, by step."""
    accumulator = _accumulator(folder)
    if tag not in accumulator.Tags()["scalars"]:
        return {}
    return {event.step: event.value for event in accumulator.Scalars(tag)}

"""How OTLP log messages follow each other in a file, in every layout the CLI reads.

The layout is recognised from the file's first bytes, not from its name:

- **JSON lines**: one OTLP/JSON message per line (the embedded sink; the collector's file
  exporter with ``format: json`` and no compression).
- **A zstd stream** of one or more frames (``zstd`` on a JSON-lines file; the exporter with
  ``compression: zstd`` and the ``exporter.file.nativeCompression`` gate), holding JSON lines
  or length-prefixed messages.
- **Length-prefixed messages**: each a 4-byte big-endian length, then the message: OTLP/JSON or
  OTLP/protobuf, plain or one zstd frame (the exporter's default framing for ``format: proto``,
  and for ``format: json`` with ``compression: zstd``).

A file that ends inside a zstd frame or a message raises ``TruncatedFile`` once everything
before that point has been yielded.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

__all__ = ["ZSTD_MAGIC", "Message", "TruncatedFile", "messages", "unframe"]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1 << 16
_TEXT_START = b"{ \t\r\n"  # what an OTLP/JSON line (or a blank one) starts with


class Message(NamedTuple):
    """One message: its line (or length-prefixed message) number and bytes."""

    number: int
    data: bytes
    line: bool  # a JSON line; else length-prefixed (OTLP/JSON or OTLP/protobuf, maybe one zstd frame)


class TruncatedFile(Exception):
    """The file ends inside a zstd frame or a length-prefixed message: it was cut short."""


def _zstandard() -> Any:
    """The zstandard module, which only compressed files need (``otel-valgen[cli]`` has it)."""
    try:
        import zstandard
    except ImportError as error:
        raise ImportError(
            "reading zstd-compressed collector files needs zstandard: pip install 'otel-valgen[cli]'"
        ) from error
    return zstandard


class _ZstdFrames(io.RawIOBase):
    """The decompressed bytes of every zstd frame in ``raw``, one frame after the other."""

    def __init__(self, raw: BinaryIO) -> None:
        zstandard = _zstandard()
        self._raw = raw
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._frame: Any = None  # the decompressor of the frame being read, None between frames
        self._frame_start = 0
        self._input = b""
        self._output = memoryview(b"")
        self._offset = 0  # compressed bytes consumed

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` from the next decompressed bytes; 0 at the end of the last frame."""
        while not self._output:
            if not self._input:
                self._input = self._raw.read(_CHUNK)
                if not self._input:
                    if self._frame is not None:
                        raise TruncatedFile(f"it ends inside the zstd frame that starts at byte {self._frame_start}")
                    return 0
            if self._frame is None:
                self._frame, self._frame_start = self._new(), self._offset
            data, self._input = self._input, b""
            self._output = memoryview(self._frame.decompress(data))
            if self._frame.eof:
                self._input = self._frame.unused_data
                self._frame = None
            self._offset += len(data) - len(self._input)
        size = min(len(buffer), len(self._output))
        buffer[:size] = self._output[:size]
        self._output = self._output[size:]
        return size


def unframe(payload: bytes) -> bytes:
    """``payload`` itself, or its content when it is one zstd frame."""
    if not payload.startswith(ZSTD_MAGIC):
        return payload
    frame = _zstandard().ZstdDecompressor().decompressobj()
    content = frame.decompress(payload)
    if not frame.eof:
        raise TruncatedFile("the message's zstd frame is cut short")
    return bytes(content)


def _length_prefixed(stream: io.BufferedReader) -> Iterator[Message]:
    number = 0
    while header := stream.read(4):
        number += 1
        size = int.from_bytes(header, "big")
        payload = stream.read(size) if len(header) == 4 else b""
        if len(header) < 4 or len(payload) < size:
            why = "not an OTLP file, or cut short" if number == 1 else "cut short"
            raise TruncatedFile(f"message {number} declares {size} bytes, {len(payload)} follow ({why})")
        yield Message(number, payload, line=False)


def _layout(stream: io.BufferedReader, *, compressed: bool) -> Iterator[Message]:
    head = stream.peek(len(ZSTD_MAGIC))
    if not head:
        return
    if head.startswith(ZSTD_MAGIC) and not compressed:
        yield from _layout(io.BufferedReader(_ZstdFrames(stream), _CHUNK), compressed=True)
    elif head[:1] in _TEXT_START:
        yield from (Message(number, line, line=True) for number, line in enumerate(stream, start=1))
    else:
        yield from _length_prefixed(stream)


def messages(path: Path) -> Iterator[Message]:
    """Each message of ``path``, in order; a length-prefixed message's zstd frame is left to ``unframe``."""
    with path.open("rb") as stream:
        yield from _layout(stream, compressed=False)

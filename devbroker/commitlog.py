"""The broker-wide commit log: stored-message records back to back, addressed by byte offset.

It lives in memory as segments; with a directory each segment is also a file named by its 20-digit
start offset, as RocketMQ names its commit-log files (appended without fsync, flushed on stop). With
``max_bytes`` the oldest whole segments are dropped, so old queue offsets expire as on a real broker.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_MIN_RECORD = 48  # the fixed head of a stored record
_I32 = struct.Struct(">i")


class CommitLogCorrupt(ValueError):
    pass


class _Segment:
    __slots__ = ("data", "file", "start")

    def __init__(self, start: int, data: bytearray, file: BinaryIO | None) -> None:
        self.start = start
        self.data = data
        self.file = file


class CommitLog:
    def __init__(
        self,
        directory: Path | None = None,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_bytes: int | None = None,
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        if segment_bytes < 1024:
            raise ValueError(f"segment_bytes must be at least 1024, not {segment_bytes}")
        if max_bytes is not None and max_bytes < segment_bytes:
            raise ValueError(f"max_bytes ({max_bytes}) must be at least one segment ({segment_bytes})")
        self._dir = directory
        self._segment_bytes = segment_bytes
        self._max_bytes = max_bytes
        self.on_drop = on_drop
        self._segments: list[_Segment] = []
        self._starts: list[int] = []
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._load(directory)
        if not self._segments:
            self._segments.append(self._new_segment(0))
            self._starts.append(0)
        self._size = sum(len(s.data) for s in self._segments)

    @property
    def min_offset(self) -> int:
        return self._segments[0].start

    @property
    def end(self) -> int:
        """The offset the next appended record will get."""
        last = self._segments[-1]
        return last.start + len(last.data)

    def append(self, record: bytes) -> int:
        last = self._segments[-1]
        offset = last.start + len(last.data)
        last.data += record
        if last.file is not None:
            last.file.write(record)
        self._size += len(record)
        if len(last.data) >= self._segment_bytes:
            self._roll(offset + len(record))
        return offset

    def read(self, offset: int, size: int) -> bytes:
        seg = self._segments[-1]
        if offset < seg.start:
            seg = self._segments[bisect.bisect_right(self._starts, offset) - 1]
        pos = offset - seg.start
        return bytes(seg.data[pos : pos + size])

    def read_record(self, offset: int) -> bytes | None:
        """The record stored at ``offset``, or None if no record can start there."""
        if not self.min_offset <= offset <= self.end - _MIN_RECORD:
            return None
        (size,) = _I32.unpack(self.read(offset, 4))
        if size < _MIN_RECORD or offset + size > self.end:
            return None
        return self.read(offset, size)

    def scan(self) -> Iterator[tuple[int, bytes]]:
        """Every record with its offset, oldest first (to rebuild indexes after a restart)."""
        for seg in self._segments:
            data, pos = seg.data, 0
            while pos < len(data):
                (size,) = _I32.unpack_from(data, pos)
                yield seg.start + pos, bytes(data[pos : pos + size])
                pos += size

    def flush(self) -> None:
        for seg in self._segments:
            if seg.file is not None:
                seg.file.flush()

    def close(self) -> None:
        for seg in self._segments:
            if seg.file is not None:
                seg.file.close()
                seg.file = None

    # internals ----------------------------------------------------------------------------------
    def _new_segment(self, start: int) -> _Segment:
        file = None if self._dir is None else (self._dir / f"{start:020d}").open("ab")
        return _Segment(start, bytearray(), file)

    def _roll(self, start: int) -> None:
        last = self._segments[-1]
        if last.file is not None:
            last.file.close()
            last.file = None
        self._segments.append(self._new_segment(start))
        self._starts.append(start)
        while self._max_bytes is not None and self._size > self._max_bytes and len(self._segments) > 1:
            dropped = self._segments.pop(0)
            self._starts.pop(0)
            self._size -= len(dropped.data)
            if self._dir is not None:
                (self._dir / f"{dropped.start:020d}").unlink(missing_ok=True)
            if self.on_drop is not None:
                self.on_drop(self._segments[0].start)

    def _load(self, directory: Path) -> None:
        files = sorted(p for p in directory.iterdir() if p.name.isdigit() and len(p.name) == 20)
        expected: int | None = None
        for i, path in enumerate(files):
            start, data = int(path.name), bytearray(path.read_bytes())
            if expected is not None and start != expected:
                raise CommitLogCorrupt(f"{path} starts at {start}, expected {expected}")
            good = _whole_records(data)
            if good != len(data):
                if i != len(files) - 1:
                    raise CommitLogCorrupt(f"{path} holds a broken record at {start + good}")
                del data[good:]  # a torn tail from a process that died mid-write
                with path.open("r+b") as f:
                    f.truncate(good)
            is_last = i == len(files) - 1
            self._segments.append(_Segment(start, data, path.open("ab") if is_last else None))
            self._starts.append(start)
            expected = start + len(data)


def _whole_records(data: bytearray) -> int:
    """How many leading bytes of ``data`` are complete records."""
    pos = 0
    while len(data) - pos >= 4:
        (size,) = _I32.unpack_from(data, pos)
        if size < _MIN_RECORD or pos + size > len(data):
            break
        pos += size
    return pos

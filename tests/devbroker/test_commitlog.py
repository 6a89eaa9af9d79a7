"""CommitLog segments on disk: names by start offset, rolling, and refusing a log broken in the middle."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rocksidecar.devbroker.commitlog import CommitLog, CommitLogCorrupt


def record(size: int) -> bytes:
    return struct.pack(">i", size) + b"r" * (size - 4)


def test_segments_roll_and_are_named_by_their_start_offset(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, segment_bytes=1024)
    offsets = [log.append(record(400)) for _ in range(4)]
    log.close()
    assert offsets == [0, 400, 800, 1200]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{0:020d}", f"{1200:020d}"]
    again = CommitLog(tmp_path, segment_bytes=1024)
    assert [off for off, _ in again.scan()] == offsets and again.end == 1600
    assert again.read_record(800) == record(400) and again.read_record(1600) is None
    again.close()


def test_retention_deletes_old_segment_files(tmp_path: Path) -> None:
    dropped: list[int] = []
    log = CommitLog(tmp_path, segment_bytes=1024, max_bytes=2048, on_drop=dropped.append)
    for _ in range(12):
        log.append(record(400))
    log.close()
    assert dropped and log.min_offset == dropped[-1] > 0
    assert min(int(p.name) for p in tmp_path.iterdir()) == log.min_offset


def test_a_broken_record_before_the_last_segment_is_refused(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, segment_bytes=1024)
    for _ in range(4):
        log.append(record(400))
    log.close()
    first = tmp_path / f"{0:020d}"
    first.write_bytes(first.read_bytes()[:-10])
    with pytest.raises(CommitLogCorrupt):
        CommitLog(tmp_path, segment_bytes=1024)


def test_max_bytes_must_hold_a_segment() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        CommitLog(None, segment_bytes=4096, max_bytes=1024)

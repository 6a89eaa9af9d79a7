"""A small tmpfs to fill up: disk-full tests need root (mount); without it they skip, saying why."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


class SmallDisk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> None:
        """Take every free byte (a RocksDB write after this fails with ENOSPC)."""
        chunk = b"\0" * 4096
        with open(self.filler, "ab", buffering=0) as out, contextlib.suppress(OSError):
            while True:
                out.write(chunk)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int) -> Iterator[SmallDisk]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("disk-full tests mount a tmpfs and need root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a disk-full test: {mounted.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)

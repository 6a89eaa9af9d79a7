"""The client's one wall clock in milliseconds (the broker's timestamps and sub versions are wall ms).

The sidecar's stores have their own, in storage/clock.py: the client is a library that imports nothing
else of the project."""

from __future__ import annotations

import time


def wall_ms() -> int:
    return time.time_ns() // 1_000_000

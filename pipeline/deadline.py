"""Reading an HTTP answer within a deadline: httpx's timeout bounds each socket read, not the answer, which a
peer sending a byte at a time never trips (the sink's posts, the reachability check)."""

from __future__ import annotations

import time
from collections.abc import Iterable


def read_within(pieces: Iterable[bytes], deadline: float, most: int | None = None) -> bytes | None:
    """The answer's ``pieces`` joined, as they arrive, or None when they have not ended by ``deadline``
    (a time.monotonic() value, checked as each piece arrives). Past ``most`` bytes reading stops: what
    was read is returned (longer than ``most``: the caller can tell)."""
    read: list[bytes] = []
    size = 0
    for piece in pieces:
        read.append(piece)
        size += len(piece)
        if most is not None and size > most:
            break
        if time.monotonic() > deadline:
            return None
    return b"".join(read)

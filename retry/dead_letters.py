"""DeadLetters: list, export (JSON lines) and re-drive the dead letters of a RetryStore (R4).

It reads the store's KV and re-drives through the store's ``redrive``, both passed in, so it does not
import retry.store (which builds one).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TextIO

import orjson

from rocksidecar.storage.kv import KV

from .dead_letter import DeadLetter, decode_dead
from .keys import DEAD, DEAD_CF, INDEX_CF, index_prefix, split_index_key
from .record import CorruptRecordError

log = logging.getLogger(__name__)

REDRIVE_CHUNK = 500  # re-drives in flight at once; they share group commits


class DeadLetters:
    """The dead-letter column family of one store, in the order the letters died."""

    def __init__(self, kv: KV, redrive: Callable[[bytes], Awaitable[bytes]]) -> None:
        self._kv = kv
        self._redrive_one = redrive  # RetryStore.redrive: one dead letter back to pending

    def page(self, *, after: bytes | None = None, limit: int = 100) -> list[DeadLetter]:
        """Up to ``limit`` dead letters with keys after ``after``, oldest first."""
        lower = None if after is None else after + b"\x00"
        return [decode_dead(k, v) for k, v in self._kv.scan(DEAD_CF, lower=lower, limit=limit)]

    def __iter__(self) -> Iterator[DeadLetter]:
        for key, value in self._kv.iterate(DEAD_CF):
            yield decode_dead(key, value)

    def get(self, key: bytes) -> DeadLetter | None:
        value = self._kv.get(DEAD_CF, key)
        return None if value is None else decode_dead(key, value)

    def keys_of(self, id_: str) -> list[bytes]:
        prefix = index_prefix(id_)
        entries = self._kv.scan(INDEX_CF, lower=prefix, upper=prefix[:-1] + b"\x01")
        return [key for kind, key in (split_index_key(k) for k, _ in entries) if kind == DEAD]

    def export(self, out: TextIO) -> int:
        """Write every dead letter as one JSON line; returns how many."""
        count = 0
        for letter in self:
            out.write(orjson.dumps(letter.to_json()).decode())
            out.write("\n")
            count += 1
        return count

    async def redrive_id(self, id_: str) -> int:
        """Re-drive every dead letter of message ``id_``; returns how many moved back."""
        moved, _ = await self.redrive_message(id_)
        return moved

    async def redrive_message(self, id_: str) -> tuple[int, int]:
        """Re-drive every dead letter of message ``id_``; returns (moved, skipped as corrupt). (0, 0)
        only when the store holds no dead letter of it (or none that another call is not moving back
        now): a corrupt one stays there (listed, shown DEAD) and must not be answered as absent."""
        moved, corrupt, _ = await self._redrive(self.keys_of(id_))
        return moved, corrupt

    async def redrive_all(self) -> tuple[int, int]:
        """Re-drive every dead letter that holds a record; returns (moved, skipped as corrupt)."""
        moved = skipped = 0
        after: bytes | None = None
        while True:
            # Keys only, each value dropped once read: decoded letters of a chunk held every body twice.
            lower = None if after is None else after + b"\x00"
            keys = [key for key, _ in itertools.islice(self._kv.iterate(DEAD_CF, lower=lower), REDRIVE_CHUNK)]
            if not keys:
                return moved, skipped
            after = keys[-1]
            done, corrupt, gone = await self._redrive(keys)
            moved, skipped = moved + done, skipped + corrupt + gone

    async def _redrive(self, keys: list[bytes]) -> tuple[int, int, int]:
        """(moved, corrupt, gone: re-driven meanwhile, or being re-driven by another call now)."""
        results = await asyncio.gather(*(self._redrive_one(k) for k in keys), return_exceptions=True)
        corrupt = gone = 0
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, CorruptRecordError):
                log.warning("not re-driving %r: %s", key, result)
                corrupt += 1
            elif isinstance(result, KeyError):
                gone += 1
            elif isinstance(result, BaseException):
                raise result
        return len(keys) - corrupt - gone, corrupt, gone

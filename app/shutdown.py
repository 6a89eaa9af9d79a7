"""The one order in which a process closes what it delivers with, below its edges (the sidecar and
`rocksidecar dmq` own the same parts)."""

from __future__ import annotations

from typing import Protocol


class _Closes(Protocol):
    async def close(self) -> None: ...


class _ClosesNow(Protocol):
    def close(self) -> None: ...


async def close_delivery(
    producer: _Closes,
    client: _Closes,
    remoting: _Closes,
    retry: _Closes,
    delay: _Closes,
    writer: _Closes,
    kv: _ClosesNow,
) -> None:
    """The producer before the client instance and the connections it sends over; then the stores."""
    await producer.close()
    await client.close()
    await remoting.close()
    await close_stores(retry, delay, writer, kv)


async def close_stores(retry: _Closes, delay: _Closes, writer: _Closes, kv: _ClosesNow) -> None:
    """The stores before the group-commit writer that writes their batches; RocksDB last, once nothing
    writes to it."""
    await retry.close()
    await delay.close()
    await writer.close()
    kv.close()

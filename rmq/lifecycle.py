"""``async with`` for what starts and closes (the producer, the push consumer, devbroker's cluster): one
definition of entering and leaving, so each class says only how it starts and how it closes."""

from __future__ import annotations

from typing import Self


class Lifecycle:
    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

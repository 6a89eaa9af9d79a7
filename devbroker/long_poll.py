"""Pull requests parked by long polling: each waits until its queue grows past the offset it asked
for with a message its filter accepts, or until its suspend time has passed. Event-driven: the store
calls ``notify`` on every append; nothing polls. As 4.9.4's PullRequestHoldService.notifyMessageArriving,
an arriving message wakes a hold only when it matches by tag code and, for SQL92, by its properties."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class _Hold:
    offset: int
    codes: frozenset[int] | None  # None accepts every tag
    accept: Callable[[bytes], bool] | None  # an SQL92 match on the stored message; None accepts all
    future: asyncio.Future[bool]

    def wants(self, tag_code: int, record: bytes) -> bool:
        return (self.codes is None or tag_code in self.codes) and (self.accept is None or self.accept(record))


class PullHolds:
    def __init__(self) -> None:
        self._holds: dict[tuple[str, int], list[_Hold]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._holds.values())

    async def wait(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        codes: frozenset[int] | None,
        accept: Callable[[bytes], bool] | None,
        timeout_s: float,
    ) -> bool:
        """Wait for a matching message beyond ``offset``; True if one arrived, False on timeout."""
        loop = asyncio.get_running_loop()
        hold = _Hold(offset, codes, accept, loop.create_future())
        key = (topic, queue_id)
        self._holds.setdefault(key, []).append(hold)
        timer = loop.call_later(timeout_s, _resolve, hold.future, False)
        try:
            return await hold.future
        finally:
            timer.cancel()
            holds = self._holds.get(key)
            if holds is not None:
                if hold in holds:
                    holds.remove(hold)
                if not holds:
                    del self._holds[key]

    def notify(
        self, topic: str, queue_id: int, max_offset: int, arrived: Sequence[tuple[int, bytes]]
    ) -> None:
        """Wake the holds on a queue that just grew to ``max_offset`` with these (tag code, stored
        record) messages."""
        holds = self._holds.get((topic, queue_id))
        if not holds:
            return
        for hold in holds:
            if (
                not hold.future.done()
                and max_offset > hold.offset
                and any(hold.wants(code, record) for code, record in arrived)
            ):
                _resolve(hold.future, True)


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)

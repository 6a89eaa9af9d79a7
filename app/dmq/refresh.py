"""Refresh: held messages written to the inner topic again before retention deletes their first copy.

A replica that starts on an empty volume rebuilds its copies by reading the inner topic from its first
offset (app.dmq.converge). The brokers delete a commit-log file after its retention (``fileReservedTime``,
72 h by default), while the sidecar accepts delays of up to 90 days: a message due after the retention
would then have no inner copy left to rebuild from, and a lost volume would leave it in one replica
only (or none, with ``--copies 1``). So the replica that would publish a message (its first live holder)
writes it to the inner topic again each time ``refresh_after_ms`` has passed since the copy it holds was
written; every replica reads it as a duplicate, except one that lost its copy, which stores it. Recovery
then never reaches back further than ``refresh_after_ms`` plus one round: keep that below the inner
topic's retention (README "Rock-DMQ replicas"). A copy whose created_ms is ahead of the clock beyond the
accepted skew (a born timestamp an earlier replica stored) has an unknown age: it is refreshed in the
next round, and its created_ms is rewritten to that refresh's time.

Each replica's rounds look at the marks crossed since its own last round, among the copies it publishes
then. A copy handed over to it (its publisher stopped, froze, or its store refused writes; or this
replica came back) may have crossed its mark after the previous publisher's last round and before the
hand-over: neither would refresh it until its next mark, up to twice ``refresh_after_ms`` after the
copy was written, past the retention it is sized against. So after a change of the live publishers
(``handed_over``), the next round looks back further for the copies that were not its own before: to
the previous publisher's last possible round. Hand-overs may chain (each new publisher stops before its
first round as the publisher: a rolling upgrade), so the look-back starts from the earliest hand-over that
no round since can have covered, not from the latest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from rocksidecar.delay import DelayedMessage, DelayStore
from rocksidecar.delay.message import CorruptMessageError, decode_message
from rocksidecar.rmq import Message, RocketMQError
from rocksidecar.rmq.producer import Producer
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.keys import MAX_DUE_MS

from .inner import CLOCK_SLACK_MS, inner_message

log = logging.getLogger(__name__)

SCAN_CHUNK = 1000  # scheduled messages read per step; the loop yields between steps
ROUNDS_PER_REFRESH = 8  # a round every refresh_after / 8: a copy is refreshed at most that late
MAX_SENDS = 16  # refresh sends in flight
# How many rounds before a hand-over its previous publisher's last round may be: one (rounds are an
# interval apart), and one more for a publisher that took the copy over itself just before and went
# before its first round (a longer chain: ``Refresher.handed_over`` keeps its earliest hand-over).
HANDOVER_ROUNDS = 2


@dataclass(eq=False)
class Refresher:
    """One ``round()`` re-sends the held messages whose copy crossed a multiple of ``refresh_after_ms``
    in age since the previous round, and that this replica would publish (``mine``)."""

    store: DelayStore
    producer: Producer
    inner_topic: str
    refresh_after_ms: int
    mine: Callable[[DelayedMessage], bool]
    _: KW_ONLY
    on_refreshed: Callable[[int], None] = lambda _n: None
    # How long before a hand-over is seen its previous publisher may have stopped (its beats' timeout)
    handover_ms: int = 0
    _last_round_ms: int | None = field(init=False, default=None)
    _failed: set[str] = field(init=False, default_factory=set)  # failed refreshes: again next round
    # the first hand-over since the last round: who published before it (was_mine)
    _handover: Callable[[DelayedMessage], bool] | None = field(init=False, default=None)
    # (earliest, latest) at_ms of the hand-overs not yet covered by a round: the look-back's start
    _chain: tuple[int, int] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.refresh_after_ms <= 0:
            raise ValueError("refresh_after_ms must be positive")

    @property
    def interval_s(self) -> float:
        return self.refresh_after_ms / ROUNDS_PER_REFRESH / 1000

    def handed_over(self, was_mine: Callable[[DelayedMessage], bool], at_ms: int) -> None:
        """The copies this replica publishes may have changed at ``at_ms`` (the live publishers did);
        ``was_mine``: whether it published a copy before. The next round refreshes the copies that are
        its own now and were not, whose mark was crossed since the previous publisher's last possible
        round. Of several hand-overs before a round the first counts: its ``was_mine`` is what the last
        round saw. The look-back starts from the earliest hand-over not yet covered, which may be before
        the last round: a copy whose publisher stopped before its first round as the publisher went on
        uncovered to the next one (and on), and the rounds of this replica between saw it as another's.
        Memory: one predicate and two ints; work: the round's scan, as ever."""
        if self._handover is None:
            self._handover = was_mine
        earliest, latest = self._chain or (at_ms, at_ms)
        self._chain = (min(earliest, at_ms), max(latest, at_ms))

    @staticmethod
    def unknown_age(msg: DelayedMessage, now_ms: int) -> bool:
        """Whether ``msg``'s created_ms is no store time: later than now by more than the brokers' and
        this clock's accepted skew (inner.CLOCK_SLACK_MS). A replica before d8c7baa stored the producer's
        born timestamp there, a year ahead for a producer whose clock was: read as a store time, the copy
        would not be refreshed for that year, and past the inner topic's retention a replica losing its
        volume could not rebuild it."""
        return msg.created_ms > now_ms + CLOCK_SLACK_MS

    def due_for_refresh(self, msg: DelayedMessage, since_ms: int, now_ms: int) -> bool:
        """Whether the age of ``msg``'s copy passed a multiple of refresh_after between the rounds; a copy
        of unknown age (``unknown_age``) is due at once, and its refresh restamps it (``_restamp``)."""
        if self.unknown_age(msg, now_ms):
            return True
        step = self.refresh_after_ms
        marks_now = (now_ms - msg.created_ms) // step
        marks_before = max(since_ms - msg.created_ms, 0) // step
        return marks_now > marks_before

    async def round(self) -> int:
        """Scan the scheduled messages once; returns how many were written again."""
        now = self.store.now_ms()
        # After a start: as if the last round were one interval ago (a copy that crossed its mark
        # while this replica was down is refreshed by whoever published then; those it takes back
        # when it joins the publishers, by the hand-over's look-back).
        interval_ms = int(self.interval_s * 1000)
        since = self._last_round_ms if self._last_round_ms is not None else now - interval_ms
        was_mine, self._handover = self._handover, None
        handed_since = since
        if was_mine is not None and self._chain is not None:
            handed_since = min(since, self._chain[0]) - HANDOVER_ROUNDS * interval_ms - self.handover_ms
            # Bound: a look-back longer than refresh_after picks no more copies (each older than that
            # crossed a mark in it), however long a chain of hand-overs goes on.
            handed_since = max(handed_since, now - self.refresh_after_ms)
        try:
            sent = await self._scan(now, since, was_mine, handed_since)
        except BaseException:
            if was_mine is not None:  # looked at again by the next round (the earlier one counts)
                self._handover = was_mine
            raise
        self._last_round_ms = now
        # The chain is covered once its latest hand-over is an interval plus a late-seen stop
        # (handover_ms) old: the publisher after it had a round of its own by now, or it stopped and
        # that hand-over was seen here before this round.
        if self._chain is not None and now - self._chain[1] >= interval_ms + self.handover_ms:
            self._chain = None
        if sent:
            log.info("refreshed %d held messages on the inner topic", sent)
            self.on_refreshed(sent)
        return sent

    async def _scan(
        self, now: int, since: int, was_mine: Callable[[DelayedMessage], bool] | None, handed_since: int
    ) -> int:
        cursor = b""
        sent = 0
        failed, self._failed = self._failed, set()
        while True:
            rows = self.store.due(cursor, MAX_DUE_MS, SCAN_CHUNK)
            batch: list[DelayedMessage] = []
            for _key, raw in rows:
                try:
                    msg = decode_message(raw)
                except CorruptMessageError:
                    continue  # the scheduler logs it when it falls due
                if (
                    msg.id in failed
                    or self.due_for_refresh(msg, since, now)
                    or (
                        was_mine is not None
                        and self.due_for_refresh(msg, handed_since, now)
                        and not was_mine(msg)
                    )
                ) and self.mine(msg):
                    batch.append(msg)
            sent += await self._send(batch)
            # sent (not failed): their created_ms becomes a wall time, as inner.parse's (the broker's
            # store time, a little after this send: the age is over-counted by that, refreshed early)
            ageless = [m for m in batch if self.unknown_age(m, now) and m.id not in self._failed]
            await self._restamp(ageless, now - self.store.lead_ms())
            if len(rows) < SCAN_CHUNK:
                break
            cursor = rows[-1][0] + b"\x00"
            await asyncio.sleep(0)  # a large store: let due messages and intake through between chunks
        return sent

    async def _send(self, msgs: list[DelayedMessage]) -> int:
        """Send ``msgs`` (MAX_SENDS at once); one that fails is tried again in the next round."""
        sem = asyncio.Semaphore(MAX_SENDS)
        lead = self.store.lead_ms()

        async def one(msg: DelayedMessage) -> bool:
            real = Message(msg.topic, msg.body, tags=msg.tags, keys=msg.keys, properties=msg.properties,
                           id=msg.id)  # fmt: skip
            async with sem:
                try:
                    await self.producer.send(
                        # the due time as a wall time (the store's clock may lead it: a step back)
                        inner_message(real, msg.due_ms - lead, inner_topic=self.inner_topic,
                                      sharding_key=msg.sharding_key),
                        sharding_key=msg.id,
                    )  # fmt: skip
                except RocketMQError as exc:
                    log.warning("message %s not refreshed on the inner topic: %s", msg.id, exc)
                    self._failed.add(msg.id)
                    return False
            return True

        return sum(await asyncio.gather(*(one(m) for m in msgs)))

    async def _restamp(self, msgs: list[DelayedMessage], created_ms: int) -> None:
        """Count the ages of ``msgs``' copies from their refresh: else their created_ms, still ahead,
        would have them refreshed in every round. The refresh itself changes no stored copy (every
        replica reads it as a duplicate), so it is written here, once per such copy. A failed write
        leaves them of unknown age: refreshed and restamped again in the next round."""
        if not msgs:
            return
        try:
            await self.store.restamp(msgs, created_ms)
        except StorageError as exc:
            log.warning(
                "%d refreshed messages keep their created_ms (to restamp next round): %s", len(msgs), exc
            )

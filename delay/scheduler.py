"""DelayScheduler: publishes delayed messages when they fall due, in batches, with a bounded number of
publish calls in flight.

Seeking, waking and idleness are the due-queue engine's (storage.due_loop): one seek task reads due keys
from a cursor that starts at the store's floor, so a restart replays overdue messages first, and sleeps
until the earliest due key or an earlier arrival, never on a fixed tick. Publishing, holding failed
publishes for their retry and recording them as sent are the scheduler's own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocksidecar.storage.due_loop import DueLoop, Sleep, observe
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.status import StoredAt
from rocksidecar.storage.tasks import stop_task

from .gated import Gated
from .holds import Holds
from .keys import split_due_key
from .message import CorruptMessageError, DelayedMessage, decode_message
from .publication import Publish, publish_batch
from .store import PURGE_LIMIT, DelayStore

log = logging.getLogger(__name__)

BATCH_MAX = 500  # messages per publish call
MAX_IN_FLIGHT = 4  # publish calls at once
# Published messages whose "sent" record is not stored yet, per slot, in batches of batch_max: what a kill
# can publish twice (README "Stored before committed"). Counted in messages, not calls: a steady trickle's
# calls carry a few messages each, and a cap on calls throttled picking behind the store's WAL syncs.
RECORDS_PER_SLOT = 2
RETRY_S = 1.0  # a message whose publish failed is tried again after this
STORE_RETRY_S = 1.0  # while "sent" cannot be recorded, try again this often
PURGE_EVERY_S = 60.0  # done markers past the retention are dropped this often
GATE_RETRY_S = 2.0  # a due message the gate turned away is asked about again after this, at the latest
MAX_SCAN = 4  # reads of up to batch_max due keys per pass; then the loop gets a turn (turned-away copies)
GATE_HELD_MAX = 50_000  # turned-away keys kept to be asked about again by key (delay.gated), ~220 B each

# Whether this process publishes the due message of this id now (Rock-DMQ replicas: only the one whose
# turn it is); one it turns away stays scheduled and is asked about again when the gate's owner says its
# answers may have changed (``regate``: the live replicas changed), or GATE_RETRY_S later. It is asked
# with the id from the due key, before the message is decoded: with two copies, half of what a replica
# reads is turned away until its mark drops it. A turned-away key is forgotten when its mark (or a
# cancel) drops it (DelayStore's removed listener), else asked about again by key (a point read), and
# the cursor and the floor move on past it: moving the cursor back to it instead re-read the whole due
# range from there, copies waiting for their marks and the tombstones of everything published since,
# ahead of the newly due keys, every GATE_RETRY_S (bench.dmq_copies counted 50-95 % of the keys a
# replica read as re-reads). Only past GATE_HELD_MAX keys held at once does the scheduler fall back to
# that rescan, for the keys it could not keep.
Gate = Callable[[str], bool]
# Where a due message's wait goes, by stage (``on_stage(stage, seconds)``; bench.dmq_copies prints them):
# pass: one synchronous pass reading due keys (the loop does nothing else meanwhile); slot_wait: the seek
# loop waiting for one of the max_in_flight publishes to return; record_cap: the seek loop waiting because
# too many published calls still wait for their "sent" record; publish: a publish call; record: its
# "sent" record (the store's writer, shared with the intake and the other copies' drops); wake: a sleep
# for a due time ending after it (the loop was busy elsewhere).
Stage = Callable[[str, float], None]


@dataclass
class PickCounts:
    """What the seek loop read to pick due messages (bench.dmq_copies: where the 2-copy picking goes).
    ``scanned``: due keys read by range scans; ``rescanned``: those of them read again (below the
    furthest the cursor had reached: a rewind); ``reasked``: turned-away keys asked about again by key;
    ``gated_max``: the most turned-away keys held at once; ``forgotten``: held keys a cancel or a mark
    removed (not asked about again)."""

    scanned: int = 0
    rescanned: int = 0
    reasked: int = 0
    gated_max: int = 0
    forgotten: int = 0


class DelayScheduler(DueLoop):
    """Publishes due messages of ``store`` through ``publish``; ``on_published(lateness_s, message)`` is
    called once per published message (actual publish time minus due time; the message: for metrics'
    exemplars of its trace)."""

    def __init__(
        self,
        store: DelayStore,
        publish: Publish,
        *,
        batch_max: int = BATCH_MAX,
        max_in_flight: int = MAX_IN_FLIGHT,
        retry_s: float = RETRY_S,
        store_retry_s: float = STORE_RETRY_S,
        purge_every_s: float = PURGE_EVERY_S,
        sleep: Sleep = asyncio.sleep,
        on_published: Callable[[float, DelayedMessage], None] | None = None,
        gate: Gate | None = None,
        gate_retry_s: float = GATE_RETRY_S,
        gate_held_max: int = GATE_HELD_MAX,
        on_sent: Callable[[list[DelayedMessage]], None] | None = None,
    ) -> None:
        """``gate``, ``gate_held_max``: see Gate. ``on_sent``: the messages of each publish call that a
        broker stored, called as soon as the call returns, before they are recorded as sent. Not those
        SPOOLED: they leave this store too (recorded as sent) but no broker has them yet (Rock-DMQ marks
        what ``on_sent`` is given, and the other copies are dropped then: a spooled one is marked when
        the retry store's replay publishes it, app.store_delivery)."""
        if batch_max < 1 or max_in_flight < 1:
            raise ValueError("batch_max and max_in_flight must be >= 1")
        super().__init__(store.queue, "delay", sleep)
        self._store = store
        self._publish = publish
        self._batch_max = batch_max
        self._max_in_flight = max_in_flight
        # Messages in calls (publishing, or published and waiting for their "sent" record) at most.
        self._keys_max = max_in_flight * (1 + RECORDS_PER_SLOT) * batch_max
        self._retry_ms = int(retry_s * 1000)
        self._store_retry_ms = int(store_retry_s * 1000)
        self._purge_every_ms = int(purge_every_s * 1000)
        self._on_published = on_published
        self.gate = gate
        self._gate_retry_ms = max(1, int(gate_retry_s * 1000))
        self.on_sent = on_sent
        self.on_stage: Stage | None = None
        self._held = Holds()  # failed publishes waiting for their retry time
        self._gated = Gated(gate_held_max)  # turned away: asked again by key at regate() or re-ask time
        self.counts = PickCounts()
        self._reached = b""  # the furthest the cursor got (PickCounts.rescanned)
        # published, "sent" not stored yet: (keys, at_ms, where each went, their topics)
        self._unrecorded: list[tuple[list[bytes], int, list[StoredAt | None], list[str]]] = []
        self._calls: dict[asyncio.Task[None], int] = {}  # publishing or recording "sent": their messages
        self._keys_out = 0  # the messages of _calls
        self._publishing: set[asyncio.Task[None]] = set()  # of them, those still publishing (the slots)
        self._slot = asyncio.Event()  # a publish finished
        self._for_slot = False  # waiting for a publish call to finish, not for a due time
        self._purged_ms = 0
        self._purge: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._store.add_removed_listener(self._on_removed)
        self._start_seek()  # from the floor: overdue messages come first

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop; give publish calls in progress ``grace_s`` to finish, then cancel them. A message whose
        publish was cut short stays scheduled (it is published again after the next start)."""
        self._store.remove_removed_listener(self._on_removed)
        await self._stop_seek()
        await stop_task(self._purge)
        if self._calls and grace_s > 0:
            await asyncio.wait(list(self._calls), timeout=grace_s)
        for call in list(self._calls):
            call.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)

    # --- seeking --------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            if self._unrecorded and not await self._record_unrecorded():
                now = self._store.now_ms()
                await self._wait_until(now + self._store_retry_ms, now)  # publish nothing more until recorded
                continue
            # A slot is taken while a call publishes, not while its "sent" record waits for the store's
            # writer (behind the intake's and the other copies' drops' synced writes): the next due
            # messages go out meanwhile. What waits to be recorded is bounded too, in messages
            # (RECORDS_PER_SLOT): at most _keys_max published and not recorded yet.
            room = self._keys_max - self._keys_out
            if len(self._publishing) >= self._max_in_flight or room <= 0:
                # Which bound stopped picking: the publish slots, or what waits for its "sent" record.
                stage = "slot_wait" if len(self._publishing) >= self._max_in_flight else "record_cap"
                started = time.perf_counter()
                await self._wait_for_slot()
                self._stage(stage, started)
                continue
            now = self._store.now_ms()
            # Failed publishes (rare) and turned-away keys the cap did not let us keep: scan them again.
            for released in (self._held.release_due(now), self._gated.expire(now)):
                if released is not None:
                    self._cursor = min(self._cursor, released)
            started = time.perf_counter()
            batch, more = self._take_due(now, min(self._batch_max, room))
            self._stage("pass", started)
            if batch:
                call = asyncio.create_task(self._publish_batch(batch), name="delay-publish")
                self._calls[call] = len(batch)
                self._keys_out += len(batch)
                self._publishing.add(call)
                call.add_done_callback(self._on_call_done)
            if batch or more:
                await asyncio.sleep(0)  # a burst is many passes: let beats, marks and answers in between
                continue
            self._housekeeping(now)
            wake_ms = self._next_wake_ms()
            await self._wait_until(wake_ms, now)
            if wake_ms is not None and self.on_stage is not None:
                late_ms = self._store.now_ms() - wake_ms
                if late_ms >= 0:  # not woken early (a new key)
                    self.on_stage("wake", late_ms / 1000)

    def _stage(self, stage: str, started: float) -> None:
        if self.on_stage is not None:
            self.on_stage(stage, time.perf_counter() - started)

    def _take_due(self, now: int, limit: int) -> tuple[list[tuple[bytes, DelayedMessage]], bool]:
        """Claim up to ``limit`` due messages from the cursor on; also whether more may be due."""
        batch: list[tuple[bytes, DelayedMessage]] = []
        turned_away: list[bytes] = []  # claimed, then turned away
        again: list[bytes] = []  # re-asked and turned away again, never claimed
        try:
            self._reask(batch, again, limit)
            if len(batch) >= limit:
                return batch, True
            batch, more = self._take_due_gated(now, batch, turned_away, limit)
            return batch, more or self._gated.has_ready
        except BaseException:
            # A read failed part way (the seek task pauses and starts its passes again): what this pass
            # claimed would stay claimed, never published until a restart. Given back, and sought again.
            if batch:
                keys = [key for key, _ in batch]
                self._store.queue.release(keys)
                self._cursor = min(self._cursor, *keys)
            raise
        finally:
            if turned_away or again:
                self._gated.hold(turned_away + again, now + self._gate_retry_ms)
                self.counts.gated_max = max(self.counts.gated_max, len(self._gated))
                self._store.queue.release(turned_away)  # a waiting cancel or mark may take them now
                self._wake_for(now + self._gate_retry_ms)

    def _reask(self, batch: list[tuple[bytes, DelayedMessage]], again: list[bytes], limit: int) -> None:
        """Ask the gate again about turned-away keys whose time came, by key (oldest due first). It is asked
        with the id in the key before the key is claimed or its message read: most answers stay no (a
        regate re-asks every held copy at once: 100 000 re-asks a replica in a busy burst, bench.dmq_copies),
        and a copy its mark dropped meanwhile was forgotten already (the removed listener)."""
        queue = self._store.queue
        keys = self._gated.take_ready(limit - len(batch))
        self.counts.reasked += len(keys)
        for key in keys:
            if key in self._held:
                continue
            if self._gate_says_no(key):
                again.append(key)  # held again by the caller; not claimed, so not released either
                continue
            if not queue.claim(key):
                continue  # a cancel or a mark owns it: it deletes it, or gives it back (a rescan then)
            try:
                raw = self._store.due_value(key)
            except BaseException:  # a failed read: given back and sought again (see _take_due)
                queue.release([key])
                self._cursor = min(self._cursor, key)
                raise
            if raw is None:
                queue.release([key])  # its mark dropped it meanwhile (or a cancel): nothing to ask
                continue
            self._admit(key, raw, batch, None)

    def _gate_says_no(self, key: bytes) -> bool:
        """Whether the gate turns ``key``'s message away now (an unreadable key: no, _admit logs it)."""
        if self.gate is None:
            return False
        try:
            _due, id_ = split_due_key(key)
        except ValueError:
            return False
        return not self.gate(id_)

    def _admit(
        self,
        key: bytes,
        raw: bytes,
        batch: list[tuple[bytes, DelayedMessage]],
        turned_away: list[bytes] | None,
    ) -> None:
        """Claimed ``key``: into the batch if the gate lets it through, else into ``turned_away``; None:
        the gate let it through already (a re-ask: asked once, as the gate counts take-overs)."""
        try:
            _due, id_ = split_due_key(key)
            if turned_away is not None and self.gate is not None and not self.gate(id_):
                turned_away.append(key)  # held by the caller, so the claim is given back there
                return
            batch.append((key, decode_message(raw)))
        except (ValueError, CorruptMessageError) as exc:
            self._store.queue.release([key])
            log.error("delayed message under %r cannot be read, left in the store: %s", key, exc)

    def _take_due_gated(
        self, now: int, batch: list[tuple[bytes, DelayedMessage]], turned_away: list[bytes], limit: int
    ) -> tuple[list[tuple[bytes, DelayedMessage]], bool]:
        queue = self._store.queue
        for _ in range(MAX_SCAN):
            want = limit - len(batch)
            rows = self._store.due(self._cursor, now, want)
            self._count_scan(rows)
            for key, raw in rows:
                if key in self._held or key in self._gated or not queue.claim(key):
                    continue  # waiting for its retry or its re-ask, or a cancel owns it
                self._admit(key, raw, batch, turned_away)
            if rows:
                self._cursor = rows[-1][0] + b"\x00"
            if len(rows) < want:
                return batch, False
            if len(batch) >= limit:
                break
        return batch, True

    def _count_scan(self, rows: list[tuple[bytes, bytes]]) -> None:
        counts = self.counts
        counts.scanned += len(rows)
        if rows and rows[0][0] < self._reached:
            counts.rescanned += sum(1 for key, _ in rows if key < self._reached)
        if rows and rows[-1][0] > self._reached:
            self._reached = rows[-1][0]

    def _next_wake_ms(self) -> int | None:
        """The earlier of the next due key and the next held retry."""
        candidates = [self._held.next_ms(), self._gated.next_ms(), self._next_due_ms()]
        return min((ms for ms in candidates if ms is not None), default=None)

    async def _wait_for_slot(self) -> None:
        self._slot.clear()
        self._for_slot = True
        try:
            await self._slot.wait()  # a finishing call wakes us
        finally:
            self._for_slot = False

    def _housekeeping(self, now: int) -> None:
        self._advance_floor()
        if now - self._purged_ms >= self._purge_every_ms and (self._purge is None or self._purge.done()):
            self._purged_ms = now
            # Beside the seek loop, not in it: the purge's synced writes must not delay due messages.
            self._purge = asyncio.create_task(self._purge_expired(), name="delay-purge")
            self._purge.add_done_callback(lambda _: self._maybe_idle())

    async def _purge_expired(self) -> None:
        try:
            while await self._store.purge() >= PURGE_LIMIT:
                pass  # a backlog (e.g. after a long stop): chunk after chunk, one synced write each
        except StorageError as exc:
            log.warning("purging delay done markers failed: %s", exc)

    def _advance_floor(self) -> None:
        """Promise the store that no live key sorts below the cursor, nor below the lowest turned-away
        key held (the queue keeps the floor below claimed keys)."""
        if self._held:  # failed publishes below the cursor (rare): the floor stays (safe)
            return
        lowest = self._gated.lowest()
        self._store.queue.advance_floor(self._cursor if lowest is None else min(self._cursor, lowest))

    # --- publishing -----------------------------------------------------------------------------------
    def _published(self, call: asyncio.Task[Any] | None) -> None:
        if call is not None and call in self._publishing:
            self._publishing.discard(call)
            if self._for_slot:
                self._slot.set()

    def _on_call_done(self, call: asyncio.Task[None]) -> None:
        self._published(call)  # cancelled before it published
        self._keys_out -= self._calls.pop(call, 0)
        if not call.cancelled() and call.exception() is not None:
            log.error("delay publish call failed unexpectedly", exc_info=call.exception())
        if self._for_slot:
            self._slot.set()
        elif not self._calls:
            self._advance_floor()
        self._maybe_idle()

    async def _publish_batch(self, batch: list[tuple[bytes, DelayedMessage]]) -> None:
        started = time.perf_counter()
        try:
            out = await publish_batch(self._publish, batch, self._store.now_ms)
        finally:
            self._published(asyncio.current_task())  # the slot is free: the record below does not hold it
        self._stage("publish", started)
        # Lateness and on_sent of the published ones only: one SPOOLED into the retry store instead is
        # not out yet (its replay reports it when it is, app.store_delivery); it is recorded as sent with
        # the others below, as it has left this store.
        stored = out.published
        for msg in stored:
            self._report(out.done_at_ms - msg.due_ms, msg)
        if stored and self.on_sent is not None:
            observe(self.on_sent, stored, "on_sent")
        if out.failed:
            self._hold(out.failed, out.done_at_ms + self._retry_ms)
            log.warning("%d delayed messages not published, retrying in %d ms: %s", len(out.failed),
                        self._retry_ms, out.first_error)  # fmt: skip
        if out.sent:
            keys = [key for key, _ in out.sent]
            topics = [msg.topic for _, msg in out.sent]  # kept in the markers, for their status
            started = time.perf_counter()
            try:
                await self._store.mark_sent(keys, out.done_at_ms, out.sent_to, topics=topics)
                self._stage("record", started)
            except StorageError as exc:
                log.error("%d published messages not recorded as sent yet: %s", len(keys), exc)
                self._unrecorded.append((keys, out.done_at_ms, out.sent_to, topics))
                self._wake_for(None)  # the seek loop retries the record before it publishes anything else

    @property
    def unrecorded(self) -> bool:
        """Whether published messages wait for their "sent" record, which the store refused (retried every
        ``store_retry_s``; nothing more is published meanwhile)."""
        return bool(self._unrecorded)

    def regate(self) -> None:
        """The gate's answers may have changed (Rock-DMQ: the live replicas changed): ask it again now
        about every due message it turned away."""
        rescan = self._gated.release_all()  # asked again by key in the next passes
        if rescan is not None:  # turned away past the cap: not kept, so scanned again
            self._cursor = min(self._cursor, rescan)
        if rescan is not None or self._gated.has_ready:
            self._wake_for(None)

    def _on_removed(self, keys: list[bytes]) -> None:
        """A cancel or another replica's mark removed ``keys``: those held turned away are forgotten, not
        read again at their re-ask time (with two copies, most of them: their publisher's mark comes
        within milliseconds, the re-ask 2 s later; one point read each, and held they filled the cap)."""
        self.counts.forgotten += self._gated.forget(keys)

    def _hold(self, keys: list[bytes], retry_at_ms: int) -> None:
        self._held.hold(keys, retry_at_ms)
        self._store.queue.release(keys)  # a waiting cancel may take them now
        self._wake_for(retry_at_ms)

    async def _record_unrecorded(self) -> bool:
        while self._unrecorded:
            keys, at_ms, sent_to, topics = self._unrecorded[0]
            try:
                await self._store.mark_sent(keys, at_ms, sent_to, again=True, topics=topics)
            except StorageError:
                return False
            self._unrecorded.pop(0)
        return True

    def _report(self, lateness_ms: int, msg: DelayedMessage) -> None:
        observe(self._on_published, lateness_ms / 1000, "on_published", msg)

    # --- idleness -------------------------------------------------------------------------------------
    def _busy(self) -> bool:
        return self._for_slot or bool(self._calls) or (self._purge is not None and not self._purge.done())

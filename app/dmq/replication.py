"""Replicated Rock-DMQ (``--replicas``): every replica reads the whole inner topic and the marks topic in
one broadcasting consumer (offsets in a file on its own volume), keeps the messages it holds, publishes
those whose turn is its own, marks what it published and drops what others marked. README "Rock-DMQ
replicas" has the design and its failure table; this module wires the parts:

- app.dmq.replicas: who holds and who publishes an id (rendezvous hashing over the listed names);
- app.dmq.presence: who is live (the broker's member list of the publishers' group, and fresh beats on
  the presence topic, app.dmq.beats);
- app.dmq.marks: the marks topic;
- app.dmq.converge: when this replica has read what was there when it started.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rocksidecar.delay import CancelOutcome, DelayedMessage, DelayScheduler, DelayState, DelayStore
from rocksidecar.retry.dead_letter import DeadLetter
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.consumer import (
    ConsumeFrom,
    ConsumerConfig,
    ConsumeStatus,
    MessageListener,
    MessageModel,
    PushConsumer,
)
from rocksidecar.rmq.consumer.offset_store import LocalFileOffsetStore
from rocksidecar.rmq.message import Message, MessageExt, MessageQueue
from rocksidecar.rmq.periodic import Periodic
from rocksidecar.rmq.producer import Producer
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.keys import clamp_due

from ..metrics import zeroed_counter
from . import beats, envelope, inner, marks
from .consume import InnerListener
from .converge import Convergence
from .defaults import TIMEOUT_BEATS, presence_topic
from .options import DmqOptions
from .presence import Presence
from .refresh import Refresher
from .replicas import ReplicaSet

log = logging.getLogger(__name__)

OFFSETS_FILE = "dmq-offsets.json"  # the broadcast consumer's offsets, beside the delay store
PRESENCE_OFFSETS_FILE = "dmq-presence-offsets.json"  # the beats' reader (only to start near the end)
PUBLISHERS_SUFFIX = "_publishers"
BEAT_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
BEATS_SUFFIX = "_presence"  # the beats' reader group
STAGE_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
LAG_PROBE_S = 0.05  # the event loop's lag is sampled this often (a timer's overshoot)
# rocksidecar_dmq_stage_seconds's stages
STAGES = ("pass", "slot_wait", "record_cap", "publish", "record", "wake", "drop", "loop_lag")
# A consumer batch the store refused is consumed again every 5 s (ConsumerConfig.send_back_retry_s) until
# it is stored: a refusal not renewed for this long is of a batch no longer retried (its queue gone).
REFUSED_STALE_S = 30.0
# A take-over's wait for the marks (Replication._hand_over) checks the consumer's offsets this often: it
# delays the share taken over, so more often than a start's convergence does.
HANDOVER_CHECK_S = 0.02


def offsets_store(data_dir: Path, name: str = OFFSETS_FILE) -> LocalFileOffsetStore:
    """On the replica's volume, named by nothing that changes across restarts (Java's default path
    has the client id, whose IP changes with a pod's): a lost volume loses it with the store. A damaged
    one is set aside and read as empty, as a lost one is (refused, the replica never started until
    someone deleted it): the inner and marks topics are read again from the first offset (nothing
    skipped; a copy held again is the same id, and the marks drop the ones published), the beats'
    reader from the last (only what is said from now on matters)."""
    return LocalFileOffsetStore(data_dir / name, set_aside_damaged=True)


class Replication:
    # See _hand_over: reading the marks after a publisher left, and the live set from before it left (its
    # share is all this replica publishes meanwhile). Set only by the instance (None: no hand-over).
    _handing_over: asyncio.Task[None] | None = None
    _share_before: frozenset[str] | None = None

    def __init__(
        self,
        replicas: ReplicaSet,
        options: DmqOptions,
        *,
        instance: ClientInstance,
        producer: Producer,
        delay: DelayStore,
        registry: CollectorRegistry,
        namesrv: str,
        data_dir: Path,
    ) -> None:
        """``data_dir``: the volume holding the consumers' offsets (``self.offsets`` for the inner and
        marks topics' consumer). ``options.refresh_after_s`` > 0: held messages are written to the inner
        topic again at that age (app.dmq.refresh)."""
        group, marks_topic = options.group, options.marks_topic
        presence_interval_s, refresh_after_s = options.presence_interval_s, options.refresh_after_s
        self.offsets = offsets_store(data_dir)
        self.replicas = replicas
        self._delay = delay
        self.marks_topic = marks_topic
        self.convergence = Convergence(self.offsets)
        self.beats = beats.Beats(replicas.names, int(presence_interval_s * TIMEOUT_BEATS * 1000))
        self.presence_topic = presence_topic(marks_topic)
        self.presence = Presence(
            instance, group + PUBLISHERS_SUFFIX, marks_topic, replicas.me, interval_s=presence_interval_s,
            beats=self.beats, on_change=self._live_changed,
        )  # fmt: skip
        self._live: frozenset[str] = frozenset()  # the live set last reported by presence
        self._beating = Periodic("dmq-beats", presence_interval_s, self._beat, run_first=True, logger=log)
        self._beat_sender = beats.BeatSender(self._send_beat)
        self._beat_reader = PushConsumer(
            ConsumerConfig(
                group=group + BEATS_SUFFIX,
                message_model=MessageModel.BROADCASTING,
                consume_from=ConsumeFrom.LAST_OFFSET,  # only what is said from now on matters
                instance_name=replicas.me,
                consume_batch_size=32,
                consume_concurrency=1,
                persist_interval_s=60.0,
            ),
            namesrv,
            self._heard,
            instance=instance,
        )
        self._beat_reader.offsets = offsets_store(data_dir, PRESENCE_OFFSETS_FILE)
        self._beat_reader.subscribe(self.presence_topic)
        self._producer = producer
        self._catching_up: asyncio.Task[None] | None = None  # see _catch_up
        self._quiet_from_ms = self.beats.now_ms()  # its own silence counts from here (or a catch-up's end)
        # Consumer batches the store refused, by queue and first offset (a batch is consumed again whole),
        # with the monotonic time of the last refusal, until that batch is taken: while any is, this
        # replica sends no beats (see _store_refuses). Not cleared by another batch of the queue, which
        # may have had nothing to write.
        self._refused: dict[tuple[MessageQueue, int], float] = {}
        self._left_for_store = False  # beats stopped while the store refused writes: catch up first
        self._scheduler: DelayScheduler | None = None  # attach(): told when the gate's answers change
        self._refreshing: Periodic | None = None
        if refresh_after_s > 0:
            self.refresher = Refresher(
                delay, producer, options.inner_topic, int(refresh_after_s * 1000), self._mine,
                on_refreshed=lambda n: self.refreshed.inc(n),  # noqa: PLW0108 - defined below
                # a publisher that left may have gone on unseen this long: its beats' timeout, and the
                # presence interval its last beat may have been late by
                handover_ms=self.beats.timeout_ms + int(presence_interval_s * 1000),
            )  # fmt: skip
            self._refreshing = Periodic("dmq-refresh", self.refresher.interval_s, self._refresh, logger=log)
        self.marks = marks.MarkSender(
            producer,
            marks_topic,
            marks.new_incarnation(),
            on_dropped=lambda n: self.marks_out.labels("dropped").inc(n),
        )
        self._instance = instance
        self._task: asyncio.Task[None] | None = None
        r = registry
        self.marks_in = zeroed_counter(
            "rocksidecar_dmq_marks",
            "Published marks read from other replicas, by outcome: dropped (a "
            "copy), duplicate (this replica published it too), unknown (no copy yet), malformed.",
            "outcome",
            ("dropped", "duplicate", "unknown", "malformed"),
            r,
        )
        self.marks_out = zeroed_counter(
            "rocksidecar_dmq_marks_sent",
            "Ids marked as published (or dead-lettered) by this replica, by outcome (sent, dropped).",
            "outcome",
            ("sent", "dropped"),
            r,
        )
        self.takeover = Counter(
            "rocksidecar_dmq_takeover_published",
            "Messages this replica published in place of a holder ranked before it that was not live.",
            registry=r,
        )
        self.beats_in = zeroed_counter(
            "rocksidecar_dmq_beats",
            "Beats read from the presence topic, by outcome: heard, unknown (a replica not listed), "
            "malformed.",
            "outcome",
            ("heard", "unknown", "malformed"),
            r,
        )
        self.refreshed = Counter(
            "rocksidecar_dmq_refreshed",
            "Held messages this replica wrote to the inner topic again before retention deletes their "
            "copy there.",
            registry=r,
        )
        self.silences = zeroed_counter(
            "rocksidecar_dmq_silences",
            "Times a listed replica stopped counting as live because its beats went silent: who=self "
            "(this replica's own beats: it was frozen or cut off, or it stopped them while its store "
            "refused writes; it publishes nothing, and sends no beats, until it has caught up with the "
            "marks) or peer (another replica; its share is taken over).",
            "who",
            ("self", "peer"),
            r,
        )
        # Why a replica went silent (bench.dmq_copies): the sender's side (beats sent late: a busy loop,
        # a slow send) or the way back (the broker, this replica's reading).
        self.beat_interval = Histogram(
            "rocksidecar_dmq_beat_interval_seconds",
            "Time between two consecutive beats of a replica, by their send times (the sender's side).",
            buckets=BEAT_BUCKETS_S,
            registry=r,
        )
        self.beat_delay = Histogram(
            "rocksidecar_dmq_beat_delay_seconds",
            "Time from a beat's send to this replica reading it.",
            buckets=BEAT_BUCKETS_S,
            registry=r,
        )
        Gauge(
            "rocksidecar_dmq_converged",
            "1 once this replica read the inner and marks topics up to where they stood at its start.",
            registry=r,
        ).set_function(lambda: self.converged)
        Gauge(
            "rocksidecar_dmq_converge_backlog",
            "Messages left to read before this replica has converged.",
            registry=r,
        ).set_function(lambda: self.convergence.backlog)
        Gauge(
            "rocksidecar_dmq_publishers", "Live publishing replicas, as this replica sees them.", registry=r
        ).set_function(lambda: len(self.presence.live))
        picking = Gauge(
            "rocksidecar_dmq_pick_keys",
            "What the scheduler read to pick due copies since start (bench.dmq_copies), by kind: scanned "
            "(due keys read by range scans), rescanned (of those, read again after a rewind), reasked "
            "(turned-away copies asked about again by key), gated_max (most turned-away copies held), "
            "forgotten (held copies their mark dropped: not asked about again).",
            ["kind"],
            registry=r,
        )
        for kind in ("scanned", "rescanned", "reasked", "gated_max", "forgotten"):
            picking.labels(kind).set_function(functools.partial(self._pick_count, kind))
        lookups = Gauge(
            "rocksidecar_dmq_mark_lookups",
            "How the copies of marked ids were looked up since start, by way: point (at the due the mark "
            "gave, one multi-get per mark batch), scan (an index scan per id: a mark without due times, "
            "or the copy not found at it).",
            ["way"],
            registry=r,
        )
        for way in ("point", "scan"):
            lookups.labels(way).set_function(functools.partial(delay.drop_lookups.__getitem__, way))
        # Where a due copy's wait goes (bench.dmq_copies, issue 28): the scheduler's stages (delay.scheduler
        # Stage), the other copies' drops (a mark batch: index reads and one synced write) and the event
        # loop's lag (a timer's overshoot: how long something else held the loop).
        self.stages = Histogram(
            "rocksidecar_dmq_stage_seconds",
            "Time per stage of picking and publishing due copies: pass, slot_wait, record_cap, publish, "
            "record, wake (the scheduler), drop (a mark batch's drops), loop_lag (the event loop's lag, "
            "sampled).",
            ["stage"],
            buckets=STAGE_BUCKETS_S,
            registry=r,
        )
        self._stage_of = {stage: self.stages.labels(stage) for stage in STAGES}  # one lookup per observation
        self._lag_probe: asyncio.Task[None] | None = None

    def _pick_count(self, kind: str) -> float:
        return 0.0 if self._scheduler is None else float(getattr(self._scheduler.counts, kind))

    @property
    def converged(self) -> bool:
        return self.convergence.done.is_set()

    # --- the scheduler's hooks -------------------------------------------------------------------------
    def may_publish(self, id_: str) -> bool:
        """The gate: this replica's turn for message ``id_``, by the live publishers, once converged."""
        if not self.presence.joined or self._catching_up is not None or self._out_for_store():
            return False
        live = self.presence.live
        if self.replicas.me not in live:  # its own beats not heard: not yet, or no more
            if self._silent():  # frozen, or cut off from the brokers
                self._catch_up()
            return False
        me = self.replicas.me
        if self.replicas.publisher(id_, live) != me:
            return False
        # taken over from a publisher that just left: not before its last marks are read (_hand_over)
        return self._share_before is None or self.replicas.publisher(id_, self._share_before) == me

    def _silent(self) -> bool:
        """This replica's own beats went unheard past the timeout (since its start or its last catch-up:
        a catch-up's own silence is not counted again)."""
        return self.presence.joined and self.beats.silent(self.replicas.me, self._quiet_from_ms)

    def _catch_up(self) -> None:
        """Publish nothing, and send no beats, until the marks topic is read up to where it ends now: the
        marks of what the others published in this replica's place while it was silent (a replica
        resumed after a freeze would publish that share again). Without its beats the others go on
        publishing its share meanwhile; it beats again once caught up, and publishes once it reads its
        own beat back."""
        if self._catching_up is None:
            self.silences.labels("self").inc()
            self._catching_up = asyncio.create_task(self._read_marks_to_end(), name="dmq-catch-up")

    async def _read_marks_to_end(self) -> None:
        try:
            marks_read = Convergence(self.offsets)
            await marks_read.note(self._instance, (self.marks_topic,))
            await marks_read.wait()
        except Exception:
            log.exception("catching up with the marks failed; publishing again")
        finally:
            self._catching_up = None
            self._quiet_from_ms = self.beats.now_ms()
            self._regate()

    def _hand_over(self, before: frozenset[str]) -> None:
        """Live publishers left (stopped, crashed, or silent): until the marks topic is read up to where it
        ends now, publish only the share that was this replica's under ``before``. A replica that stops
        sends its marks and then leaves, but the others read marks in the consumer that reads the inner
        topic: under load, its last marks are still to be read (or in hand) when the brokers tell of the
        leave, and what it published just before would be published again. A crashed or frozen one's
        marks that reached the topic are read first, too. Another leave meanwhile notes the ends again,
        keeping the share from before the first."""
        if self._share_before is None:
            self._share_before = before
        if self._handing_over is not None:
            self._handing_over.cancel()  # replaced: this one notes where the marks end now
        self._handing_over = asyncio.create_task(self._read_handed_over_marks(), name="dmq-hand-over")

    async def _read_handed_over_marks(self) -> None:
        try:
            marks_read = Convergence(self.offsets)
            await marks_read.note(self._instance, (self.marks_topic,))
            # Bounded: a marks queue whose broker went down after the note is not read until it is back,
            # and the share taken over would wait as long (a duplicate risked is better than a stall).
            await asyncio.wait_for(marks_read.wait(HANDOVER_CHECK_S), self.beats.timeout_ms / 1000)
        except TimeoutError:
            log.warning(
                "the marks were not read up to their end within %.1f s (%d left): taking over now",
                self.beats.timeout_ms / 1000,
                marks_read.backlog,
            )
        except Exception:  # not a cancel: a newer hand-over took its place
            log.exception("reading the marks before a take-over failed; taking over now")
        self._handing_over = None
        self._share_before = None
        self._regate()

    def _mine(self, msg: DelayedMessage) -> bool:
        """Whether this replica publishes ``msg`` now."""
        return self.presence.joined and self._mine_under(self.presence.live, msg)

    async def _refresh(self) -> None:
        if self.converged:  # before, this replica's view of what it holds is not complete
            await self.refresher.round()

    def published(self, msgs: list[DelayedMessage]) -> None:
        """The scheduler's on_sent: what a broker stored of a publish call (not what was spooled)."""
        # each copy's due time as its key has it (DelayStore.schedule_many clamps it into the key range)
        self._mark([m.id for m in msgs], [clamp_due(m.due_ms) for m in msgs])

    def replayed(self, records: list[RetryRecord]) -> None:
        """The retry replay's on_delayed_sent: delayed messages whose publish was spooled, now stored by a
        broker. Marked only now: marked when spooled, the other copies were dropped while the message
        was in this replica's retry store alone (lost with its volume, stuck while it is down)."""
        self._mark([r.id for r in records], [clamp_due(r.delay_due_ms) for r in records])

    def dead_lettered(self, letter: DeadLetter) -> None:
        """The retry store's on_dead_letter: a delayed message whose publish was spooled (a
        ``delay_due_ms``) left the retry ladder for the dead letters (exhausted, or refused as never
        deliverable). Marked as a published one is: a dead letter is a terminal outcome, this replica's
        operator's to re-drive (the replay then publishes it and marks it again, harmlessly). Unmarked,
        the other holders kept their copies, turned away while this replica is live, and published them
        once it went away: a dead letter and a publish of one message, after its re-drive maybe. (Its
        volume lost, the dead letter goes with it, as a sidecar's does.) A letter that is not a record
        (quarantined bytes) has no due time to find the copies by, nor a sure id: not marked."""
        record = letter.record
        if record is not None and record.delay_due_ms:
            self._mark([record.id], [clamp_due(record.delay_due_ms)], published=False)

    def _mark(self, ids: list[str], dues: list[int], *, published: bool = True) -> None:
        self.marks.add(ids, dues)
        self.marks_out.labels("sent").inc(len(ids))
        if not published:  # a dead letter: no take-over (counted if a re-drive publishes it)
            return
        # A take-over: this replica published a message whose first holder is another one, which the gate
        # allows only while that holder is not live. Counted here, once per message a broker stored, not
        # at the gate's yes: the gate is asked again at each retry of a failed publish, and about copies a
        # mark then drops before they are read.
        me = self.replicas.me
        taken = sum(1 for id_ in ids if self.replicas.holders(id_)[0] != me)
        if taken:
            self.takeover.inc(taken)

    def attach(self, scheduler: DelayScheduler) -> None:
        scheduler.gate = self.may_publish
        scheduler.on_sent = self.published
        scheduler.on_stage = self._stage
        self._scheduler = scheduler

    def _stage(self, stage: str, seconds: float) -> None:
        self._stage_of[stage].observe(seconds)

    async def _probe_lag(self) -> None:
        loop = asyncio.get_running_loop()
        lag = self._stage_of["loop_lag"]
        while True:
            started = loop.time()
            await asyncio.sleep(LAG_PROBE_S)  # a probe of the loop's timing, not a synchronisation
            lag.observe(max(loop.time() - started - LAG_PROBE_S, 0.0))

    def _regate(self) -> None:
        """The gate's answers may have changed: the scheduler asks again about what it turned away."""
        if self._scheduler is not None:
            self._scheduler.regate()

    # --- the consumer's side ---------------------------------------------------------------------------
    def listener(self, inner: InnerListener) -> MessageListener:
        """``inner`` for the inner topic's messages; marks applied for the marks topic's."""

        async def listen(batch: Sequence[MessageExt], mq: MessageQueue) -> ConsumeStatus:
            try:
                if mq.topic != self.marks_topic:
                    status = await inner(batch, mq)
                else:
                    await self._apply(batch, inner)
                    status = ConsumeStatus.SUCCESS
            except StorageError:
                # consumed again until stored (_store_refuses)
                self._refused[(mq, batch[0].queue_offset if batch else -1)] = time.monotonic()
                raise
            if self._refused and batch:
                self._refused.pop((mq, batch[0].queue_offset), None)
            return status

        return listen

    async def _apply(self, batch: Sequence[MessageExt], inner: InnerListener) -> None:
        """Drop the copies of marked ids. Raises StorageError (the batch is redelivered)."""
        marked = envelope.each(
            batch, marks.parse, marks.MarkFormatError, self.marks_in.labels("malformed").inc, log
        )
        dues = marks.to_drop(marked, self.marks.by, self.replicas.holds)
        unique = list(dues)
        started = time.perf_counter()
        outcomes = await inner.drop_published(unique, list(dues.values()))  # one synced write for the batch
        self._stage_of["drop"].observe(time.perf_counter() - started)
        for id_, outcome in zip(unique, outcomes, strict=True):
            if outcome is CancelOutcome.CANCELLED:
                self.marks_in.labels("dropped").inc()
            elif outcome is CancelOutcome.NOT_FOUND:
                self.marks_in.labels("unknown").inc()
            elif self._published_here(id_):  # ALREADY_SENT, by this replica: both published it
                self.marks_in.labels("duplicate").inc()

    def _published_here(self, id_: str) -> bool:
        status = self._delay.get(id_)
        return status is not None and status.state is DelayState.SENT and status.sent_to is not None

    # --- presence --------------------------------------------------------------------------------------
    def _store_refuses(self) -> bool:
        """Whether a write this replica must make keeps failing: a batch of its consumer (inner messages
        it holds, or the drops of a mark) that the store refused and that is consumed again until stored,
        or published messages whose "sent" record the scheduler retries. Not the writer's health flag
        alone: any failed write sets it, a best-effort one too, and only a later write clears it; one
        that nothing retries would keep an idle replica out for good (both holders of a message, once).
        These are retried (every 5 s, every 1 s), so each ends with a write that succeeded."""
        if self._refused:
            now = time.monotonic()
            for key, at in list(self._refused.items()):
                if now - at > REFUSED_STALE_S:
                    del self._refused[key]  # no longer consumed again (its queue went away)
        return bool(self._refused) or (self._scheduler is not None and self._scheduler.unrecorded)

    def _out_for_store(self) -> bool:
        """Left the publishers while its store refused writes, and not back yet (see _beat)."""
        return self._left_for_store or self._store_refuses()

    async def _beat(self) -> None:
        """A beat, unless this replica is catching up after a silence: its beats would hand its share back
        before it has read what the others published in its place, and what falls due meanwhile would
        wait for the catch-up (measured, a replica resumed after a 60 s freeze: p99 3.2 s for its share).

        No beat either while its store refuses writes (a full disk can last hours): it cannot store the
        inner messages it is first holder of, nor record what it publishes, and beating it would keep
        the other holders, which stored their copies, turning them away as not their turn. Silent, it is
        taken over within the beats' timeout, as a frozen replica is. Once the refused write succeeded
        it catches up with the marks first, as after a silence, then beats again; a store that fails
        again meanwhile keeps it out (it rejoins only once the refused write succeeded, or is no longer
        retried: REFUSED_STALE_S). Before it has joined the publishers it has no share to leave."""
        if self._store_refuses():
            if not self._left_for_store and self.presence.joined:
                self._left_for_store = True
                log.warning("dmq replica %s: its store refuses writes; it stops beating and the others "
                            "publish its share until a write succeeds", self.replicas.me)  # fmt: skip
            return
        if self._left_for_store:
            log.info("dmq replica %s: its store takes writes again; catching up with the marks before "
                     "beating again", self.replicas.me)  # fmt: skip
            self._catch_up()
            self._left_for_store = False  # after: may_publish stays no until the catch-up is done
        elif self._silent():
            self._catch_up()
        if self._catching_up is None:
            self._beat_sender.beat()

    def _send_beat(self) -> Awaitable[object]:
        msg = Message(self.presence_topic, beats.encode(self.replicas.me, self.beats.now_ms()),
                      properties={inner.OP: beats.OP_BEAT})  # fmt: skip
        return self._producer.send(msg)

    async def _heard(self, batch: Sequence[MessageExt], _mq: MessageQueue) -> ConsumeStatus:
        malformed = self.beats_in.labels("malformed").inc
        for beat in envelope.each(batch, beats.parse, beats.BeatFormatError, malformed, log, logging.DEBUG):
            before = self.beats.last_ms(beat.name)
            if not self.beats.heard(beat):
                self.beats_in.labels("unknown").inc()
                continue
            self.beats_in.labels("heard").inc()
            self.beat_delay.observe(max(self.beats.now_ms() - beat.at_ms, 0) / 1000)
            if before is not None and beat.at_ms > before:
                self.beat_interval.observe((beat.at_ms - before) / 1000)
        return ConsumeStatus.SUCCESS

    def _live_changed(self, live: frozenset[str]) -> None:
        """Presence saw the live publishers change: count the listed replicas that went silent, read the
        marks of those that left before taking their share (_hand_over), have the scheduler ask its gate
        again (a take-over, or a turn given back), and the refresher look back further for the copies
        this made this replica's (Refresher.handed_over)."""
        gone = self._live - live - {self.replicas.me}
        silent = gone & self.presence.listed
        if silent:
            self.silences.labels("peer").inc(len(silent))
        before, self._live = self._live, live
        if gone:
            self._hand_over(before)
        if self._refreshing is not None and self.replicas.me in live:  # else nothing became its own
            self.refresher.handed_over(functools.partial(self._mine_under, before), self.beats.now_ms())
        self._regate()

    def _mine_under(self, live: frozenset[str], msg: DelayedMessage) -> bool:
        return self.replicas.publisher(msg.id, live) == self.replicas.me

    # --- lifecycle -------------------------------------------------------------------------------------
    async def start(self, topics: Sequence[str]) -> None:
        """After the consumer started: note where the topics end, start presence, beats and marks, and
        join the publishers once converged (in the background)."""
        await self._beat_reader.start()
        self._lag_probe = asyncio.create_task(self._probe_lag(), name="dmq-lag-probe")
        self._beating.start()
        self.presence.start()
        self.marks.start()
        if self._refreshing is not None:
            self._refreshing.start()
        await self.convergence.note(self._instance, topics)
        self._task = asyncio.create_task(self._converge(), name="dmq-converge")

    async def _converge(self) -> None:
        await self.convergence.wait()
        log.info("dmq replica %s converged: joining the publishers", self.replicas.me)
        await self.presence.join()  # a heartbeat that fails is logged; the next one carries the group

    async def stop(self) -> None:
        """After the scheduler stopped: send the marks left, then leave the publishers (the others take
        over once they have read those marks: _hand_over)."""
        for task in (self._task, self._catching_up, self._lag_probe):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._refreshing is not None:
            await self._refreshing.close()
        await self.marks.close()
        await self.presence.close()
        if self._handing_over is not None:  # after presence: a leave it saw until then may start one
            self._handing_over.cancel()
            await asyncio.gather(self._handing_over, return_exceptions=True)
        await self._beating.close()
        await self._beat_sender.close()
        await self._beat_reader.close()

"""The Publish stream: its messages sent in batches, one batch in flight per stream, an answer per message.

Why batches: a message sent on its own costs a task, a future, a semaphore turn, a queue turn and a
broker request (or a seat in the coalescer's). A stream's messages arrive one read at a time, and while a
batch is on its way to the broker the reader takes in those that follow; the next batch takes all of
them at once (one SEND_BATCH_MESSAGE per queue, the batch path's validation and ids), so batches grow
with the broker's round trip and the client's pace, without a timer. The streams' batches meet in a
``BatchCombiner``, so several streams' batches go out as one.

What a client still gets: one acknowledgement per message by its sequence number, sent once the message
is stored (SENT, or SPOOLED in the local store, as for Send); a message that fails fails only itself.
One batch in flight per stream: a stream's messages reach the broker in the order they were read (a
batch keeps its order per queue). At most ``window`` messages are read and not yet answered (an answer
counts once handed to grpc, so a client that reads none holds the reader too): the reader stops reading
(and HTTP/2's flow control stops the client) until answers have gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

from ..request import MessageFields
from ..sidecar import Ack, Outcome
from ..tracing.context import TraceContext
from .grpc_edge import Unread
from .grpc_views import ACK_MODES, error, publish_ack, spec_from_proto, unknown_ack, unknown_in_request
from .operations import BatchItem, Operations, item_label
from .proto import rocksidecar_pb2 as pb

# One batch's acknowledgements; an exception: the sender failed (the call ends with it, loudly: its
# unanswered messages must not wait forever); None: the stream is done.
_Answers = list[pb.PublishAck] | Exception | None


_Job = tuple[list[MessageFields], "asyncio.Future[list[BatchItem]]"]


class BatchCombiner:
    """The batches of all Publish streams, combined: one send in flight per ack mode and trace context,
    and what the streams hand in meanwhile goes out together when it returns (group commit: no timer,
    the broker's round trip sets the pace). Without it each stream's batch is a broker request of its
    own: under 8 streams, 2-3 messages each, more than twice the requests the coalescer made of the
    same messages sent one by one. A stream hands in one batch at a time, so its order holds."""

    def __init__(self, ops: Operations) -> None:
        self._ops = ops
        self._waiting: dict[tuple[Ack, TraceContext | None], list[_Job]] = {}
        self._running: dict[tuple[Ack, TraceContext | None], asyncio.Task[None]] = {}

    async def send(
        self, specs: list[MessageFields], mode: Ack, trace: TraceContext | None
    ) -> list[BatchItem]:
        key = (mode, trace)
        done: asyncio.Future[list[BatchItem]] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((specs, done))
        if key not in self._running:
            self._running[key] = asyncio.create_task(self._send_all(key))
        return await done

    async def _send_all(self, key: tuple[Ack, TraceContext | None]) -> None:
        try:
            while jobs := self._waiting.pop(key, None):
                await self._send(jobs, key)
        finally:
            del self._running[key]
            for _, done in self._waiting.pop(key, ()):  # only when cancelled (the server stopping)
                done.cancel()

    async def _send(self, jobs: list[_Job], key: tuple[Ack, TraceContext | None]) -> None:
        # A job whose stream went away while it waited (its sender cancelled, so its future too) is not
        # sent: its client was never answered and publishes it again, as after a cancelled Send.
        jobs = [job for job in jobs if not job[1].done()]
        if not jobs:
            return
        specs = [spec for job, _ in jobs for spec in job] if len(jobs) > 1 else jobs[0][0]
        try:
            results = await self._ops.send_each(specs, *key)
        except Exception as exc:
            for _, done in jobs:
                if not done.done():
                    done.set_exception(exc)
            return
        at = 0
        for job, done in jobs:
            if not done.done():  # a stream that went away is not answered
                done.set_result(results[at : at + len(job)])
            at += len(job)


class PublishStreams:
    """The Publish streams open now, so that the server's stop can end them: a client's stream is
    long-lived, and left open it would be read (messages taken and stored) until the grace ran out."""

    def __init__(self) -> None:
        self._open: set[StreamPublisher] = set()
        self.stopped = False  # no stream is read from here on

    @contextlib.contextmanager
    def open(self, publisher: StreamPublisher) -> Iterator[None]:
        """``publisher`` among the open streams while the block runs (stopped at once after stop())."""
        self._open.add(publisher)
        if self.stopped:
            publisher.stop()
        try:
            yield
        finally:
            self._open.discard(publisher)

    def stop(self) -> None:
        """Stop reading every open stream (StreamPublisher.stop), and any opened after this."""
        self.stopped = True
        for publisher in self._open:
            publisher.stop()


class StreamPublisher:
    """One Publish call's state: what was read and not yet sent, the batch on its way, the answers."""

    def __init__(
        self, ops: Operations, trace: TraceContext | None, window: int, combiner: BatchCombiner | None = None
    ) -> None:
        self._ops = ops
        self._combiner = combiner  # None: the stream's batches are sent as they are
        self._trace = trace  # the stream's: every message published on it
        self._window = window
        self._batch_limit = max(1, min(window, ops.batch_limit))
        self._read: list[pb.PublishRequest] = []  # read, not yet in a batch
        self._unanswered = 0  # read, not yet answered
        self._room = asyncio.Event()  # set while the reader may read on
        self._room.set()
        self._sender: asyncio.Task[None] | None = None
        self._answers: asyncio.Queue[_Answers] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._reading = True  # the client may still send (it has not ended its side of the stream)
        self.stopped = False  # stop() ended the reading: the client's stream was not over

    def stop(self) -> None:
        """Read no more (the server is stopping): what was read is still sent and answered, then run()
        ends, ``stopped`` set. A stream whose client has ended its side is left to finish as it would."""
        if self._reading and not self.stopped:
            self.stopped = True
            if self._reader is not None:
                self._reader.cancel()

    async def run(self, requests: AsyncIterator[pb.PublishRequest | Unread]) -> AsyncIterator[pb.PublishAck]:
        """The acknowledgements of ``requests``' messages, each batch's as soon as it is stored."""
        reader = self._reader = asyncio.create_task(self._read_all(requests))
        try:
            while (answers := await self._answers.get()) is not None:
                if isinstance(answers, Exception):
                    raise answers
                for ack in answers:
                    yield ack
                # Answered once handed to the client: answers it does not read hold the reader too.
                self._unanswered -= len(answers)
                if self._unanswered < self._window:
                    self._room.set()
        finally:
            # A client that goes away gets no more answers: what is in flight is cancelled, as a Send's
            # call is (nothing was acknowledged for it, so nothing acknowledged is lost).
            tasks = [reader] if self._sender is None else [reader, self._sender]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_all(self, requests: AsyncIterator[pb.PublishRequest | Unread]) -> None:
        try:
            try:
                if not self.stopped:  # stop() may come before the reading begins
                    await self._take(requests)
            except asyncio.CancelledError:
                if not self.stopped:  # the client went away (run() cancels it)
                    raise
                # stop() cut the reading short (a read waiting for the client, or for room): what was
                # read is still sent and answered, below.
                asyncio.current_task().uncancel()  # type: ignore[union-attr]  # a task runs this
            self._reading = False
            if self._sender is not None:
                await self._sender
        finally:
            self._answers.put_nowait(None)

    async def _take(self, requests: AsyncIterator[pb.PublishRequest | Unread]) -> None:
        """Read ``requests`` to their end, handing the messages to the sender, within the window."""
        async for req in requests:
            self._unanswered += 1
            if type(req) is Unread:  # over a bound, refused undecoded (app.api.grpc_edge): answered now
                self._refuse(req.sequence, req.error)
            elif (wrong := unknown_in_request(req)) is not None:  # type: ignore[arg-type]  # not an Unread
                self._refuse(req.sequence, wrong)
            else:
                self._read.append(req)  # type: ignore[arg-type]  # not an Unread, its type says
                if self._sender is None:
                    self._sender = asyncio.create_task(self._send_all())
            if self._unanswered >= self._window:
                self._room.clear()
                await self._room.wait()

    def _refuse(self, sequence: int, why: Exception) -> None:
        """Answer a message refused before it is sent (it fails alone, the stream goes on), counted."""
        self._ops.count("REJECTED")
        self._answers.put_nowait([pb.PublishAck(sequence=sequence, error=error(why))])

    async def _send_all(self) -> None:
        """Send what has been read, a batch at a time, until nothing is left (the reader starts another
        sender when more arrives)."""
        try:
            while self._read:
                batch = self._read[: self._batch_limit]
                del self._read[: self._batch_limit]
                self._answers.put_nowait(await self._answer(batch))
        except Exception as exc:
            self._answers.put_nowait(exc)
        finally:
            self._sender = None

    async def _answer(self, batch: list[pb.PublishRequest]) -> list[pb.PublishAck]:
        modes = [ACK_MODES.get(req.ack) for req in batch]  # None: a value the proto does not define
        if modes.count(modes[0]) == len(modes):  # the usual stream: one ack mode for all
            results = await self._results(batch, modes[0])
        elif _lane_across_modes(batch, modes):
            # A key's messages in two modes' batches, sent at once: the later one could head the key's
            # lane (retry.lanes) ahead of an earlier one (ACK_SPOOL spooled while ACK_BROKER is still on
            # its way). Each run of one mode as a batch, one after another, in the stream's order.
            results = []
            start = 0
            for end in range(1, len(batch) + 1):
                if end == len(batch) or modes[end] is not modes[start]:
                    results += await self._results(batch[start:end], modes[start])
                    start = end
        else:  # each mode's messages as a batch of their own, answered in the stream's order
            by_mode = {mode: [i for i, m in enumerate(modes) if m is mode] for mode in set(modes)}
            parts = await asyncio.gather(
                *(self._results([batch[i] for i in idx], mode) for mode, idx in by_mode.items())
            )
            at = {
                i: r
                for idx, part in zip(by_mode.values(), parts, strict=True)
                for i, r in zip(idx, part, strict=True)
            }
            results = [at[i] for i in range(len(batch))]
        return [
            publish_ack(req.sequence, r)
            if type(r) is Outcome
            else pb.PublishAck(sequence=req.sequence, error=error(r))  # type: ignore[arg-type]
            for req, r in zip(batch, results, strict=True)
        ]

    async def _results(self, batch: list[pb.PublishRequest], mode: Ack | None) -> list[BatchItem]:
        ops = self._ops
        if mode is None:  # refused, each alone, as Send refuses it
            ops.count("REJECTED", len(batch))
            return [unknown_ack(req.ack) for req in batch]
        specs: list[MessageFields] = [spec_from_proto(req.message) for req in batch]
        try:
            if self._combiner is not None:
                return await self._combiner.send(specs, mode, self._trace)
            return await ops.send_each(specs, mode, self._trace)
        except Exception as exc:  # what a send of each would have raised (a store that cannot spool)
            ops.count(item_label(exc), len(batch))
            return [exc] * len(batch)


def _lane_across_modes(batch: list[pb.PublishRequest], modes: list[Ack | None]) -> bool:
    """Whether a sharding key (its topic and key) has messages of ``batch`` in more than one ack mode
    (None, refused unsent, does not count)."""
    mode_of: dict[tuple[str, str], Ack] = {}
    for req, mode in zip(batch, modes, strict=True):
        m = req.message
        if mode is None or not m.HasField("sharding_key") or not m.sharding_key:
            continue
        if mode_of.setdefault((m.topic, m.sharding_key), mode) is not mode:
            return True
    return False

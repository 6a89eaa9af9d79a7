"""The Publish stream: its messages sent in batches, one batch in flight per stream, an answer per message.

Why batches: a message sent on its own costs a task, a future, a semaphore turn, a queue turn and a
broker request (or a seat in the coalescer's). A stream's messages arrive one read at a time, and while a
batch is on its way to the broker the reader takes in those that follow; the next batch takes all of
them at once (one SEND_BATCH_MESSAGE per queue, the batch path's validation and ids), so batches grow
with the broker's round trip and the client's pace, without a timer.

What a client still gets: one acknowledgement per message by its sequence number, sent once the message
is stored (SENT, or SPOOLED in the local store, as for Send); a message that fails fails only itself.
One batch in flight per stream: a stream's messages reach the broker in the order they were read (a
batch keeps its order per queue). At most ``window`` messages are read and not yet answered: the reader
stops reading (and HTTP/2's flow control stops the client) until answers have gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ..sidecar import Ack, Outcome
from ..tracing.context import TraceContext
from .grpc_views import ack_from_proto, error, publish_ack, spec_from_proto
from .operations import Operations, item_label
from .proto import rocksidecar_pb2 as pb

_Answers = list[pb.PublishAck] | None  # one batch's acknowledgements; None: the stream is done


class StreamPublisher:
    """One Publish call's state: what was read and not yet sent, the batch on its way, the answers."""

    def __init__(self, ops: Operations, trace: TraceContext | None, window: int) -> None:
        self._ops = ops
        self._trace = trace  # the stream's: every message published on it
        self._window = window
        self._batch_limit = max(1, min(window, ops.batch_limit))
        self._read: list[pb.PublishRequest] = []  # read, not yet in a batch
        self._unanswered = 0  # read, not yet answered
        self._room = asyncio.Event()  # set while the reader may read on
        self._room.set()
        self._sender: asyncio.Task[None] | None = None
        self._answers: asyncio.Queue[_Answers] = asyncio.Queue()

    async def run(self, requests: AsyncIterator[pb.PublishRequest]) -> AsyncIterator[pb.PublishAck]:
        """The acknowledgements of ``requests``' messages, each batch's as soon as it is stored."""
        reader = asyncio.create_task(self._read_all(requests))
        try:
            while (answers := await self._answers.get()) is not None:
                for ack in answers:
                    yield ack
        finally:
            # A client that goes away gets no more answers: what is in flight is cancelled, as a Send's
            # call is (nothing was acknowledged for it, so nothing acknowledged is lost).
            tasks = [reader] if self._sender is None else [reader, self._sender]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_all(self, requests: AsyncIterator[pb.PublishRequest]) -> None:
        try:
            async for req in requests:
                self._read.append(req)
                self._unanswered += 1
                if self._sender is None:
                    self._sender = asyncio.create_task(self._send_all())
                if self._unanswered >= self._window:
                    self._room.clear()
                    await self._room.wait()
            if self._sender is not None:
                await self._sender
        finally:
            self._answers.put_nowait(None)

    async def _send_all(self) -> None:
        """Send what has been read, a batch at a time, until nothing is left (the reader starts another
        sender when more arrives)."""
        try:
            while self._read:
                batch = self._read[: self._batch_limit]
                del self._read[: self._batch_limit]
                answers = await self._answer(batch)
                self._answers.put_nowait(answers)
                self._unanswered -= len(batch)
                if self._unanswered < self._window:
                    self._room.set()
        finally:
            self._sender = None

    async def _answer(self, batch: list[pb.PublishRequest]) -> list[pb.PublishAck]:
        modes = [ack_from_proto(req.ack) for req in batch]
        if modes.count(modes[0]) == len(modes):  # the usual stream: one ack mode for all
            results = await self._results(batch, modes[0])
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

    async def _results(self, batch: list[pb.PublishRequest], mode: Ack) -> list[Outcome | Exception]:
        ops = self._ops
        try:
            return await ops.send_each([spec_from_proto(req.message) for req in batch], mode, self._trace)
        except Exception as exc:  # what a send of each would have raised (a store that cannot spool)
            ops.count(item_label(exc), len(batch))
            return [exc] * len(batch)

"""The marks topic: "these ids were published", sent by the replica that published them and read by
every replica, which drops its copies (README "Rock-DMQ replicas").

A mark message carries up to MAX_IDS ids in a JSON body ``{"v": 1, "by": <incarnation>, "ids": [...]}``
with ``DMQ_OP=MARK``. ``by`` names the process that sent it (a random id per start), so a replica skips
its own marks of this run but applies those it sent before a restart, which matter after a lost volume.
Anyone who may write the marks topic is hostile like anyone who may write the inner topic: a mark that
does not parse is skipped and counted, never applied in part.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import orjson

from rocksidecar.rmq import Message, RocketMQError
from rocksidecar.rmq.producer import Producer
from rocksidecar.storage.tasks import stop_task

from . import envelope
from .inner import MAX_ID_CHARS, OP

log = logging.getLogger(__name__)

DEFAULT_MARKS_TOPIC = "dmq_marks_topic"
OP_MARK = "MARK"
MAX_IDS = 500  # ids per mark message (~20 KB)
MAX_BODY = 128 * 1024
MAX_BUFFERED = 200_000  # ids waiting while no broker takes marks; beyond, the oldest are dropped
FLUSH_S = 0.02  # marks wait this long for company: one message per publish batch, about
RETRY_S = 1.0


class MarkFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Mark:
    by: str
    ids: tuple[str, ...]


def new_incarnation() -> str:
    return secrets.token_hex(8)


def encode(by: str, ids: Sequence[str]) -> bytes:
    return orjson.dumps({"v": 1, "by": by, "ids": list(ids)})


def parse(body: bytes, props: Mapping[str, str]) -> Mark:
    """The mark a message of the marks topic carries. Raises MarkFormatError."""
    doc = envelope.load(body, props, OP_MARK, MAX_BODY, MarkFormatError)
    by, ids = doc.get("by"), doc.get("ids")
    if not isinstance(by, str) or not isinstance(ids, list) or len(ids) > MAX_IDS:
        raise MarkFormatError(f"mark body needs 'by' and at most {MAX_IDS} 'ids'")
    for id_ in ids:
        if not (
            isinstance(id_, str) and 0 < len(id_) <= MAX_ID_CHARS and id_.isascii() and id_.isprintable()
        ):
            raise MarkFormatError(f"mark carries a bad id {str(id_)[:40]!r}")
    return Mark(by, tuple(ids))


class MarkSender:
    """Buffers the ids this replica published and sends them as marks, in order, MAX_IDS a message. A
    mark that no broker takes is tried again every RETRY_S: until it goes out, the other holders keep
    their copies (and would publish them again only if this replica stopped publishing meanwhile)."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        by: str,
        *,
        flush_s: float = FLUSH_S,
        retry_s: float = RETRY_S,
        on_dropped: Callable[[int], None] = lambda _n: None,
    ) -> None:
        self._producer = producer
        self._topic = topic
        self.by = by
        self._flush_s = flush_s
        self._retry_s = retry_s
        self._on_dropped = on_dropped
        self._ids: list[str] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def add(self, ids: Sequence[str]) -> None:
        self._ids.extend(ids)
        over = len(self._ids) - MAX_BUFFERED
        if over > 0:
            del self._ids[:over]
            self._on_dropped(over)
            log.warning("%d marks dropped: no broker took marks for a while", over)
        self._wake.set()

    @property
    def buffered(self) -> int:
        return len(self._ids)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="dmq-marks")

    async def close(self, grace_s: float = 2.0) -> None:
        """Send what is buffered (within ``grace_s``), then stop."""
        if self._task is None:
            return
        try:
            async with asyncio.timeout(grace_s):
                while self._ids and await self._send_some():
                    pass
        except TimeoutError:
            log.warning("%d marks not sent at stop", len(self._ids))
        await stop_task(self._task)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self._flush_s)  # let the ids of concurrent publish calls join
            self._wake.clear()
            while self._ids:
                try:
                    sent = await self._send_some()
                except Exception:  # an unexpected failure must not end the loop: the marks would stop
                    log.exception("marks not sent (%d waiting)", len(self._ids))
                    sent = False
                if not sent:
                    await asyncio.sleep(self._retry_s)

    async def _send_some(self) -> bool:
        chunk = self._ids[:MAX_IDS]
        msg = Message(self._topic, encode(self.by, chunk), properties={OP: OP_MARK})
        try:
            await self._producer.send(msg)
        except RocketMQError as exc:
            log.warning("marks not sent (%d waiting): %s", len(self._ids), exc)
            return False
        del self._ids[: len(chunk)]
        self.sent += len(chunk)
        return True

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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

import orjson

from rocksidecar.rmq import Message, RocketMQError
from rocksidecar.rmq.periodic import Periodic
from rocksidecar.rmq.producer import Producer

from . import envelope
from .inner import MAX_ID_CHARS, OP

log = logging.getLogger(__name__)

DEFAULT_MARKS_TOPIC = "dmq_marks_topic"
OP_MARK = "MARK"
MAX_IDS = 500  # ids per mark message (~20 KB)
MAX_BODY = 128 * 1024
MAX_BUFFERED = 200_000  # ids waiting while no broker takes marks; beyond, the oldest are dropped
FLUSH_S = 0.02  # marks are sent this often: one message per publish batch, about
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


@dataclass(eq=False)
class MarkSender:
    """Buffers the ids this replica published and sends them as marks, in order, MAX_IDS a message, each
    ``flush_s`` (the ids of concurrent publish calls share a message). A mark that no broker takes is
    tried again after ``retry_s``: until it goes out, the other holders keep their copies (and would
    publish them again only if this replica stopped publishing meanwhile)."""

    producer: Producer
    topic: str
    by: str
    _: KW_ONLY
    flush_s: float = FLUSH_S
    retry_s: float = RETRY_S
    on_dropped: Callable[[int], None] = lambda _n: None
    clock: Callable[[], float] = time.monotonic
    sent: int = field(init=False, default=0)
    _ids: list[str] = field(init=False, default_factory=list)
    _retry_at: float = field(init=False, default=0.0)  # after a failed send, nothing before this
    _flushing: Periodic = field(init=False)

    def __post_init__(self) -> None:
        self._flushing = Periodic("dmq-marks", self.flush_s, self._flush, logger=log)

    def add(self, ids: Sequence[str]) -> None:
        self._ids.extend(ids)
        over = len(self._ids) - MAX_BUFFERED
        if over > 0:
            del self._ids[:over]
            self.on_dropped(over)
            log.warning("%d marks dropped: no broker took marks for a while", over)

    @property
    def buffered(self) -> int:
        return len(self._ids)

    def start(self) -> None:
        self._flushing.start()

    async def close(self, grace_s: float = 2.0) -> None:
        """Send what is buffered (within ``grace_s``), then stop."""
        await self._flushing.close()
        self._retry_at = 0.0
        try:
            async with asyncio.timeout(grace_s):
                await self._flush()
        except (TimeoutError, RocketMQError):
            log.warning("%d marks not sent at stop", len(self._ids))

    async def _flush(self) -> None:
        """Send every buffered id. Raises RocketMQError (Periodic logs it, throttled): the rest waits
        for ``retry_s``."""
        if self.clock() < self._retry_at:
            return
        while self._ids:
            chunk = self._ids[:MAX_IDS]
            try:
                await self.producer.send(
                    Message(self.topic, encode(self.by, chunk), properties={OP: OP_MARK})
                )
            except RocketMQError:
                self._retry_at = self.clock() + self.retry_s
                raise
            del self._ids[: len(chunk)]
            self.sent += len(chunk)

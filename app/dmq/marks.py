"""The marks topic: "these ids were published", sent by the replica that published them and read by
every replica, which drops its copies (README "Rock-DMQ replicas").

A mark message carries up to MAX_IDS ids in a JSON body
``{"v": 1, "by": <incarnation>, "ids": [...], "dues": [...]}`` with ``DMQ_OP=MARK``. ``dues`` (epoch ms,
one per id) are the due times of the copies published: a holder finds its copy by one point read at
that due instead of a scan of its index (delay.store.DelayStore.drop_published_many). The member is
optional and the version stays 1: marks without it (from replicas of an earlier version, during a
rolling upgrade) are applied the scan way, and those replicas read these marks, ignoring ``dues``
(envelope.load). ``by`` names the process that sent it (a random id per start), so a replica skips
its own marks of this run but applies those it sent before a restart, which matter after a lost volume.
Anyone who may write the marks topic is hostile like anyone who may write the inner topic: a mark that
does not parse is skipped and counted, never applied in part.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

import orjson

from rocksidecar.rmq import Message, RocketMQError
from rocksidecar.rmq.periodic import Periodic
from rocksidecar.rmq.producer import Producer
from rocksidecar.storage.keys import MAX_DUE_MS

from . import envelope
from .inner import MAX_ID_CHARS, OP

log = logging.getLogger(__name__)

DEFAULT_MARKS_TOPIC = "dmq_marks_topic"
OP_MARK = "MARK"
MAX_IDS = 500  # ids per mark message (~25 KB with 32-character ids and their dues)
# 500 ids of MAX_ID_CHARS that JSON must escape (a '"' or '\\' is 2 bytes) and their dues would be ~137 KB:
# the sender puts fewer ids in such a message (MarkSender._flush), so every mark it sends fits.
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
    dues: tuple[int, ...] | None = None  # each id's due time (ms); None: a mark without them


def new_incarnation() -> str:
    return secrets.token_hex(8)


def encode(by: str, ids: Sequence[str], dues: Sequence[int] | None = None) -> bytes:
    doc: dict[str, object] = {"v": 1, "by": by, "ids": list(ids)}
    if dues is not None:
        doc["dues"] = list(dues)
    return orjson.dumps(doc)


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
    dues = doc.get("dues")
    if dues is None:
        return Mark(by, tuple(ids))
    if not isinstance(dues, list) or len(dues) != len(ids):
        raise MarkFormatError(f"mark's 'dues' must be a list of one due time per id ({len(ids)})")
    for due in dues:
        if type(due) is not int or not 0 <= due <= MAX_DUE_MS:  # not a bool, a float, a string
            raise MarkFormatError(f"mark carries a bad due time {str(due)[:40]!r}")
    return Mark(by, tuple(ids), tuple(dues))


def to_drop(marks: Iterable[Mark], own: str, holds: Callable[[str], bool]) -> dict[str, int | None]:
    """The ids ``marks`` say were published that this replica holds, in order, each with its due time
    when a mark said it (else None); the marks ``own`` sent (this replica in this run) are skipped: those
    ids are its own, SENT."""
    dues: dict[str, int | None] = {}
    for mark in marks:
        if mark.by == own:
            continue
        marked: Sequence[int | None] = mark.dues if mark.dues is not None else (None,) * len(mark.ids)
        for id_, due in zip(mark.ids, marked, strict=True):
            if dues.get(id_) is None and holds(id_):
                dues[id_] = due
    return dues


@dataclass(eq=False)
class MarkSender:
    """Buffers the ids this replica published (with their due times) and sends them as marks, in order,
    MAX_IDS a message (fewer when they would not fit in MAX_BODY), each ``flush_s`` (the ids of
    concurrent publish calls share a message). A mark that no broker takes is tried again after
    ``retry_s``: until it goes out, the other holders keep their copies (and would publish them again
    only if this replica stopped publishing meanwhile)."""

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
    _dues: list[int] = field(init=False, default_factory=list)  # parallel to _ids
    _retry_at: float = field(init=False, default=0.0)  # after a failed send, nothing before this
    _flushing: Periodic = field(init=False)

    def __post_init__(self) -> None:
        self._flushing = Periodic("dmq-marks", self.flush_s, self._flush, logger=log)

    def add(self, ids: Sequence[str], dues: Sequence[int]) -> None:
        """``ids`` were published; ``dues[i]``: the due time ``ids[i]`` was stored under."""
        if len(ids) != len(dues):
            raise ValueError(f"{len(ids)} ids and {len(dues)} due times")
        self._ids.extend(ids)
        self._dues.extend(dues)
        over = len(self._ids) - MAX_BUFFERED
        if over > 0:
            del self._ids[:over]
            del self._dues[:over]
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
            n = min(MAX_IDS, len(self._ids))  # what this message takes: add() may append during the send
            body = encode(self.by, self._ids[:n], self._dues[:n])
            while len(body) > MAX_BODY:  # ids JSON escapes (rare): fewer a message
                n //= 2
                body = encode(self.by, self._ids[:n], self._dues[:n])
            try:
                await self.producer.send(Message(self.topic, body, properties={OP: OP_MARK}))
            except RocketMQError:
                self._retry_at = self.clock() + self.retry_s
                raise
            del self._ids[:n]
            del self._dues[:n]
            self.sent += n

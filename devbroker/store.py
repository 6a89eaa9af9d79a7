"""One broker's message store: the commit log plus, per (topic, queue), an index of where each message
sits, its store time and tag hash. It assigns offsets, encodes each record once at put time, and
answers reads with the pull decision table of the protocol reference (§5.4) and offset queries (§5.6)."""

from __future__ import annotations

import bisect
import enum
import functools
import struct
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from rocksidecar.rmq.broker import java_string_hash
from rocksidecar.rmq.message import MessageExt, encode_properties
from rocksidecar.rmq.message_codec import (
    MAGIC_V1,
    MAGIC_V2,
    StoredFields,
    decode_stored,
    encode_stored,
    offset_msg_id,
    pack_host,
)

from .commitlog import CommitLog, CommitLogCorrupt

MAX_PULL_MESSAGES = 32  # maxTransferCountOnMessageInMemory
MAX_PULL_BYTES = 256 * 1024  # maxTransferBytesOnMessageInMemory
# Java scans max(16000 bytes, 20 * maxMsgNums) of consume queue, 20 bytes an entry: at least 800 entries
MIN_SCAN_ENTRIES = 800

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# topic, queue id, new max offset, and (tag code, stored record) of each message appended
OnAppend = Callable[[str, int, int, Sequence[tuple[int, bytes]]], None]


@functools.lru_cache(maxsize=4096)
def tag_code(tags: str | None) -> int:
    """The consume-queue tag code: Java String.hashCode of TAGS, 0 for an untagged message."""
    return java_string_hash(tags) if tags else 0


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"


@dataclass(frozen=True, slots=True)
class GetResult:
    """GetMessageResult: the status, the offsets of the queue and the found messages' bytes."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message as a send request delivers it; the store adds offsets, times and its own host."""

    body: bytes
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: bytes
    properties: str  # already as stored (a single message: WAIT removed, CLUSTER added)
    tag_code: int
    reconsume_times: int = 0

    @classmethod
    def again(
        cls, msg: MessageExt, props: Mapping[str, str], *, sys_flag: int | None = None, reconsumed: int = 0
    ) -> NewMessage:
        """A message read back from the store, to store again (a committed half, a consumer's send-back,
        a half shown to its producer) with ``props``, ``sys_flag`` when given and ``reconsumed``
        more reconsume times."""
        return cls(
            msg.body,
            msg.flag,
            msg.sys_flag if sys_flag is None else sys_flag,
            msg.born_timestamp_ms,
            packed_host(msg.born_host),
            encode_properties(props),
            tag_code(msg.tags),
            msg.reconsume_times + reconsumed,
        )

    def record(
        self, topic: str, queue_id: int, queue_offset: int, phys: int, stored_ms: int, host: bytes
    ) -> bytes:
        """The commit-log record of this message stored at ``queue_offset``, commit-log offset ``phys``."""
        return encode_stored(
            StoredFields(
                topic=topic,
                body=self.body,
                queue_id=queue_id,
                flag=self.flag,
                queue_offset=queue_offset,
                commit_log_offset=phys,
                sys_flag=self.sys_flag,
                born_timestamp_ms=self.born_timestamp_ms,
                born_host=self.born_host,
                store_timestamp_ms=stored_ms,
                store_host=host,
                reconsume_times=self.reconsume_times,
                properties=self.properties,
            )
        )


def packed_host(host: str) -> bytes:
    """'ip:port' or '[ipv6]:port', as the codec prints a host, back to its wire form."""
    addr, _, port = host.rpartition(":")
    return pack_host(addr.strip("[]"), int(port))


@dataclass(frozen=True, slots=True)
class Appended:
    """Where a stored message went: its queue offset, commit-log offset and offset message id."""

    queue_offset: int
    commit_log_offset: int
    msg_id: str


class _Queue:
    __slots__ = ("base", "phys", "sizes", "tags", "times")

    def __init__(self, base: int) -> None:
        self.base = base  # queue offset of the oldest message still indexed
        self.phys = array("q")
        self.sizes = array("i")
        self.times = array("q")
        self.tags = array("i")

    @property
    def max_offset(self) -> int:
        return self.base + len(self.phys)

    def trim(self, min_phys: int) -> None:
        n = bisect.bisect_left(self.phys, min_phys)
        if n:
            for arr in (self.phys, self.sizes, self.times, self.tags):
                del arr[:n]
            self.base += n


class MessageStore:
    def __init__(
        self,
        log: CommitLog,
        *,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        on_append: OnAppend | None = None,
    ) -> None:
        self._log = log
        self._now_ms = now_ms
        self.on_append = on_append
        self.store_host = pack_host("127.0.0.1", 0)  # the broker sets its address once it listens
        self._queues: dict[tuple[str, int], _Queue] = {}
        self._last_ts = 0
        self._rebuild()
        log.on_drop = self._trim

    def put(self, topic: str, queue_id: int, messages: Sequence[NewMessage]) -> list[Appended]:
        """Append messages to one queue at consecutive offsets."""
        q = self._queues.get((topic, queue_id))
        if q is None:
            q = self._queues[(topic, queue_id)] = _Queue(0)
        now = self._last_ts = max(self._now_ms(), self._last_ts)  # keep store times sorted per queue
        log, host, out = self._log, self.store_host, []
        arrived: list[tuple[int, bytes]] = []
        for m in messages:
            queue_offset, phys = q.max_offset, log.end
            record = m.record(topic, queue_id, queue_offset, phys, now, host)
            # Index first: appending may drop old segments, and the trim must see this entry too.
            q.phys.append(phys)
            q.sizes.append(len(record))
            q.times.append(now)
            q.tags.append(m.tag_code)
            log.append(record)
            out.append(Appended(queue_offset, phys, offset_msg_id(host, phys)))
            arrived.append((m.tag_code, record))
        if self.on_append is not None:
            self.on_append(topic, queue_id, q.max_offset, arrived)
        return out

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int,
        codes: frozenset[int] | None,
        accept: Callable[[bytes], bool] | None = None,
    ) -> GetResult:
        """Read up to ``max_nums`` messages from ``offset`` whose tag code is in ``codes`` (None: all)
        and, with ``accept``, that it accepts (an SQL92 filter on the stored message)."""
        q = self._queues.get((topic, queue_id))
        if q is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = q.base, q.max_offset
        if hi == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            # §5.4 says max; 4.x Java answers min when min is 0 (4.x clients then restart at 0).
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        # The scan is sized by the request's own maxMsgNums (a pull of 1000 looks at 1000 entries), the
        # batch by the clamped one, as DefaultMessageStore.getMessage does.
        scan = max(MIN_SCAN_ENTRIES, max_nums)
        max_nums = max(1, min(max_nums, MAX_PULL_MESSAGES))
        i = offset - lo
        end = min(len(q.phys), i + scan)
        parts: list[bytes] = []
        total = 0
        while i < end:
            size = q.sizes[i]
            if parts and (len(parts) >= max_nums or total + size > MAX_PULL_BYTES):
                break  # Java checks "batch full" before it looks at the next entry's tag
            if codes is None or q.tags[i] in codes:
                data = self._log.read(q.phys[i], size)
                if accept is None or accept(data):
                    parts.append(data)
                    total += size
            i += 1
        status = GetStatus.FOUND if parts else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, lo + i, lo, hi, b"".join(parts))

    def expire(self, topic: str, queue_id: int, before: int) -> int:
        """Forget a queue's entries below offset ``before``, as retention deleting old commit-log files
        would (the records stay in the log; pulls and GET_MIN_OFFSET no longer reach them). Returns the
        queue's min offset after."""
        q = self._queues.get((topic, queue_id))
        if q is None:
            return 0
        n = max(0, min(before, q.max_offset) - q.base)
        if n:
            for arr in (q.phys, q.sizes, q.times, q.tags):
                del arr[:n]
            q.base += n
        return q.base

    def min_offset(self, topic: str, queue_id: int) -> int:
        q = self._queues.get((topic, queue_id))
        return q.base if q else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        q = self._queues.get((topic, queue_id))
        return q.max_offset if q else 0

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """ConsumeQueue.getOffsetInQueueByTime of 4.9.4, step for step: a binary search over the store
        times that stops at the first entry it hits with exactly ``timestamp_ms`` (not necessarily the
        earliest of several equal ones, e.g. the middle message of a batch), else the nearer of the
        entries around it (ties to the earlier one), the first offset before all messages and the last
        one after all; 0 for an unknown queue. (Java searches one consume-queue file of 300,000 entries,
        chosen by its modification time; devbroker's queue is one file.)"""
        q = self._queues.get((topic, queue_id))
        if q is None or not q.times:
            return q.base if q else 0
        times = q.times
        low, high = 0, len(times) - 1
        target = left = right = -1
        left_time = right_time = -1
        while high >= low:
            mid = (low + high) // 2
            stored = times[mid]
            if stored == timestamp_ms:
                target = mid
                break
            if stored > timestamp_ms:
                high = mid - 1
                right, right_time = mid, stored
            else:
                low = mid + 1
                left, left_time = mid, stored
        if target != -1:
            found = target
        elif left_time == -1:
            found = right
        elif right_time == -1:
            found = left
        else:
            found = right if abs(timestamp_ms - left_time) > abs(timestamp_ms - right_time) else left
        return q.base + found

    def entry(self, topic: str, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        """(store time, commit-log offset, size) of the message at a queue offset, or None when the
        queue does not hold that offset (any more)."""
        q = self._queues.get((topic, queue_id))
        i = offset - q.base if q is not None else -1
        if q is None or not 0 <= i < len(q.phys):
            return None
        return q.times[i], q.phys[i], q.sizes[i]

    def read(self, commit_log_offset: int, size: int) -> bytes:
        """The record an ``entry`` names."""
        return self._log.read(commit_log_offset, size)

    def record_at(self, commit_log_offset: int) -> bytes | None:
        """The stored record at a commit-log offset (VIEW_MESSAGE_BY_ID, send-back), or None when
        no record starts there."""
        record = self._log.read_record(commit_log_offset)
        if record is None:
            return None
        (magic,) = _I32.unpack_from(record, 4)
        (phys,) = _I64.unpack_from(record, 28)
        return record if magic in (MAGIC_V1, MAGIC_V2) and phys == commit_log_offset else None

    def messages(self, topic: str, queue_id: int, *, inflate: bool = True) -> list[MessageExt]:
        """Every message still stored in a queue, decoded (for tests and humans); ``inflate`` False: the
        bodies as stored (a compressed one that does not inflate too)."""
        q = self._queues.get((topic, queue_id))
        if q is None:
            return []
        return [
            decode_stored(self._log.read(p, s), inflate=inflate)[0]
            for p, s in zip(q.phys, q.sizes, strict=True)
        ]

    def queues(self) -> Iterator[tuple[str, int]]:
        return iter(list(self._queues))

    def _trim(self, min_phys: int) -> None:
        for q in self._queues.values():
            q.trim(min_phys)

    def _rebuild(self) -> None:
        for phys, record in self._log.scan():
            msg, _ = decode_stored(record, inflate=False)
            if msg.commit_log_offset != phys:
                raise CommitLogCorrupt(f"record at {phys} claims commit-log offset {msg.commit_log_offset}")
            key = (msg.topic, msg.queue_id)
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = _Queue(msg.queue_offset)
            elif msg.queue_offset != q.max_offset:
                raise CommitLogCorrupt(f"{key} jumps from offset {q.max_offset} to {msg.queue_offset}")
            q.phys.append(phys)
            q.sizes.append(msg.store_size)
            q.times.append(msg.store_timestamp_ms)
            q.tags.append(tag_code(msg.tags))
            self._last_ts = max(self._last_ts, msg.store_timestamp_ms)

"""Byte layouts of messages: the batch body of SEND_BATCH_MESSAGE and the broker's stored-message
record (pull bodies, commit log), with v1/v2 magic, IPv4/IPv6 hosts and compressed bodies."""

from __future__ import annotations

import ipaddress
import socket
import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from .codes import (
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_LZ4,
    SYSFLAG_COMPRESSION_MASK,
    SYSFLAG_COMPRESSION_ZSTD,
    SYSFLAG_STOREHOST_V6,
)
from .errors import FrameError, InflateError, InvalidMessageError
from .message import PROPERTIES_MAX_BYTES, MessageExt, decode_properties, stored_message

MAGIC_V1 = -626843481  # 0xDAA320A7: 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: 2-byte topic length (5.x)
_HEAD = struct.Struct(
    ">iiiiiqqiq"
)  # total, magic, crc, queueId, flag, queueOffset, physOffset, sysFlag, bornTs
_BATCH_HEAD = struct.Struct(">iiiii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_Q = struct.Struct(">q")


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_batch(messages: Iterable[tuple[bytes, int, str]]) -> bytes:
    """Concatenate (body, flag, properties) records as MessageDecoder.encodeMessage does.
    InvalidMessageError (final) for properties longer than a record holds (BatchSender refuses such a
    message alone before it gets here: this keeps struct.error from escaping any other caller)."""
    parts: list[bytes] = []
    # A record's head and its properties' length depend only on the lengths and the flag, which most
    # records of a batch share (ids of one length, bodies often of one): packed once each, not per record
    # (two packs were a third of a record's instructions, issue 32).
    packed: dict[tuple[int, int, int], tuple[bytes, bytes]] = {}
    for body, flag, props in messages:
        props_b = props.encode()
        key = (len(body), len(props_b), flag)
        try:
            head, plen = packed[key]
        except KeyError:
            size, n = key[0], key[1]
            if n > PROPERTIES_MAX_BYTES:  # 'h' would raise struct.error, which no caller expects
                raise InvalidMessageError(
                    f"properties are {n} bytes; a batch record holds at most {PROPERTIES_MAX_BYTES}",
                    field="properties",
                ) from None
            # total size: a 20-byte head, the body, the properties' 2-byte length and the properties
            head, plen = packed[key] = (_BATCH_HEAD.pack(22 + size + n, 0, 0, flag, size), _I16.pack(n))
        parts += (head, body, plen, props_b)
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    body: bytes
    flag: int
    properties: str


def decode_batch(data: bytes) -> list[BatchRecord]:
    """Inverse of encode_batch (the broker side of SEND_BATCH_MESSAGE)."""
    out: list[BatchRecord] = []
    pos = 0
    try:
        while pos < len(data):
            total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(data, pos)
            if total < 22 or pos + total > len(data) or body_len < 0 or 22 + body_len > total:
                raise FrameError(f"bad batch record at byte {pos}")
            body = data[pos + 20 : pos + 20 + body_len]
            (plen,) = _I16.unpack_from(data, pos + 20 + body_len)
            props = data[pos + 22 + body_len : pos + 22 + body_len + plen].decode()
            out.append(BatchRecord(body, flag, props))
            pos += total
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"undecodable batch body: {exc}") from exc
    return out


def pack_host(host: str, port: int) -> bytes:
    return ipaddress.ip_address(host).packed + _I32.pack(port)


def offset_msg_id(store_host: bytes, commit_log_offset: int) -> str:
    """MessageDecoder.createMessageId: store ip + port + commit-log offset, uppercase hex."""
    return (store_host + _Q.pack(commit_log_offset)).hex().upper()


@dataclass(frozen=True, slots=True)
class StoredFields:
    """What a broker records for one message; encode_stored turns it into the commit-log record."""

    topic: str
    body: bytes
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: bytes  # packed ip + port (8 or 20 bytes)
    store_timestamp_ms: int
    store_host: bytes
    reconsume_times: int
    properties: str
    prepared_transaction_offset: int = 0


def encode_stored(f: StoredFields) -> bytes:
    topic_b, props_b = f.topic.encode(), f.properties.encode()
    if len(topic_b) > 127:
        raise ValueError("topic longer than 127 bytes does not fit the v1 layout")
    if len(props_b) > PROPERTIES_MAX_BYTES:  # the broker refuses such a message before storing it
        raise ValueError(f"properties longer than {PROPERTIES_MAX_BYTES} bytes do not fit a stored message")
    sys_flag = f.sys_flag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    if len(f.born_host) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(f.store_host) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(f.born_host) + 8 + len(f.store_host) + 4 + 8
    total += 4 + len(f.body) + 1 + len(topic_b) + 2 + len(props_b)
    return b"".join(
        (
            _HEAD.pack(
                total,
                MAGIC_V1,
                body_crc(f.body),
                f.queue_id,
                f.flag,
                f.queue_offset,
                f.commit_log_offset,
                sys_flag,
                f.born_timestamp_ms,
            ),
            f.born_host,
            _Q.pack(f.store_timestamp_ms),
            f.store_host,
            struct.pack(">iqi", f.reconsume_times, f.prepared_transaction_offset, len(f.body)),
            f.body,
            bytes((len(topic_b),)),
            topic_b,
            _I16.pack(len(props_b)),
            props_b,
        )
    )


_HOSTS: dict[bytes, str] = {}  # packed host -> its text; a consumer sees few producers and brokers
_HOSTS_MAX = 4096


def _host_text(raw: bytes) -> str:
    text = _HOSTS.get(raw)
    if text is None:
        n = len(raw) - 4
        (port,) = _I32.unpack_from(raw, n)
        # For IPv4, inet_ntoa gives ipaddress's text ~10x cheaper.
        text = (
            f"[{ipaddress.ip_address(raw[:n])}]:{port}" if n == 16 else f"{socket.inet_ntoa(raw[:4])}:{port}"
        )
        if len(_HOSTS) >= _HOSTS_MAX:  # born hosts of many short-lived producers: start over
            _HOSTS.clear()
        _HOSTS[raw] = text
    return text


# How far a reader inflates one compressed body. Java's producer refuses a body over its maxMessageSize
# (4 MiB) before compressing it, so an honest body inflates to at most that; 16 MiB leaves room for
# producers that raised their limit, and bounds what a few KB of zlib (1000:1) or lz4/zstd (far more)
# can make every consumer of a topic allocate. ConsumerConfig.max_body_bytes (the push consumer) and
# BrokerApi.pull's max_body_bytes set it per reader.
MAX_BODY_BYTES = 16 * 1024 * 1024


# Deflate's densest code: a 258-byte match in 2 bits, so a zlib body inflates to at most 1032 times its size.
# Bodies that cannot reach the limit (16 KiB and less at 16 MiB: nearly all) skip decompressobj's cost.
DEFLATE_MAX_RATIO = 1032
_CODECS = {SYSFLAG_COMPRESSION_LZ4: "lz4", SYSFLAG_COMPRESSION_ZSTD: "zstd"}


def decompress(body: bytes, sys_flag: int, limit: int = MAX_BODY_BYTES) -> bytes:
    """The inflated body of a record whose sysflag says COMPRESSED, asking the codec for at most
    ``limit`` + 1 bytes; InflateError if it is corrupt, truncated, of a codec not installed, or larger
    than ``limit``."""
    kind = sys_flag & SYSFLAG_COMPRESSION_MASK
    name = _CODECS.get(kind, "zlib")
    try:
        if kind == SYSFLAG_COMPRESSION_LZ4:
            out, complete = _lz4(body, limit)
        elif kind == SYSFLAG_COMPRESSION_ZSTD:
            out, complete = _zstd(body, limit)
        elif len(body) * DEFLATE_MAX_RATIO <= limit:  # cannot inflate past it: the one-call path
            out, complete = zlib.decompress(body), True  # (a truncated stream raises)
        else:  # ZLIB, or 0 from clients before 4.9.4
            z = zlib.decompressobj()
            out = z.decompress(body, limit + 1)
            complete = z.eof
    except InflateError:
        raise
    except Exception as exc:  # each codec has its own (zlib.error, RuntimeError, ZstdError, ImportError)
        raise InflateError(f"corrupt {name} body: {exc}") from exc
    if len(out) > limit:
        raise InflateError(f"{name} body inflates past the {limit}-byte limit")
    if not complete:
        raise InflateError(f"truncated {name} body")
    return out


def _lz4(body: bytes, limit: int) -> tuple[bytes, bool]:
    import lz4.frame

    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(body, max_length=limit + 1)
    return bytes(out), bool(d.eof) and not d.unused_data


def _zstd(body: bytes, limit: int) -> tuple[bytes, bool]:
    import zstandard

    declared = zstandard.frame_content_size(body)  # -1: not in the frame's header
    if declared > limit:
        raise InflateError(f"zstd body declares {declared} bytes, past the {limit}-byte limit")
    # With a declared size zstd allocates that and checks the frame delivers exactly it; without, it
    # allocates limit + 1 and fails a frame that needs more. A truncated frame fails either way.
    d = zstandard.ZstdDecompressor()
    if declared >= 0:
        return d.decompress(body), True
    try:
        return d.decompress(body, max_output_size=limit + 1), True
    except zstandard.ZstdError as exc:  # zstd does not tell the two apart
        raise InflateError(
            f"zstd body is corrupt, truncated or inflates past the {limit}-byte limit: {exc}"
        ) from exc


# The rest of a record's head after _HEAD, by its host flags: born host (IPv4 or IPv6, with port), store
# timestamp, store host, reconsume times, prepared offset, body length; one unpack a record.
_TAILS = {
    flags: struct.Struct(
        f">{20 if flags & SYSFLAG_BORNHOST_V6 else 8}sq{20 if flags & SYSFLAG_STOREHOST_V6 else 8}siqi"
    )
    for flags in (0, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
}
_HOST_FLAGS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6

# A stored record's raw fields: total size, body crc, queue id, flag, queue offset, commit-log offset, sys
# flag, born timestamp, born host (packed), store timestamp, store host (packed), reconsume times,
# prepared offset, body (inflated if asked), topic (undecoded), properties text.
_Raw = tuple[int, int, int, int, int, int, int, int, bytes, int, bytes, int, int, bytes, bytes, str]
T = TypeVar("T")


class RecordError(InflateError):
    """The record at a position is framed soundly (so the walk goes on at ``end``) but its body does not
    inflate or its text does not decode; ``fields`` are its raw fields with an empty body and the
    properties as far as they decode ("" if not)."""

    def __init__(self, message: str, fields: _Raw, pos: int) -> None:
        super().__init__(message)
        self.fields: _Raw = (*fields[:13], b"", *fields[14:])  # the body as none: it did not decode
        self.end = pos + fields[0]  # the position after the record
        self.reason = message

    def undecodable(self) -> Undecodable:
        """What the consumer needs to dead-letter the record (CONSUMER_SEND_MSG_BACK by its commit-log
        offset; the broker copies its stored bytes, not ours) and to log it."""
        (total, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
         born_raw, store_ts, store_raw, reconsume, prepared, body, topic_b, props) = self.fields  # fmt: skip
        msg = stored_message(
            topic_b.decode(errors="replace"), body, queue_id, queue_offset, phys, sys_flag, flag,
            born_ts, _host_text(born_raw), store_ts, _host_text(store_raw), reconsume, prepared, crc, total,
            decode_properties(props), offset_msg_id(store_raw, phys),
        )  # fmt: skip
        return Undecodable(msg, self.reason)


def _raw(data: bytes, pos: int, inflate: bool, limit: int = MAX_BODY_BYTES) -> _Raw:
    """The fields of the record at ``pos``, sizes checked against ``total``; FrameError if malformed (the
    walk cannot go on), RecordError if the frame is sound but the body or properties do not decode."""
    try:
        total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = _HEAD.unpack_from(
            data, pos
        )
        if magic not in (MAGIC_V1, MAGIC_V2) or total < _HEAD.size or pos + total > len(data):
            raise FrameError(
                f"bad stored message at byte {pos} (magic {magic & 0xFFFFFFFF:#x}, size {total})"
            )
        tail = _TAILS[sys_flag & _HOST_FLAGS]
        born_raw, store_ts, store_raw, reconsume, prepared, body_len = tail.unpack_from(
            data, pos + _HEAD.size
        )
        cur = pos + _HEAD.size + tail.size
        if body_len < 0:
            raise FrameError(f"stored message at byte {pos} declares a negative body length")
        body = bytes(data[cur : cur + body_len])
        cur += body_len
        if magic == MAGIC_V1:
            topic_len = data[cur]
            cur += 1
        else:
            (topic_len,) = _I16.unpack_from(data, cur)
            cur += 2
        topic = bytes(data[cur : cur + topic_len])
        cur += topic_len
        (props_len,) = _I16.unpack_from(data, cur)
        props_b = bytes(data[cur + 2 : cur + 2 + props_len])
        cur += 2 + props_len
        if cur - pos != total:
            raise FrameError(f"stored message at byte {pos} declares {total} bytes but holds {cur - pos}")
    except (struct.error, IndexError) as exc:
        raise FrameError(f"undecodable stored message at byte {pos}: {exc}") from exc
    try:
        props = props_b.decode()
        if inflate and sys_flag & SYSFLAG_COMPRESSED:
            body = decompress(body, sys_flag, limit)
    except (UnicodeDecodeError, InflateError) as exc:
        props = "" if isinstance(exc, UnicodeDecodeError) else props  # the body failed: they decoded
        fields = (
            total, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
            born_raw, store_ts, store_raw, reconsume, prepared, body, topic, props,
        )  # fmt: skip
        raise RecordError(f"undecodable stored message at byte {pos}: {exc}", fields, pos) from exc
    return (
        total, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
        born_raw, store_ts, store_raw, reconsume, prepared, body, topic, props,
    )  # fmt: skip


def decode_stored(
    data: bytes, pos: int = 0, *, inflate: bool = True, limit: int = MAX_BODY_BYTES
) -> tuple[MessageExt, int]:
    """Decode one stored-message record at ``pos``; returns it and the position after it. FrameError if
    the record is malformed; RecordError (a FrameError) if only its content is (``limit``: decompress)."""
    msg, end, _ = _message(data, pos, inflate, limit)
    return msg, end


def _message(data: bytes, pos: int, inflate: bool, limit: int) -> tuple[MessageExt, int, int]:
    """decode_stored, with the record's queue offset (what _walk checks the order of)."""
    raw = _raw(data, pos, inflate, limit)
    (total, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
     born_raw, store_ts, store_raw, reconsume, prepared, body, topic, props) = raw  # fmt: skip
    try:
        topic_text = topic.decode()
    except UnicodeDecodeError as exc:
        raise RecordError(f"undecodable stored message at byte {pos}: {exc}", raw, pos) from exc
    msg = stored_message(
        topic_text, body, queue_id, queue_offset, phys, sys_flag, flag, born_ts, _host_text(born_raw),
        store_ts, _host_text(store_raw), reconsume, prepared, crc, total, decode_properties(props),
        offset_msg_id(store_raw, phys),
    )  # fmt: skip
    return msg, pos + total, queue_offset


# What a bulk reader (the Spark source) takes of a record: queue offset, body (inflated), properties text,
# born timestamp, store timestamp, reconsume times, store host (packed) and commit-log offset (the two
# that offset_msg_id needs, for a message without UNIQ_KEY).
StoredRecord = tuple[int, bytes, str, int, int, int, bytes, int]


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A record of a pull whose frame is sound but whose body or text is not: ``message`` has its
    offsets, hosts, reconsume times and (when they decode) properties, with an empty body."""

    message: MessageExt
    reason: str


@dataclass(slots=True)
class PullBody(Generic[T]):
    """A pull body walked record by record: the records that decode (MessageExt or StoredRecord), the
    ones that do not (each still moves the walk on), and, when a record's frame itself is corrupt (its
    sizes or magic wrong), why: the walk stops there and ``items`` and ``undecodable`` are what preceded
    it. ``refused``: why the answer breaks what every broker answers (see _walk); the walk stopped there
    and the answer must be refused whole."""

    items: list[T]
    undecodable: list[Undecodable]
    corrupt: str | None = None
    refused: str | None = None


def _walk(
    data: bytes, step: Callable[[bytes, int], tuple[T, int, int]], max_records: int | None = None
) -> PullBody[T]:
    """Walk ``data`` with ``step`` (an item, the position after it, its queue offset). With
    ``max_records`` it is a pull answer, held to what every broker answers: at most that many records
    (decodable or not), their queue offsets strictly ascending; the walk stops at the first record that
    breaks this (``refused``), and a record past the count is not decoded, so not inflated: an answer
    cannot make a consumer inflate more than it asked for. The checks cost a compare a record."""
    out: list[T] = []
    bad: list[Undecodable] = []
    pos, n = 0, len(data)
    checked = max_records is not None
    last = -(1 << 64)  # below any offset (a signed 64-bit field)
    try:
        # Each record takes at least one byte, so n steps are never the bound when unchecked.
        for _ in range(n if max_records is None else max_records):
            if pos >= n:
                break
            try:
                item, pos, offset = step(data, pos)
            except RecordError as exc:
                bad.append(exc.undecodable())
                pos, offset = exc.end, exc.fields[4]
            else:
                out.append(item)
            if offset <= last and checked:
                why = f"record at offset {offset} follows one at {last}: not strictly ascending"
                return PullBody(out, bad, refused=why)
            last = offset
        else:
            if pos < n and checked:
                return PullBody(out, bad, refused=f"more records than the {max_records} asked for")
    except FrameError as exc:
        return PullBody(out, bad, str(exc))
    return PullBody(out, bad)


def _strict(body: PullBody[T]) -> list[T]:
    if body.corrupt is not None:
        raise FrameError(body.corrupt)
    if body.undecodable:
        raise InflateError(body.undecodable[0].reason)
    return body.items


def _record(data: bytes, pos: int, limit: int = MAX_BODY_BYTES) -> tuple[StoredRecord, int, int]:
    (total, _, _, _, queue_offset, phys, _, born_ts,
     _, store_ts, store_raw, reconsume, _, body, _, props) = _raw(data, pos, True, limit)  # fmt: skip
    record = (queue_offset, body, props, born_ts, store_ts, reconsume, store_raw, phys)
    return record, pos + total, queue_offset


def pull_records(
    data: bytes, limit: int = MAX_BODY_BYTES, max_records: int | None = None
) -> PullBody[StoredRecord]:
    """Every record of a pull body as plain tuples: no MessageExt, property dict, host texts or offset
    id per message (a third of decode_stored's cost). The topic's bytes are skipped undecoded: a pull
    names its topic. One undecodable record does not stop the walk (see PullBody). ``max_records``: the
    answer to a pull that asked for that many (see _walk)."""
    return _walk(data, lambda d, p: _record(d, p, limit), max_records)


def pull_messages(
    data: bytes, limit: int = MAX_BODY_BYTES, max_records: int | None = None
) -> PullBody[MessageExt]:
    """Every record of a pull body, in order, as MessageExt; see PullBody and pull_records."""
    return _walk(data, lambda d, p: _message(d, p, True, limit), max_records)


def stored_records(data: bytes, limit: int = MAX_BODY_BYTES) -> list[StoredRecord]:
    """pull_records, all or nothing: FrameError (InflateError for a record's content) if one is bad."""
    return _strict(pull_records(data, limit))


def decode_stored_all(data: bytes, limit: int = MAX_BODY_BYTES) -> list[MessageExt]:
    """Every record of a pull body, in order; all or nothing as stored_records."""
    return _strict(pull_messages(data, limit))

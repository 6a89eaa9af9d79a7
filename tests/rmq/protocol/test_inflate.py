"""Compressed bodies from any producer: inflated within a limit (the codec is never asked for more than
limit + 1 bytes), every codec's failure one error, and one bad record of a pull body never costs the
others: the walk goes on past it, or stops only where a record's frame itself is corrupt."""

from __future__ import annotations

import random
import zlib
from typing import Any

import lz4.frame
import pytest
import zstandard

from rocksidecar.rmq.codes import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_LZ4,
    SYSFLAG_COMPRESSION_ZLIB,
    SYSFLAG_COMPRESSION_ZSTD,
)
from rocksidecar.rmq.errors import FrameError, InflateError
from rocksidecar.rmq.message_codec import (
    DEFLATE_MAX_RATIO,
    MAX_BODY_BYTES,
    StoredFields,
    decode_stored,
    decode_stored_all,
    decompress,
    encode_stored,
    offset_msg_id,
    pack_host,
    pull_messages,
    pull_records,
    stored_records,
)

ZLIB = SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZLIB
LZ4 = SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_LZ4
ZSTD = SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZSTD
LIMIT = 64 * 1024
NOISE = random.Random(7).randbytes(20_000)  # incompressible: a cut frame really lacks its end


def record(offset: int, body: bytes, sys_flag: int = 0, props: str = "") -> bytes:
    """A stored record of topic T, queue 1, at ``offset`` (commit-log offset 1000 + it), reconsumed twice."""
    born, store = pack_host("10.0.0.1", 1), pack_host("10.0.0.2", 10911)
    props = props or f"UNIQ_KEY\x01U{offset}\x02TAGS\x01A"
    fields = StoredFields("T", body, 1, 0, offset, 1000 + offset, sys_flag, 5, born, 6, store, 2, props)
    return encode_stored(fields)


def zstd_unsized(data: bytes) -> bytes:
    c = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    return c.compress(data) + c.flush()


def test_the_default_limit_is_four_times_javas_max_message_size() -> None:
    assert MAX_BODY_BYTES == 4 * 4 * 1024 * 1024


@pytest.mark.parametrize(
    ("flag", "pack"),
    [
        (SYSFLAG_COMPRESSED, zlib.compress),
        (ZLIB, zlib.compress),
        (LZ4, lz4.frame.compress),
        (ZSTD, zstandard.ZstdCompressor().compress),
        (ZSTD, zstd_unsized),
    ],
)
def test_a_body_at_the_limit_inflates_one_past_it_does_not(flag: int, pack: Any) -> None:
    assert decompress(pack(b"a" * LIMIT), flag, LIMIT) == b"a" * LIMIT
    with pytest.raises(InflateError, match="byte limit"):
        decompress(pack(b"a" * (LIMIT + 1)), flag, LIMIT)


def test_a_zlib_bomb_of_a_few_kb_is_refused_at_the_default_limit() -> None:
    bomb = zlib.compress(b"\0" * (MAX_BODY_BYTES * 2), 9)
    assert len(bomb) < 64 * 1024  # ~1000:1: 32 MiB from a few tens of KB
    with pytest.raises(InflateError, match="past the 16777216-byte limit"):
        decompress(bomb, ZLIB)


def test_a_zstd_bomb_that_declares_its_size_is_refused_before_inflating() -> None:
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (MAX_BODY_BYTES + 1))
    assert len(bomb) < 4096
    with pytest.raises(InflateError, match="declares 16777217 bytes"):
        decompress(bomb, ZSTD)


@pytest.mark.parametrize(
    ("flag", "body"),
    [
        (ZLIB, b"not zlib at all"),
        (ZLIB, zlib.compress(b"payload " * 500)[:-20]),  # truncated
        (LZ4, b"not an lz4 frame"),
        (LZ4, lz4.frame.compress(b"payload " * 5000)[:100]),  # truncated
        (LZ4, lz4.frame.compress(b"x") + b"trailing"),
        (ZSTD, b"not a zstd frame"),
        (ZSTD, zstandard.ZstdCompressor().compress(NOISE)[:5000]),  # truncated, size declared
        (ZSTD, zstd_unsized(NOISE)[:5000]),  # truncated, no size: no silent partial data
    ],
)
def test_every_codec_failure_is_one_error_type(flag: int, body: bytes) -> None:
    with pytest.raises(InflateError):
        decompress(body, flag, LIMIT)


def test_the_codec_is_asked_for_at_most_limit_plus_one_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real_zlib = zlib.decompressobj

    class Z:
        def __init__(self) -> None:
            self._d = real_zlib()
            self.eof = False

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            asked.append(max_length)
            out = self._d.decompress(data, max_length)
            self.eof = self._d.eof
            return out

    monkeypatch.setattr(zlib, "decompressobj", Z)
    with pytest.raises(InflateError):
        decompress(zlib.compress(b"\0" * (LIMIT * 100)), ZLIB, LIMIT)
    assert asked == [LIMIT + 1]

    lz4_asked: list[int] = []
    real_lz4 = lz4.frame.LZ4FrameDecompressor

    class L(real_lz4):  # type: ignore[misc,valid-type]
        def decompress(self, data: bytes, max_length: int = -1) -> bytes:
            lz4_asked.append(max_length)
            return super().decompress(data, max_length)  # type: ignore[no-any-return]

    monkeypatch.setattr(lz4.frame, "LZ4FrameDecompressor", L)
    with pytest.raises(InflateError):
        decompress(lz4.frame.compress(b"\0" * (LIMIT * 100)), LZ4, LIMIT)
    assert lz4_asked == [LIMIT + 1]

    zstd_asked: list[int] = []
    real_zstd = zstandard.ZstdDecompressor

    class S:
        def decompress(self, data: bytes, max_output_size: int = 0) -> bytes:
            zstd_asked.append(max_output_size)
            return real_zstd().decompress(data, max_output_size=max_output_size)

    monkeypatch.setattr(zstandard, "ZstdDecompressor", S)
    with pytest.raises(InflateError):
        decompress(zstd_unsized(b"\0" * (LIMIT * 100)), ZSTD, LIMIT)
    assert zstd_asked == [LIMIT + 1]


def test_strict_decoders_raise_the_inflate_error() -> None:
    bad = record(0, b"garbage", LZ4)
    with pytest.raises(InflateError):
        decode_stored(bad)
    with pytest.raises(InflateError):
        decode_stored_all(record(1, b"ok") + bad)
    with pytest.raises(InflateError):
        stored_records(bad)
    assert decode_stored(bad, inflate=False)[0].body == b"garbage"  # the broker's own view


def test_a_bad_record_between_good_ones_is_set_aside_and_the_walk_goes_on() -> None:
    bomb = zlib.compress(b"\0" * (LIMIT * 50), 9)
    data = (
        record(10, b"first")
        + record(11, bomb, ZLIB)
        + record(12, zlib.compress(b"third" * 100), ZLIB)
        + record(13, b"\x00garbage", ZSTD)
        + record(14, b"fifth", props="UNIQ_KEY\x01U14\x02bad\x01\xff")  # not UTF-8 after the text
    )
    data = data.replace(b"bad\x01\xc3\xbf", b"bad\x01\xff\xfe")  # make the last one's properties invalid
    walked = pull_messages(data, LIMIT)
    assert [m.queue_offset for m in walked.items] == [10, 12]
    assert walked.items[1].body == b"third" * 100
    assert walked.corrupt is None
    assert [u.message.queue_offset for u in walked.undecodable] == [11, 13, 14]
    first_bad = walked.undecodable[0]
    assert "limit" in first_bad.reason
    m = first_bad.message
    assert (m.commit_log_offset, m.queue_id, m.reconsume_times, m.topic, m.body) == (1011, 1, 2, "T", b"")
    assert m.msg_id == "U11" and m.tags == "A"  # the properties decoded: the DLQ send names its id
    assert walked.undecodable[2].message.properties == {}  # they did not: the offset id stands in
    assert walked.undecodable[2].message.msg_id == offset_msg_id(pack_host("10.0.0.2", 10911), 1014)
    records = pull_records(data, LIMIT)
    assert [r[0] for r in records.items] == [10, 12]
    assert [u.message.queue_offset for u in records.undecodable] == [11, 13, 14]


def test_a_corrupt_frame_stops_the_walk_keeping_what_came_before() -> None:
    good = record(20, b"good")
    broken = bytearray(record(21, b"next"))
    broken[0:4] = (len(broken) + 7).to_bytes(4, "big")  # its size is wrong: nothing after it can be found
    walked = pull_messages(good + bytes(broken) + record(22, b"after"))
    assert [m.queue_offset for m in walked.items] == [20]
    assert walked.corrupt is not None and "byte" in walked.corrupt
    with pytest.raises(FrameError):
        decode_stored_all(good + bytes(broken))


def test_zlib_bodies_too_small_to_reach_the_limit_take_the_one_call_path() -> None:
    """Deflate inflates at most 1032:1 (a 258-byte match in 2 bits), so a body of limit / 1032 bytes or
    less cannot pass the limit; the densest stream zlib makes stays under that ratio."""
    densest = zlib.compress(b"\0" * (8 << 20), 9)
    assert (8 << 20) / len(densest) < DEFLATE_MAX_RATIO
    small = zlib.compress(b"payload " * 1000)
    assert len(small) * DEFLATE_MAX_RATIO <= LIMIT
    assert decompress(small, ZLIB, LIMIT) == b"payload " * 1000
    with pytest.raises(InflateError, match="corrupt zlib"):
        decompress(small[:-6], ZLIB, LIMIT)  # truncated: zlib.decompress raises

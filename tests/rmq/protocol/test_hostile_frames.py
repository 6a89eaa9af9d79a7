"""Frames a broken or malicious peer may send: every one is refused with FrameError (the connection
closes), none loops, allocates past the frame or lets another exception out of the decoder."""

from __future__ import annotations

import struct

import orjson
import pytest

from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.protocol.frame import MAX_HEADER_BYTES, FrameDecoder, decode
from rocksidecar.rmq.protocol.header_codec import (
    MAX_EXT_FIELDS,
    MAX_REMARK_CHARS,
    decode_binary,
    decode_json,
)

_FIXED = struct.pack(">hbhii", 0, 0, 0, 1, 1)  # code, language, version, opaque, flag (a response)


def _binary(remark: bytes, ext: bytes, *, remark_len: int | None = None, ext_len: int | None = None) -> bytes:
    rl = len(remark) if remark_len is None else remark_len
    el = len(ext) if ext_len is None else ext_len
    return _FIXED + struct.pack(">i", rl) + remark + struct.pack(">i", el) + ext


def _entry(key: bytes, value: bytes) -> bytes:
    return struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value


def test_a_negative_key_length_is_refused_not_looped_over() -> None:
    # The second key's length -6 moved the cursor back onto the first value's four zero bytes, read as
    # a value length of 0: the cursor came back where it was and decode_binary spun for ever.
    ext = _entry(b"a", b"\x00" * 4) + b"\xff\xfa\x00\x00"
    with pytest.raises(FrameError, match="key length -6"):
        decode_binary(_binary(b"", ext))


@pytest.mark.parametrize(
    ("remark", "ext", "lengths"),
    [
        (b"", _entry(b"k", b"v")[:-1] + b"\x00\x00\x00\x7f", {}),  # a value running past the map
        (b"", b"\x7f\xff" + b"k", {}),  # a key running past the map
        (b"", struct.pack(">h", 1) + b"k" + struct.pack(">i", -5), {}),  # a negative value length
        (b"hi", b"", {"remark_len": -2}),  # a negative remark length
        (b"hi", b"", {"remark_len": 1 << 30}),  # a remark of a gigabyte announced
        (b"", _entry(b"k", b"v"), {"ext_len": 1 << 30}),  # a map past the header
    ],
)
def test_binary_lengths_past_what_is_there_are_refused(
    remark: bytes, ext: bytes, lengths: dict[str, int]
) -> None:
    with pytest.raises(FrameError):
        decode_binary(_binary(remark, ext, **lengths))


def test_binary_ext_fields_are_counted() -> None:
    ok = b"".join(_entry(b"k%d" % i, b"v") for i in range(MAX_EXT_FIELDS))
    assert len(decode_binary(_binary(b"", ok))[6]) == MAX_EXT_FIELDS
    with pytest.raises(FrameError, match="extFields"):
        decode_binary(_binary(b"", ok + _entry(b"one-more", b"v")))


def test_a_remark_of_megabytes_is_cut() -> None:
    remark = decode_binary(_binary(b"x" * 3_000_000, b""))[5]
    assert remark is not None and len(remark) < MAX_REMARK_CHARS + 40
    assert remark.endswith("(3000000 characters)")
    doc = orjson.dumps({"code": 1, "flag": 1, "remark": "y" * 3_000_000})
    assert len(decode_json(doc)[5] or "") < MAX_REMARK_CHARS + 40


@pytest.mark.parametrize(
    "doc",
    [
        {"code": "twelve"},
        {"code": 1 << 40},  # past Java's int
        {"code": 1, "opaque": 1e30},
        {"code": 1, "opaque": [1]},
        {"code": 1, "flag": None},
        {"code": 1, "language": 1 << 40},
        {"code": 1, "extFields": ["a", "b"]},
        {"code": 1, "extFields": "a=b"},
        {"code": 1, "extFields": {f"k{i}": "v" for i in range(MAX_EXT_FIELDS + 1)}},
    ],
)
def test_json_headers_of_the_wrong_shape_are_frame_errors(doc: dict[str, object]) -> None:
    # Before: ValueError, TypeError or AttributeError left the decoder (out of data_received).
    with pytest.raises(FrameError):
        decode_json(orjson.dumps(doc))


def test_a_json_remark_that_is_not_a_string_becomes_text() -> None:
    assert decode_json(b'{"code":1,"remark":42}')[5] == "42"


def test_json_nested_too_deep_is_a_frame_error() -> None:
    deep = b'{"code":1,"extFields":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}"
    with pytest.raises(FrameError):
        decode_json(deep)


def test_a_header_of_megabytes_is_refused_before_it_is_parsed() -> None:
    header = b'{"code":1,"remark":"' + b"z" * MAX_HEADER_BYTES + b'"}'
    frame = struct.pack(">i", len(header)) + header
    with pytest.raises(FrameError, match="header of"):
        decode(frame)


def test_a_header_length_past_the_frame_is_refused() -> None:
    with pytest.raises(FrameError, match="overruns"):
        decode(struct.pack(">i", 100) + b'{"code":1}')


def test_a_bad_header_in_a_stream_fails_the_feed_with_frame_error() -> None:
    header = b'{"code":1,"extFields":[1]}'
    frame = struct.pack(">i", len(header)) + header
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">i", len(frame)) + frame)

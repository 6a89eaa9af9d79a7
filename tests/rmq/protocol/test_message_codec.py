"""Stored-message, batch and property layouts: golden bytes (protocol reference §3.6, §5.5) and
property-based round trips over bodies, tags, keys and unicode properties."""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from rocksidecar.rmq.errors import FrameError, InvalidMessageError
from rocksidecar.rmq.message import (
    PROPERTIES_LIMIT,
    PROPERTIES_MAX_BYTES,
    Message,
    decode_properties,
    encode_properties,
)
from rocksidecar.rmq.message_codec import (
    StoredFields,
    decode_batch,
    decode_stored,
    decode_stored_all,
    encode_batch,
    encode_stored,
    offset_msg_id,
    pack_host,
    stored_records,
)

JAVA_STORED = (
    bytes.fromhex(
        "0000009c"
        "daa320a7"
        "77d18982"
        "00000003"
        "00000000"
        "000000000000002a"
        "000000000001e240"
        "00000000"
        "0000018bcfe56800"
        "0a000005"
        "0000c350"
        "0000018bcfe5687b"
        "0a000009"
        "00002a9f"
        "00000000"
        "0000000000000000"
        "00000005"
        "48656c6c6f"
        "09"
        "546f70696354657374"
        "0033"
    )
    + b"TAGS\x01TagA\x02UNIQ_KEY\x010A000005C35B18B4AAC2000000000000"
)

JAVA_BATCH_FIRST = bytes.fromhex("00000034000000000000000000000000000000036f6e65001b") + (
    b"KEYS\x01k1\x02WAIT\x01true\x02TAGS\x01TagA"
)


def test_decodes_java_stored_message() -> None:
    msg, end = decode_stored(JAVA_STORED)
    assert end == len(JAVA_STORED) == 156
    assert (msg.topic, msg.body, msg.queue_id, msg.queue_offset, msg.commit_log_offset) == (
        "TopicTest",
        b"Hello",
        3,
        42,
        123456,
    )
    assert msg.born_host == "10.0.0.5:50000" and msg.store_host == "10.0.0.9:10911"
    assert msg.tags == "TagA" and msg.uniq_key == "0A000005C35B18B4AAC2000000000000"
    assert msg.offset_msg_id == "0A00000900002A9F000000000001E240"
    assert msg.body_crc == zlib.crc32(b"Hello") & 0x7FFFFFFF


def test_encodes_stored_message_byte_exactly() -> None:
    fields = StoredFields(
        topic="TopicTest",
        body=b"Hello",
        queue_id=3,
        flag=0,
        queue_offset=42,
        commit_log_offset=123456,
        sys_flag=0,
        born_timestamp_ms=0x18BCFE56800,
        born_host=pack_host("10.0.0.5", 50000),
        store_timestamp_ms=0x18BCFE5687B,
        store_host=pack_host("10.0.0.9", 10911),
        reconsume_times=0,
        properties="TAGS\x01TagA\x02UNIQ_KEY\x010A000005C35B18B4AAC2000000000000",
    )
    assert encode_stored(fields) == JAVA_STORED


def test_encodes_java_batch_record() -> None:
    props = encode_properties({"KEYS": "k1", "WAIT": "true", "TAGS": "TagA"})
    assert encode_batch([(b"one", 0, props)]) == JAVA_BATCH_FIRST


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=4), st.integers(0, 3), st.text(max_size=4))))
def test_a_batch_is_each_record_encoded_alone_however_lengths_and_flags_repeat(
    records: list[tuple[bytes, int, str]],
) -> None:
    # encode_batch packs a head once per (body length, properties length, flag): each record still has its own
    each = b"".join(
        struct.pack(">iiiii", 22 + len(b) + len(p.encode()), 0, 0, f, len(b))
        + b
        + struct.pack(">h", len(p.encode()))
        + p.encode()
        for b, f, p in records
    )
    assert encode_batch(records) == each
    assert [(r.body, r.flag, r.properties) for r in decode_batch(each)] == records


def test_offset_msg_id_example() -> None:
    assert offset_msg_id(pack_host("10.0.0.9", 10911), 123456) == "0A00000900002A9F000000000001E240"


def test_ipv6_hosts_and_v2_magic() -> None:
    fields = StoredFields(
        topic="T",
        body=b"b",
        queue_id=0,
        flag=7,
        queue_offset=1,
        commit_log_offset=2,
        sys_flag=0,
        born_timestamp_ms=1,
        born_host=pack_host("::1", 5),
        store_timestamp_ms=2,
        store_host=pack_host("fd00::9", 10911),
        reconsume_times=1,
        properties="",
    )
    raw = encode_stored(fields)
    msg, _ = decode_stored(raw)
    assert msg.born_host == "[::1]:5" and msg.store_host == "[fd00::9]:10911" and len(msg.offset_msg_id) == 56
    # v2 magic: the topic length takes two bytes (5.x brokers).
    v2 = bytearray(raw[:4]) + bytes.fromhex("daa320ab") + raw[8:]
    topic_at = len(raw) - (1 + 1 + 2)
    v2 = v2[:topic_at] + b"\x00" + v2[topic_at:]
    v2[0:4] = len(v2).to_bytes(4, "big")
    assert decode_stored(bytes(v2))[0].topic == "T"


@pytest.mark.parametrize(
    ("flag", "pack"),
    [
        (0x1, zlib.compress),  # clients before 4.9.4: COMPRESSED only means zlib
        (0x301, lambda b: zlib.compress(b, 5)),
        (0x101, lz4.frame.compress),
        (0x201, lambda b: zstandard.ZstdCompressor().compress(b)),
    ],
)
def test_compressed_bodies_are_inflated(flag: int, pack: object) -> None:
    body = b"payload " * 1000
    fields = StoredFields(
        topic="T",
        body=pack(body),
        queue_id=0,
        flag=0,
        queue_offset=0,  # type: ignore[operator]
        commit_log_offset=0,
        sys_flag=flag,
        born_timestamp_ms=0,
        born_host=pack_host("1.2.3.4", 1),
        store_timestamp_ms=0,
        store_host=pack_host("1.2.3.4", 2),
        reconsume_times=0,
        properties="",
    )
    assert decode_stored(encode_stored(fields))[0].body == body


def test_truncated_or_garbled_records_raise() -> None:
    with pytest.raises(FrameError):
        decode_stored(JAVA_STORED[:-3])
    with pytest.raises(FrameError):
        decode_stored(JAVA_STORED[:4] + b"\x00\x00\x00\x00" + JAVA_STORED[8:])


prop_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), min_size=1, max_size=30
)
user_names = prop_text.filter(lambda s: s not in {"TAGS", "KEYS", "UNIQ_KEY", "WAIT"} and s.isprintable())
keys = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc", "Zl", "Zp")), min_size=1, max_size=20)


@given(
    body=st.binary(min_size=1, max_size=2000),
    tags=st.one_of(st.none(), prop_text),
    keys=st.lists(keys, max_size=4),
    props=st.dictionaries(user_names, prop_text, max_size=6),
    flag=st.integers(-(2**31), 2**31 - 1),
    queue_offset=st.integers(0, 2**62),
)
def test_stored_round_trip(
    body: bytes, tags: str | None, keys: list[str], props: dict[str, str], flag: int, queue_offset: int
) -> None:
    msg = Message("Topic", body, tags=tags, keys=tuple(keys), properties=props, flag=flag)
    wire = msg.wire_properties("ABC")
    fields = StoredFields(
        topic="Topic",
        body=body,
        queue_id=1,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=99,
        sys_flag=0,
        born_timestamp_ms=5,
        born_host=pack_host("1.2.3.4", 9),
        store_timestamp_ms=6,
        store_host=pack_host("5.6.7.8", 10911),
        reconsume_times=0,
        properties=wire,
    )
    (out,) = decode_stored_all(encode_stored(fields))
    assert out.body == body and out.flag == flag and out.queue_offset == queue_offset
    assert out.tags == (tags or None) and out.keys == tuple(keys) and out.uniq_key == "ABC"
    assert {k: v for k, v in out.properties.items() if k in props} == props


@given(
    st.lists(
        st.tuples(
            st.binary(max_size=500),
            st.integers(-(2**31), 2**31 - 1),
            st.dictionaries(user_names, prop_text, max_size=4),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_batch_round_trip(records: list[tuple[bytes, int, dict[str, str]]]) -> None:
    wire = encode_batch((b, f, encode_properties(p)) for b, f, p in records)
    out = decode_batch(wire)
    assert [(r.body, r.flag, decode_properties(r.properties)) for r in out] == records


@given(st.dictionaries(user_names, prop_text, max_size=10))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


@pytest.mark.parametrize(
    ("msg", "field"),
    [
        (Message("bad topic", b"x"), "topic"),
        (Message("T" * 128, b"x"), "topic"),
        (Message("TBW102", b"x"), "topic"),
        (Message("T", b""), "body"),
        (Message("T", b"x", tags="a\x01b"), "tags"),
        (Message("T", b"x", keys=("a b",)), "keys[0]"),
        (Message("T", b"x", properties={"UNIQ_KEY": "x"}), "properties.UNIQ_KEY"),
        (Message("T", b"x", properties={"p": "a\x02b"}), "properties.p"),
        (Message("T", b"x", properties={"p\x01": "v"}), "properties.p\x01"),
        (Message("T", b"x", properties={"p": "v" * 40000}), "properties"),
    ],
)
def test_invalid_messages_name_the_field(msg: Message, field: str) -> None:
    with pytest.raises(InvalidMessageError) as info:
        msg.validate()
    assert info.value.field == field


def test_properties_leave_room_for_the_brokers_own_items() -> None:
    """A message whose properties fit the broker's bound but not with the items the broker adds (CLUSTER,
    a delayed message's DELAY_*) is refused now: accepted, spooled or delayed, and sent later, the broker
    would refuse it then (RocketMQ 4.9.4 refused one 67 bytes under the bound)."""

    def sized(n: int) -> Message:
        return Message("T", b"x", properties={"p": "v" * n}, id="0" * 32)

    fits = next(
        sized(n) for n in range(PROPERTIES_MAX_BYTES, 0, -1) if wire_size(sized(n)) <= PROPERTIES_LIMIT
    )
    fits.validate()
    over = sized(len(fits.properties["p"]) + 1)
    assert PROPERTIES_LIMIT < wire_size(over) < PROPERTIES_MAX_BYTES - 67
    with pytest.raises(InvalidMessageError) as info:
        over.validate()
    assert info.value.field == "properties"


def wire_size(msg: Message) -> int:
    return len(msg.wire_properties(msg.id or "").encode())


def test_body_limit() -> None:
    with pytest.raises(InvalidMessageError) as info:
        Message("T", b"x" * 11).validate(max_body_bytes=10)
    assert info.value.field == "body"


@given(
    tags=st.one_of(st.none(), prop_text),
    keys=st.lists(keys, max_size=2),
    props=st.dictionaries(user_names, prop_text, max_size=3),
)
def test_wire_properties_are_the_encoded_map_with_the_id_and_wait(
    tags: str | None, keys: list[str], props: dict[str, str]
) -> None:
    """The direct string of a message without properties, tags or keys is the general encoding too."""
    msg = Message("Topic", b"x", tags=tags, keys=tuple(keys), properties=props)
    expected = dict(props)
    if tags:
        expected["TAGS"] = tags
    if keys:
        expected["KEYS"] = " ".join(keys)
    assert decode_properties(msg.wire_properties("ID1")) == {**expected, "UNIQ_KEY": "ID1", "WAIT": "true"}
    assert Message("Topic", b"x").wire_properties("ID1") == "UNIQ_KEY\x01ID1\x02WAIT\x01true"


def test_stored_records_agree_with_decode_stored_all() -> None:
    """The bulk readers' tuples carry what decode_stored_all reads: Java's bytes, IPv6 hosts, an inflated
    body, one record after another."""
    v6 = StoredFields(
        topic="T",
        body=zlib.compress(b"inflated " * 50),
        queue_id=0,
        flag=0,
        queue_offset=7,
        commit_log_offset=9,
        sys_flag=0x1,
        born_timestamp_ms=11,
        born_host=pack_host("::1", 5),
        store_timestamp_ms=12,
        store_host=pack_host("fd00::9", 10911),
        reconsume_times=3,
        properties="UNIQ_KEY\x01ABC\x02a\x01b",
    )
    data = JAVA_STORED + encode_stored(v6) + JAVA_STORED
    records = stored_records(data)
    messages = decode_stored_all(data)
    assert len(records) == len(messages) == 3
    for (offset, body, props, born, stored, reconsume, host, phys), m in zip(records, messages, strict=True):
        assert (offset, body, decode_properties(props)) == (m.queue_offset, m.body, m.properties)
        assert (born, stored, reconsume) == (m.born_timestamp_ms, m.store_timestamp_ms, m.reconsume_times)
        assert offset_msg_id(host, phys) == m.offset_msg_id
    assert records[1][1] == b"inflated " * 50


def test_stored_records_refuse_what_decode_stored_refuses() -> None:
    for bad in (JAVA_STORED[:-3], JAVA_STORED[:4] + b"\x00\x00\x00\x00" + JAVA_STORED[8:]):
        with pytest.raises(FrameError):
            stored_records(JAVA_STORED + bad)
    negative_body = bytearray(JAVA_STORED)
    negative_body[84:88] = (-1).to_bytes(4, "big", signed=True)  # the body length
    with pytest.raises(FrameError, match="negative body length"):
        stored_records(bytes(negative_body))


def test_stored_message_is_the_dataclass_built_with_the_same_arguments() -> None:
    """decode_stored builds MessageExt through stored_message (slot setters, positional): the same
    value, field for field, and still frozen."""
    import dataclasses

    from rocksidecar.rmq.message import MessageExt, stored_message

    args = ("T", b"body", 3, 1000, 5000, 4, 1, 17, "1.2.3.4:5", 18, "5.6.7.8:9", 2, 0, 99, 120,
            {"UNIQ_KEY": "U1"}, "ABC")  # fmt: skip
    built, fast = MessageExt(*args), stored_message(*args)
    assert fast == built
    assert [getattr(fast, f.name) for f in dataclasses.fields(MessageExt)] == list(args)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.topic = "other"  # type: ignore[misc]

"""One stored message for both record kinds (issue 12 item 3): values written by the codecs before
the merge (RetryRecord's, DelayedMessage's and the dead letters' own, bytes below) still read after an
upgrade, and both kinds carry the same StoredMessage fields through one codec."""

from __future__ import annotations

import pytest

from rocksidecar.delay.message import CorruptMessageError, DelayedMessage, decode_message, encode_message
from rocksidecar.retry.dead_letter import decode_dead, encode_dead
from rocksidecar.retry.record import CorruptRecordError, RetryRecord, decode_record, encode_record
from rocksidecar.storage.message import CorruptValueError, StoredMessage

# Written by retry.record.encode_record and delay.message.encode_message at 2fc8420 (before the merge)
OLD_RECORD = bytes.fromhex(
    "01000001157b226964223a224330413830303031303030303241394630303030303030303030303030303031222c"
    "22746f706963223a226f7264657273222c2274616773223a227431222c226b657973223a5b226b31222c226b3222"
    "5d2c2270726f7073223a7b2270223a2276227d2c22736b223a22736b222c2274797065223a226f72646572732d74"
    "797065222c2263726561746564223a313730303030303030303030302c2266697273745f6661696c757265223a31"
    "3730303030303030303530302c2272657472696573223a322c226572726f72223a2262757379222c22686973746f"
    "7279223a5b5b313730303030303030303530302c2262757379225d2c5b313730303030303030313530302c226275"
    "7379225d5d7d00ff626f6479"
)
OLD_DELAYED = bytes.fromhex(
    "01000000a97b226964223a224330413830303031303030303241394630303030303030303030303030303032222c"
    "22746f706963223a226c61746572222c22647565223a313730303030303036303030302c2274616773223a6e756c"
    "6c2c226b657973223a5b226b225d2c2270726f7073223a7b2261223a2262227d2c22736b223a6e756c6c2c227479"
    "7065223a226c61746572222c2263726561746564223a313730303030303030303030307d017061796c6f6164"
)
# retry.dead_letter.encode_dead("dead: MESSAGE_ILLEGAL", 1700000002000, OLD_RECORD) at 2fc8420
OLD_DEAD = (
    bytes.fromhex(
        "010000003a7b22726561736f6e223a22646561643a204d4553534147455f494c4c4547414c222c22646561645f"
        "6174223a313730303030303030323030307d"
    )
    + OLD_RECORD
)

RECORD = RetryRecord(
    id="C0A8000100002A9F0000000000000001",
    topic="orders",
    body=b"\x00\xffbody",
    tags="t1",
    keys=("k1", "k2"),
    properties={"p": "v"},
    sharding_key="sk",
    type="orders-type",
    created_ms=1700000000000,
    first_failure_ms=1700000000500,
    retry_count=2,
    last_error="busy",
    history=((1700000000500, "busy"), (1700000001500, "busy")),
)
DELAYED = DelayedMessage(
    id="C0A8000100002A9F0000000000000002",
    topic="later",
    body=b"\x01payload",
    keys=("k",),
    properties={"a": "b"},
    created_ms=1700000000000,
    due_ms=1700000060000,
)


def test_a_retry_record_written_by_the_old_codec_still_reads() -> None:
    assert decode_record(OLD_RECORD) == RECORD
    assert encode_record(RECORD) == OLD_RECORD  # and the layout did not change


def test_a_delayed_message_written_by_the_old_codec_still_reads() -> None:
    assert decode_message(OLD_DELAYED) == DELAYED
    assert decode_message(encode_message(DELAYED)) == DELAYED


def test_a_dead_letter_written_by_the_old_codec_still_reads() -> None:
    letter = decode_dead(b"key", OLD_DEAD)
    assert (letter.reason, letter.dead_at_ms, letter.record) == (
        "dead: MESSAGE_ILLEGAL",
        1700000002000,
        RECORD,
    )
    assert encode_dead("dead: MESSAGE_ILLEGAL", 1700000002000, OLD_RECORD) == OLD_DEAD


def test_both_kinds_carry_the_same_stored_message() -> None:
    message = StoredMessage(**DELAYED.message_fields())
    record = RetryRecord(**DELAYED.message_fields(), retry_count=1)
    assert isinstance(record, StoredMessage) and isinstance(DELAYED, StoredMessage)
    assert StoredMessage(**record.message_fields()) == message
    assert decode_record(encode_record(record)).message_fields() == message.message_fields()


@pytest.mark.parametrize(
    ("decode", "error"), [(decode_record, CorruptRecordError), (decode_message, CorruptMessageError)]
)
@pytest.mark.parametrize(
    "damage",
    [
        b"",  # shorter than the header
        b"\x02\x00\x00\x00\x02{}",  # unknown version
        OLD_RECORD.replace(b'"topic":"orders"', b'"topic":12345678'),  # a flipped type
        OLD_DELAYED.replace(b'"keys":["k"]', b'"keys":[123]'),
    ],
)
def test_damaged_values_raise_the_kinds_own_error(
    decode: object, error: type[Exception], damage: bytes
) -> None:
    with pytest.raises(error) as raised:
        decode(damage)  # type: ignore[operator]
    assert isinstance(raised.value, CorruptValueError)

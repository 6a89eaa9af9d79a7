"""ACL signing (protocol reference §7's verified example), Java String.hashCode, UNIQ_KEY layout, a
batch's ids and property strings."""

from __future__ import annotations

import datetime as dt
import itertools

from rocksidecar.rmq.acl import Credentials, sign
from rocksidecar.rmq.broker import java_string_hash
from rocksidecar.rmq.message import Message, wire_properties_of
from rocksidecar.rmq.msgid import UniqIdGenerator
from rocksidecar.rmq.protocol.frame import RemotingCommand


def test_signature_matches_java() -> None:
    header = {
        "a": "pg",
        "b": "TopicTest",
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "TAGS\x01TagA",
        "j": "0",
        "k": "false",
        "m": "false",
    }
    cmd = RemotingCommand(310, header, b"Hello")
    sign(cmd, Credentials("RocketMQ", "12345678"))
    assert cmd.ext_fields["AccessKey"] == "RocketMQ"
    assert cmd.ext_fields["Signature"] == "ie9cpyhA1U7/KhLpljbmxDPlBuo="


def test_credentials_never_print_the_secret() -> None:
    assert "12345678" not in repr(Credentials("ak", "12345678"))


def test_java_string_hash() -> None:
    assert java_string_hash("TagA") == 2598919 and java_string_hash("TagB") == 2598920
    assert java_string_hash("") == 0
    assert java_string_hash("汉字😀") == 850080273  # computed by Java; a surrogate pair is two units


def test_uniq_key_layout() -> None:
    start = int(dt.datetime(2026, 11, 1).astimezone().timestamp() * 1000)
    now = [start + 1234]
    gen = UniqIdGenerator(ip=bytes([10, 0, 0, 5]), pid=0xC35B, magic=0x18B4AAC2, now_ms=lambda: now[0])
    first, second = gen.next_id(), gen.next_id()
    assert len(first) == 32 and first.startswith("0A000005C35B18B4AAC2") and first[20:28] == "000004D2"
    assert first != second and int(second[28:], 16) == (int(first[28:], 16) + 1) & 0xFFFF
    now[0] = (
        int(dt.datetime(2026, 12, 1).astimezone().timestamp() * 1000) + 5
    )  # a new month restarts the diff
    assert gen.next_id()[20:28] == "00000005"
    now[0] += 1  # the time part is formatted once per millisecond: a new one must show
    assert gen.next_id()[20:28] == "00000006"
    now[0] -= 2  # a small step back (NTP) within the month: its own, smaller time part
    assert gen.next_id()[20:28] == "00000004"


def test_ids_drawn_at_once_are_those_drawn_one_by_one() -> None:
    start = int(dt.datetime(2026, 11, 1).astimezone().timestamp() * 1000)
    now = [start + 1234]

    def generator() -> UniqIdGenerator:
        gen = UniqIdGenerator(ip=bytes([10, 0, 0, 5]), pid=0xC35B, magic=0x18B4AAC2, now_ms=lambda: now[0])
        # Near the top of the 16-bit counter part (both bytes used); a batch that would wrap starts at
        # the counter's next 0 instead, so its ids ascend: tests/rmq/test_msgid_batch_order.py.
        gen._counter = itertools.count(0xFFD0)
        return gen

    one_by_one, at_once = generator(), generator()
    expected = [one_by_one.next_id() for _ in range(40)]
    assert at_once.next_ids(40) == expected and len(set(expected)) == 40
    assert expected[-1][28:] == "FFF7"
    now[0] += 1  # a new millisecond shows in both
    assert at_once.next_ids(1) == [one_by_one.next_id()] and expected[-1][20:28] != at_once.next_id()[20:28]


def test_wire_properties_of_a_batch_are_each_messages_own() -> None:
    msgs = [
        Message("T", b"a"),
        Message("T", b"b", tags="t"),
        Message("T", b"c", keys=("k1", "k2")),
        Message("T", b"d", properties={"p": "v"}),
    ]
    ids = [f"ID{i:030d}" for i in range(len(msgs))]
    assert wire_properties_of(msgs, ids) == [m.wire_properties(i) for m, i in zip(msgs, ids, strict=True)]


def test_the_default_clock_stamps_ids_with_the_wall_clock_as_wall_ms_does() -> None:
    # next_id reads time_ns itself when the clock is the default wall_ms (issue 32): the same stamp.
    from rocksidecar.rmq.clock import wall_ms

    default = UniqIdGenerator(ip=bytes([10, 0, 0, 5]), pid=1, magic=2)
    # another function than wall_ms itself: the generator calls it
    called = UniqIdGenerator(ip=bytes([10, 0, 0, 5]), pid=1, magic=2, now_ms=lambda: wall_ms() + 0)
    for _ in range(3):  # the two reads may straddle a millisecond once, not three times
        before = called.next_id()[20:28]
        ours = default.next_id()[20:28]
        after = called.next_id()[20:28]
        if before == after:
            assert ours == before
            return
    raise AssertionError("the clock moved every time")

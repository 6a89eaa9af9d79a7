"""BrokerApi.pull over bodies holding bad records: an undecodable record is listed apart and the pull
goes on past it; at a record whose frame is corrupt the body cannot be walked further, so the pull ends
before it (the next pull starts at it) or, when it is the first, fetches it alone and skips only its
offsets. No offset that holds a good message is ever skipped."""

from __future__ import annotations

import zlib

from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import SYSFLAG_COMPRESSED, ResponseCode
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.result import PullStatus
from tests.rmq.protocol.test_inflate import record

MQ = MessageQueue("T", "broker-a", 1)


def corrupt(offset: int) -> bytes:
    broken = bytearray(record(offset, b"lost?"))
    broken[0:4] = (len(broken) + 3).to_bytes(4, "big")  # its size overruns: the walk cannot go on
    return bytes(broken)


class Broker:
    """An Invoker answering pulls from a list of records (queue offset, bytes), as a broker would:
    up to maxMsgNums of them from queueOffset on, nextBeginOffset after the last one."""

    def __init__(self, records: list[tuple[int, bytes]], max_offset: int) -> None:
        self.records = records
        self.max_offset = max_offset
        self.asked: list[tuple[int, int]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        start, n = int(cmd.ext_fields["queueOffset"]), int(cmd.ext_fields["maxMsgNums"])
        self.asked.append((start, n))
        got = [(o, b) for o, b in self.records if o >= start][:n]
        ext = {
            "nextBeginOffset": str(got[-1][0] + 1 if got else start),
            "minOffset": "0",
            "maxOffset": str(self.max_offset),
        }
        code = ResponseCode.SUCCESS if got else ResponseCode.PULL_NOT_FOUND
        return cmd.response(code, None, ext, b"".join(b for _, b in got))

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        raise AssertionError("pulls are never one-way")


async def test_an_undecodable_record_is_listed_apart_and_passed() -> None:
    bomb = zlib.compress(b"\0" * (1 << 20), 9)
    broker = Broker([(0, record(0, b"a")), (1, record(1, bomb, SYSFLAG_COMPRESSED)), (2, record(2, b"c"))], 3)
    result = await BrokerApi(broker).pull("addr", "G", MQ, 0, max_body_bytes=1000)
    assert [m.body for m in result.messages] == [b"a", b"c"]
    assert [u.message.queue_offset for u in result.undecodable] == [1]
    assert result.next_begin_offset == 3 and result.corrupt is None
    records = await BrokerApi(broker).pull("addr", "G", MQ, 0, max_body_bytes=1000, as_records=True)
    assert [r[0] for r in records.records] == [0, 2]
    assert [u.message.queue_offset for u in records.undecodable] == [1]


async def test_the_tag_filter_applies_to_undecodable_records_whose_properties_decode() -> None:
    other = record(1, b"\x00bad", SYSFLAG_COMPRESSED, props="UNIQ_KEY\x01U1\x02TAGS\x01B")
    mine = record(2, b"\x00bad", SYSFLAG_COMPRESSED, props="UNIQ_KEY\x01U2\x02TAGS\x01A")
    broker = Broker([(1, other), (2, mine)], 3)
    result = await BrokerApi(broker).pull("addr", "G", MQ, 1, expression="A")
    assert [u.message.queue_offset for u in result.undecodable] == [2]


async def test_a_corrupt_frame_after_good_records_ends_the_pull_before_it() -> None:
    broker = Broker([(5, record(5, b"a")), (6, record(6, b"b")), (7, corrupt(7)), (8, record(8, b"d"))], 9)
    result = await BrokerApi(broker).pull("addr", "G", MQ, 5)
    assert [m.queue_offset for m in result.messages] == [5, 6]
    assert result.next_begin_offset == 7 and result.corrupt is None  # the next pull starts at it
    assert broker.asked == [(5, 32)]


async def test_a_corrupt_first_frame_is_fetched_alone_and_only_its_offsets_skipped() -> None:
    broker = Broker([(7, corrupt(7)), (8, record(8, b"d"))], 9)
    result = await BrokerApi(broker).pull("addr", "G", MQ, 7)
    assert broker.asked == [(7, 32), (7, 1)]
    assert result.status is PullStatus.FOUND and result.messages == []
    assert result.next_begin_offset == 8 and result.corrupt is not None
    after = await BrokerApi(broker).pull("addr", "G", MQ, result.next_begin_offset)
    assert [m.body for m in after.messages] == [b"d"]

"""StreamHub and the gRPC Subscribe stream: what a delivery that is never answered leaves behind."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import weakref

import pytest

from rocksidecar.app.api.grpc_subscribe import ack, stream
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.request import RequestError
from rocksidecar.app.subscriptions.log import DeliveryLog
from rocksidecar.app.subscriptions.stream import Answer as StreamAnswer
from rocksidecar.app.subscriptions.stream import Delivery, StreamHub
from rocksidecar.app.tracing import msgtrace
from rocksidecar.rmq.consumer.config import ConsumeStatus
from tests.app.subscriptions.test_push import MQ, SPEC, message

GRPC = dataclasses.replace(SPEC, endpoint="grpc", timeout_s=0.01)


def watched(hub: StreamHub) -> list[weakref.ref[Delivery]]:
    """Weak references to every delivery the hub hands a stream."""
    handed: list[weakref.ref[Delivery]] = []
    take = hub.next

    async def next_() -> Delivery:
        d = await take()
        handed.append(weakref.ref(d))
        return d

    hub.next = next_  # type: ignore[method-assign]
    return handed


async def test_a_stream_that_never_acks_keeps_none_of_its_timed_out_deliveries() -> None:
    """The stream kept every delivery it took until one was answered: one whose timeout sent it back
    never was, so a stream that never acks held each message's body for as long as it lived."""
    hub = StreamHub(GRPC)
    handed = watched(hub)
    deliveries = stream(hub)
    n = 20
    last = None
    for i in range(n):
        delivered = asyncio.create_task(hub.deliver(dataclasses.replace(message(), queue_offset=i), MQ))
        last = await anext(deliveries)  # the app reads it and never answers
        assert await delivered is False  # timed out: sent back, the broker redelivers it later
    gc.collect()
    alive = sum(ref() is not None for ref in handed)
    assert len(handed) == n and alive <= 1, f"{alive} of {n} timed-out deliveries kept"  # the last: untrimmed
    assert last is not None
    with pytest.raises(RequestError) as err:  # an Ack after the timeout is refused, as it was
        ack({"orders": hub}, pb.AckRequest(delivery_id=last.delivery_id, outcome=pb.ACK_OK))
    assert err.value.status == 404 and "timed out and sent back" in str(err.value)
    await deliveries.aclose()


async def test_a_cancelled_delivery_is_never_handed_to_a_stream() -> None:
    """A delivery whose consume was cancelled while it waited for a stream stayed in the hub's queue: the
    next stream took it, and the app got a message nobody waited for."""

    class Watched(asyncio.Queue[Delivery]):
        def __init__(self) -> None:
            super().__init__()
            self.queued = asyncio.Event()

        async def put(self, item: Delivery) -> None:
            await super().put(item)
            self.queued.set()

    hub = StreamHub(GRPC)
    queue = hub._queue = Watched()
    gone = asyncio.create_task(hub.deliver(dataclasses.replace(message(), queue_offset=1), MQ))
    await queue.queued.wait()  # queued, waiting for a stream
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    delivered = asyncio.create_task(hub.deliver(dataclasses.replace(message(), queue_offset=2), MQ))
    d = await hub.next()
    assert d.msg.queue_offset == 2
    hub.ack(d.delivery_id, StreamAnswer.OK)
    assert await delivered is True


class TraceRecords:
    """msgtrace.DISPATCHER's stand-in: the (message id, ok, group) of each SubBefore/SubAfter pair."""

    def __init__(self) -> None:
        self.subs: list[tuple[str, bool, str]] = []

    def add(self, pending: tuple[object, ...]) -> None:
        self.add_all([pending])

    def add_all(self, pending: list[tuple[object, ...]]) -> None:
        self.subs += [(str(p[1]), bool(p[5]), str(p[8])) for p in pending]


class DeadLetters(DeliveryLog):
    def __init__(self) -> None:
        super().__init__()
        self.moved: list[tuple[str, str, str, str]] = []

    def moved_to_dlq(self, subscription: str, group: str, msg_id: str, why: str) -> None:
        self.moved.append((subscription, group, msg_id, why))


async def test_grpc_deliveries_write_message_trace_records_and_log_dead_letters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only HTTP push subscriptions wrote the SubBefore/SubAfter records (`mqadmin queryMsgTraceById`
    showed no consumer for a message a gRPC subscription delivered) and logged a message moving to the
    DLQ; gRPC ones did neither."""
    records, log = TraceRecords(), DeadLetters()
    monkeypatch.setattr(msgtrace, "DISPATCHER", records)
    hub = StreamHub(dataclasses.replace(GRPC, timeout_s=5.0, max_reconsume_times=2), log=log)
    ok_msg = message()
    consumed = asyncio.create_task(hub([ok_msg], MQ))
    d = await hub.next()
    hub.ack(d.delivery_id, StreamAnswer.OK)
    assert await consumed is ConsumeStatus.SUCCESS
    last_try = message(UNIQ_KEY="LAST0000")  # reconsume_times 2: its last
    assert last_try.msg_id != ok_msg.msg_id
    failed = asyncio.create_task(hub([last_try], MQ))
    d = await hub.next()
    hub.ack(d.delivery_id, StreamAnswer.FAILED)
    assert await failed is ConsumeStatus.RECONSUME_LATER
    assert records.subs == [(ok_msg.msg_id, True, "G"), (last_try.msg_id, False, "G")]
    assert log.moved == [("orders", "G", last_try.msg_id, "failed 3 times")]

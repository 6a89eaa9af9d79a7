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
from rocksidecar.app.subscriptions.stream import Answer as StreamAnswer
from rocksidecar.app.subscriptions.stream import Delivery, StreamHub
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

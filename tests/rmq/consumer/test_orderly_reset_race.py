"""An orderly member giving a message up to the DLQ while an operator resets its queue back: the reset holds
(the give-up, finishing after it, committed past it: the messages the reset was to redeliver were skipped)."""

from __future__ import annotations

import asyncio

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig, ConsumeStatus
from rocksidecar.rmq.consumer.offset_store import ReadType
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import Recorder, send_to_queues, settle, wired

TOPIC = "ReviewT"


class GatedSendBack(RemotingClient):
    """CONSUMER_SEND_MSG_BACK waits for ``gate`` (a slow broker); ``entered`` says one is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.returned = asyncio.Event()

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code == RequestCode.CONSUMER_SEND_MSG_BACK:
            self.entered.set()
            await self.gate.wait()
            try:
                return await super().invoke(addr, cmd, timeout_s)
            finally:
                self.returned.set()
        return await super().invoke(addr, cmd, timeout_s)


async def test_a_dlq_send_back_finishing_after_a_reset_does_not_undo_it(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    """An orderly member gives a message up to the DLQ (max_reconsume_times reached) while an operator
    resets the queue back to 0: the queue must be consumed again from 0, not from past the DLQ'd one."""
    await send_to_queues(cluster, TOPIC, 3, queues=1)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    stuck = b"broker-a/0/1"
    rec = Recorder(lambda m: ConsumeStatus.SUSPEND if m.body == stuck else ConsumeStatus.SUCCESS)
    client = GatedSendBack()
    cfg = ConsumerConfig(
        "GZ-order-reset",
        instance_name="one",
        client_ip="127.0.0.1",
        orderly=True,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        suspend_orderly_s=0.01,
        max_reconsume_times=0,  # the first failure goes to the DLQ
        # the re-add waits its default 1 s: the send-back (released below) has long returned by then
    )
    consumer = PushConsumer(cfg, cluster.namesrv_addr, rec, client=client)
    wired(consumer, client)
    consumer.subscribe(TOPIC, "*")
    consumers.append(consumer)
    try:
        await consumer.start()
        async with asyncio.timeout(10):
            await client.entered.wait()  # message 1 failed; its DLQ send-back is on its way
        assert await consumer.offsets.read(mq, ReadType.MEMORY) == 1
        # the operator resets the queue to 0 (RESET_CONSUMER_CLIENT_OFFSET's effect)
        assert consumer.reset_offsets(TOPIC, {mq: 0}) == [mq]
        assert await consumer.offsets.read(mq, ReadType.MEMORY) == 0
        client.gate.set()
        async with asyncio.timeout(10):
            await client.returned.wait()
        await settle(consumer, lambda: mq in consumer.queues and not consumer.queues[mq].pq.dropped)
        before = sum(1 for m in rec.got if m.body.startswith(b"broker-a"))
        await rec.until(lambda got: sum(1 for m in got if m.body.startswith(b"broker-a")) > before)
        again = [m.queue_offset for m in rec.got if m.body.startswith(b"broker-a")][before:]
        # reset to 0: offset 0 comes again first
        assert again[0] == 0, f"after the reset to 0 the queue went on from {again}"
    finally:
        client.gate.set()
        await consumer.close()
        await client.close()

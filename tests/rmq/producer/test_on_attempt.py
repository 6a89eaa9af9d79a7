"""on_attempt hears of every attempt with the message it sent (a batch's first): the sidecar's latency
metric takes an exemplar of that message's trace from it (app.exemplars)."""

from __future__ import annotations

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import Message
from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.fakes import FakeClock
from tests.rmq.producer.test_producer_devbroker import TOPIC

Heard = tuple[str, bool, Message | None]


async def test_each_attempt_is_told_with_its_message(cluster: DevCluster, client: RemotingClient) -> None:
    api = BrokerApi(client, producer_group="attempts")
    for broker in cluster.brokers.values():
        await api.create_topic(broker.addr, TOPIC)
    heard: list[Heard] = []
    producer = Producer(
        NameServerClient(client, cluster.namesrv_addr),
        api,
        ProducerConfig(group="attempts"),
        clock=FakeClock(),
        on_attempt=lambda broker, _latency, ok, msg: heard.append((broker, ok, msg)),
    )
    try:
        one = Message(TOPIC, b"one")
        sent = await producer.send(one)
        assert heard == [(sent.queue.broker_name, True, one)]
        heard.clear()
        batch = [Message(TOPIC, b"a"), Message(TOPIC, b"b")]
        await producer.send_batch(batch, ["k", "k"])  # one queue: one SEND_BATCH
        assert [(ok, msg) for _, ok, msg in heard] == [(True, batch[0])]
        heard.clear()
        first = sent.queue.broker_name
        cluster.brokers[first].faults.fail_next = 1  # its next send fails: the retry goes elsewhere
        while True:  # round robin reaches that broker within one cycle
            again = Message(TOPIC, b"again")
            await producer.send(again)
            if any(not ok for _, ok, _ in heard):
                break
            heard.clear()
        assert heard[0] == (first, False, again) and heard[1][1:] == (True, again)
    finally:
        await producer.close()

"""A batch the broker refuses for one message's sake (MESSAGE_ILLEGAL, final) fails that message alone:
its neighbours are sent one by one (session 13). Before, every message of the batch got the final error:
the sidecar answered REJECTED for good messages of a batch, and the delay scheduler and the replay
dead-lettered the good neighbours of one message whose properties passed the producer's check then but
not the broker's (which counts its own CLUSTER item). Message.validate now leaves room for that item, so
the bad message here is sent ``validated``, as any message the broker refuses for a reason of its own."""

from __future__ import annotations

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import Message, SendResult
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.message import PROPERTIES_MAX_BYTES
from rocksidecar.rmq.pool import RemotingClient
from tests.fakes import FakeClock, fullest_message
from tests.rmq.producer.test_producer_devbroker import TOPIC, make_producer


async def test_one_message_the_broker_refuses_fails_alone_and_its_neighbours_are_sent(
    cluster: DevCluster, client: RemotingClient
) -> None:
    producer = await make_producer(cluster, client, FakeClock())
    try:
        batch = [Message(TOPIC, b"a"), fullest_message(TOPIC, PROPERTIES_MAX_BYTES), Message(TOPIC, b"c")]
        results = await producer.send_batch(
            batch, ["one-queue"] * 3, validated=True
        )  # one queue: one SEND_BATCH
        refused = results[1]
        assert isinstance(refused, RocketMQError) and refused.final, results
        sent = [results[0], results[2]]
        assert all(isinstance(r, SendResult) for r in sent), results
        stored = [m for b in cluster.brokers.values() for m in b.messages(TOPIC)]
        assert sorted(m.body for m in stored) == [b"a", b"c"]
        assert sent[0].queue == sent[1].queue and sent[0].queue_offset < sent[1].queue_offset  # in order
    finally:
        await producer.close()

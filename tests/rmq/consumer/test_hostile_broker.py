"""A broker that answers pulls in ways a sound one never does, in a loop: the push consumer's pull
loop is paced, not spun. Every other request goes to devbroker; PULL_MESSAGE gets the scripted answer."""

from __future__ import annotations

import asyncio

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import WAIT_S, Recorder, send_to_queues, wired

TOPIC = "HostileT"


class PullAnswering(RemotingClient):
    """Answers every PULL_MESSAGE with ``code`` and ``next_begin`` (the offset asked when None) at once."""

    def __init__(self, code: int, next_begin: int | None = None) -> None:
        super().__init__()
        self.code, self.next_begin = code, next_begin
        self.pulls = 0

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code != RequestCode.PULL_MESSAGE:
            return await super().invoke(addr, cmd, timeout_s)
        self.pulls += 1
        await asyncio.sleep(0)  # the round trip: the loop turns, as over a socket
        offset = cmd.ext_fields["queueOffset"]
        ext = {"nextBeginOffset": str(self.next_begin if self.next_begin is not None else offset)}
        return cmd.response(self.code, "scripted", {**ext, "minOffset": "0", "maxOffset": offset})


async def started(cluster: DevCluster, client: PullAnswering, group: str, **kw: object) -> PushConsumer:
    cfg = ConsumerConfig(
        group, instance_name="one", client_ip="127.0.0.1", consume_from=ConsumeFrom.FIRST_OFFSET, **kw
    )  # type: ignore[arg-type]
    consumer = wired(PushConsumer(cfg, cluster.namesrv_addr, Recorder(), client=client), client)  # type: ignore[arg-type]
    consumer.subscribe(TOPIC)
    await consumer.start()
    return consumer


def gated(consumer: PushConsumer) -> tuple[list[float], asyncio.Event, asyncio.Event]:
    """Replace the consumer's waits with one that notes the time asked, signals, and blocks until
    released (or close): what the pull loop waits between pulls, without sleeping in the test."""
    asked: list[float] = []
    waited, release = asyncio.Event(), asyncio.Event()
    real = consumer.wait_closing

    async def wait(timeout_s: float) -> bool:
        asked.append(timeout_s)
        waited.set()
        await release.wait()
        return await real(0)

    consumer.wait_closing = wait  # type: ignore[method-assign]
    return asked, waited, release


async def test_pulls_answered_at_once_with_nothing_are_paced(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # Before: NO_NEW_MSG at once, pulled again at once (as Java), in a loop as fast as the broker answers.
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    client = PullAnswering(ResponseCode.PULL_NOT_FOUND)
    consumer = await started(cluster, client, "GH-empty", rebalance_interval_s=3600)
    consumers.append(consumer)
    asked, waited, release = gated(consumer)
    async with asyncio.timeout(WAIT_S):
        await waited.wait()
    pulls = client.pulls
    assert 0 < asked[0] <= consumer.config.pull_min_interval_empty_s
    assert consumer.stats["pulls_empty_early"] >= 1
    queues = len(consumer.queues)
    assert pulls <= queues  # each queue pulled once, then waiting: no loop
    release.set()


async def test_an_offset_illegal_answered_every_time_is_paced(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # Before: drop, re-add at once, pull, OFFSET_ILLEGAL again, without end (Java waits 10 s each time).
    await send_to_queues(cluster, TOPIC, 1, queues=1)
    client = PullAnswering(ResponseCode.PULL_OFFSET_MOVED, next_begin=0)
    consumer = await started(cluster, client, "GH-moved", rebalance_interval_s=3600)
    consumers.append(consumer)
    asked, waited, release = gated(consumer)
    async with asyncio.timeout(WAIT_S):
        await waited.wait()
    assert asked[0] == consumer.config.offset_illegal_wait_s
    assert consumer.stats["offsets_moved"] <= len(consumer.queues) + 1
    release.set()

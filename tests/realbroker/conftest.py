"""Real Apache RocketMQ fixtures: skipped with a clear reason unless ROCKSIDECAR_TEST_NAMESRV is set.

Start one with ../shared/rocketmq/real-broker.sh (see DEVELOPERS.md): name server 127.0.0.1:9876,
broker-a :10911, broker-b :10921. Fault tests also need the script (ROCKSIDECAR_TEST_BROKER_CTL).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from rocksidecar.rmq import (
    BrokerApi,
    ClientInstance,
    MessageExt,
    MessageQueue,
    NameServerClient,
    RemotingClient,
    TopicRouteData,
)
from rocksidecar.rmq.producer import Producer, ProducerConfig

pytestmark = pytest.mark.realbroker
NAMESRV_ENV = "ROCKSIDECAR_TEST_NAMESRV"
CTL_ENV = "ROCKSIDECAR_TEST_BROKER_CTL"
DEFAULT_CTL = Path(__file__).resolve().parents[3] / "shared" / "rocketmq" / "real-broker.sh"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.realbroker)


@pytest.fixture
def namesrv_addr() -> str:
    addr = os.environ.get(NAMESRV_ENV)
    if not addr:
        pytest.skip(
            f"real RocketMQ tests need {NAMESRV_ENV}=host:port of a 4.9.4 name server with two "
            "brokers (see ../shared/rocketmq/real-broker.sh)"
        )
    return addr


@pytest.fixture
def broker_ctl() -> Path:
    path = Path(os.environ.get(CTL_ENV, str(DEFAULT_CTL)))
    if not path.is_file():
        pytest.skip(f"fault tests need the real-broker.sh control script ({CTL_ENV}); not found at {path}")
    return path


def unique_topic(prefix: str) -> str:
    return f"{prefix}_{int(time.time() * 1000)}_{os.getpid()}"


async def wait_for_brokers(ns: NameServerClient, brokers: int = 2) -> dict[str, str]:
    """Broker name -> master address once the name server lists ``brokers`` brokers. Right after a
    restart it may not list every broker yet, and a test starting then would see a smaller cluster."""
    addrs: dict[str, str] = {}
    for _ in range(300):  # polling an external system we do not control
        cluster = await ns.get_cluster_info()
        table = cluster.get("brokerAddrTable") or {}
        addrs = {name: b["brokerAddrs"]["0"] for name, b in table.items() if "0" in b.get("brokerAddrs", {})}  # type: ignore[union-attr]
        if len(addrs) >= brokers:
            return addrs
        await asyncio.sleep(0.1)
    raise AssertionError(f"the cluster lists {sorted(addrs)}; these tests need {brokers} brokers")


async def create_topic_everywhere(
    ns: NameServerClient, api: BrokerApi, topic: str, queues: int = 4, brokers: int = 2
) -> TopicRouteData:
    """Create the topic on each of the cluster's ``brokers`` brokers and wait until its route lists them
    all."""
    addrs = await wait_for_brokers(ns, brokers)
    for addr in addrs.values():
        await api.create_topic(addr, topic, read_queue_nums=queues, write_queue_nums=queues)
    for _ in range(100):
        try:
            route = await ns.get_route(topic)
            if {q.broker_name for q in route.queue_datas} == set(addrs):
                return route
        except Exception:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"route of {topic} never listed all of {sorted(addrs)}")


async def producer_on_new_topic(
    namesrv_addr: str, prefix: str
) -> tuple[str, ClientInstance, TopicRouteData, Producer]:
    """A new topic (``prefix``, made unique) on both brokers and an unstarted producer of the group named
    after it, on a client instance of its own: what each transaction test starts from."""
    topic = unique_topic(prefix)
    instance = ClientInstance(namesrv_addr)
    route = await create_topic_everywhere(instance.namesrv, instance.api, topic)
    config = ProducerConfig(group=f"{topic}_pg")
    return topic, instance, route, Producer(instance.namesrv, instance.api, config, instance=instance)


async def new_topic(namesrv: str, prefix: str) -> str:
    """A new topic (``unique_topic(prefix)``) with 4 queues on each broker, once its route lists them."""
    client = RemotingClient()
    try:
        topic = unique_topic(prefix)
        await create_topic_everywhere(NameServerClient(client, namesrv), BrokerApi(client), topic)
        return topic
    finally:
        await client.close()


async def pull_all(
    api: BrokerApi,
    route: TopicRouteData,
    topic: str,
    group: str,
    sent: Iterable[tuple[str, int, int]] = (),
) -> list[MessageExt]:
    """Every message of every readable queue, from offset 0 to the queue's max offset. ``sent``: the
    (broker, queue id, offset) of each message a broker acknowledged: its queue is read past it."""
    ends: dict[tuple[str, int], int] = {}
    for broker, queue_id, offset in sent:
        ends[(broker, queue_id)] = max(ends.get((broker, queue_id), 0), offset + 1)
    out: list[MessageExt] = []
    for mq in route.subscribe_queues(topic):
        addr = route.master_addr(mq.broker_name)
        assert addr is not None
        out.extend(await pull_queue(api, addr, mq, group, ends.get((mq.broker_name, mq.queue_id), 0)))
    return out


async def pull_queue(
    api: BrokerApi, addr: str, mq: MessageQueue, group: str, at_least: int = 0
) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset, end = 0, await _max_offset(api, addr, mq, at_least)
    while offset < end:
        result = await api.pull(addr, group, mq, offset, max_nums=32, timeout_s=10.0)
        out.extend(result.messages)
        if result.next_begin_offset <= offset:
            raise AssertionError(f"pull of {mq} made no progress at {offset}: {result.status}")
        offset = result.next_begin_offset
    return out


async def _max_offset(api: BrokerApi, addr: str, mq: MessageQueue, at_least: int) -> int:
    """The queue's max offset, once it has reached ``at_least``: a broker answers SEND_OK once the commit
    log has the message, and its consume queue catches up a moment later (a broker just revived by
    another test more than a moment). Polled: the broker tells no one when it has caught up."""
    deadline = asyncio.get_running_loop().time() + 30.0
    while (end := await api.get_max_offset(addr, mq)) < at_least:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{mq} reached offset {end} only; {at_least} were acknowledged")
        await asyncio.sleep(0.1)
    return end

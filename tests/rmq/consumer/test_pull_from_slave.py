"""Java 4.9.4 parity of where the push consumer pulls from and keeps its offsets: a broker's slave while
its master is down, and the node the broker suggests.

Java's reference (rocketmq-all-4.9.4): PullAPIWrapper.pullKernelImpl picks the pull's address with
MQClientInstance.findBrokerAddressInSubscribe(brokerName, recalculatePullFromWhichNode(mq), false):
the node the broker last suggested (processPullResult -> updatePullFromWhichNode(suggestWhichBrokerId)),
the master at first; when that node is not in the route, any address the route lists for the broker (a
slave while its master is down). Pulling from a slave clears the commit-offset flag.
RemoteBrokerOffsetStore reads and commits at findBrokerAddressInSubscribe(brokerName, MASTER_ID, true),
and when that finds none, after a route refresh, at (brokerName, MASTER_ID, false): the master, else any.

(Moved from the review's tests/rmq/test_zz_review_tx_pull_parity.py, which failed on the code before.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.codes import PULL_COMMIT_OFFSET, RequestCode, ResponseCode
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.route import BrokerData
from tests.rmq.consumer.helpers import WAIT_S, Recorder, send_to_queues

MASTER_ID = 0


def java_find_broker_address_in_subscribe(
    broker_addrs: dict[int, str], broker_id: int, only_this_broker: bool
) -> tuple[str, bool] | None:
    """MQClientInstance.findBrokerAddressInSubscribe (4.9.4): (address, slave) or None. ``broker_addrs``
    in the route's order (Java's HashMap of Long keys iterates small ids first)."""
    if not broker_addrs:
        return None
    addr = broker_addrs.get(broker_id)
    slave = broker_id != MASTER_ID
    found = addr is not None
    if not found and slave:
        addr = broker_addrs.get(broker_id + 1)
        found = addr is not None
    if not found and not only_this_broker:
        first = min(broker_addrs)
        addr, slave, found = broker_addrs[first], first != MASTER_ID, True
    return (addr, slave) if found and addr is not None else None


class RouteRewriting(RemotingClient):
    """devbroker for everything, but the name server's routes list ``rewrite[broker name]`` as that
    broker's addresses (id -> address), and PULL_MESSAGE to a broker in ``scripted`` is answered here
    (PULL_NOT_FOUND at the offset asked, with that suggestWhichBrokerId). Records every pull's address."""

    def __init__(self, rewrite: dict[str, dict[int, str]], scripted: dict[str, int] | None = None) -> None:
        super().__init__()
        self.rewrite = rewrite
        self.scripted = scripted or {}
        self.pulls: list[tuple[str, RemotingCommand]] = []
        self.pulled = asyncio.Event()

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code == RequestCode.PULL_MESSAGE:
            self.pulls.append((addr, cmd))
            self.pulled.set()
            bname = cmd.ext_fields.get("bname", "")
            if bname in self.scripted:
                await asyncio.sleep(0)
                offset = cmd.ext_fields["queueOffset"]
                ext = {
                    "nextBeginOffset": offset,
                    "minOffset": "0",
                    "maxOffset": offset,
                    "suggestWhichBrokerId": str(self.scripted[bname]),
                }
                return cmd.response(ResponseCode.PULL_NOT_FOUND, None, ext)
        resp = await super().invoke(addr, cmd, timeout_s)
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and resp.code == ResponseCode.SUCCESS and resp.body:
            doc = orjson.loads(resp.body)
            for b in doc.get("brokerDatas", []):
                if b["brokerName"] in self.rewrite:
                    b["brokerAddrs"] = {str(k): v for k, v in self.rewrite[b["brokerName"]].items()}
            resp = cmd.response(resp.code, resp.remark, dict(resp.ext_fields), orjson.dumps(doc))
        return resp

    async def until_pulls(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not done():
                self.pulled.clear()
                await self.pulled.wait()


def _config(group: str, **kw: object) -> ConsumerConfig:
    return ConsumerConfig(
        group,
        instance_name="one",
        client_ip="127.0.0.1",
        consume_from=ConsumeFrom.FIRST_OFFSET,
        rebalance_interval_s=3600,
        **kw,  # type: ignore[arg-type]
    )


def _consumer(cfg: ConsumerConfig, cluster: DevCluster, client: RouteRewriting) -> PushConsumer:
    consumer = PushConsumer(cfg, cluster.namesrv_addr, Recorder(), client=client)
    client._on_request = consumer.on_broker_request  # NOTIFY_CONSUMER_IDS_CHANGED and the like
    return consumer


async def test_queues_of_a_broker_whose_master_is_down_are_pulled_from_its_slave(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # broker-a's master left the route; its slave (id 1) is still there (here: the same devbroker
    # answering at that address). Java's push consumer keeps consuming those queues from the slave.
    names = sorted(cluster.brokers)
    down = names[0]
    slave_addr = cluster.brokers[down].addr
    expected = java_find_broker_address_in_subscribe({1: slave_addr}, MASTER_ID, False)
    assert expected == (slave_addr, True)  # Java: the slave, and the commit-offset flag cleared

    client = RouteRewriting({down: {1: slave_addr}})
    consumer = _consumer(_config("GZ-slave"), cluster, client)
    consumers.append(consumer)
    consumer.subscribe("ZZSlaveT")
    await send_to_queues(cluster, "ZZSlaveT", 1)
    await consumer.start()

    owned_brokers = {mq.broker_name for mq in consumer.queues if mq.topic == "ZZSlaveT"}
    # The rebalance gave this (only) member every queue of the topic, broker-a's included (Java's
    # subscribe queues do not depend on a master); Java adds and pulls them, from the slave.
    assert down in owned_brokers, f"queues of {down} (master down, slave up) never consumed: {owned_brokers}"
    await client.until_pulls(lambda: any(a == slave_addr for a, _ in client.pulls))
    to_slave = [cmd for a, cmd in client.pulls if a == slave_addr]
    assert not int(to_slave[0].ext_fields["sysFlag"]) & PULL_COMMIT_OFFSET  # a slave commits nothing


async def test_the_next_pull_goes_to_the_node_the_broker_suggested(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # The master answers with suggestWhichBrokerId 1 (slaveReadEnable, the consumer reads from disk:
    # whichBrokerWhenConsumeSlowly). Java's processPullResult records it and the next pull of that
    # queue goes to slave 1; the master keeps serving the lagging consumer's disk reads otherwise.
    names = sorted(cluster.brokers)
    name = names[0]
    master = cluster.brokers[name].addr
    slave = "127.0.0.1:1"  # never connected: the scripted pulls answer for it
    assert java_find_broker_address_in_subscribe({0: master, 1: slave}, 1, False) == (slave, True)

    client = RouteRewriting({name: {0: master, 1: slave}}, scripted={name: 1})
    cfg = _config("GZ-suggest", pull_min_interval_empty_s=0.0)
    consumer = _consumer(cfg, cluster, client)
    consumers.append(consumer)
    await send_to_queues(cluster, "ZZSuggestT", 1)
    consumer.subscribe("ZZSuggestT")
    await consumer.start()
    mq = next(m for m in sorted(consumer.queues) if m.broker_name == name and m.topic == "ZZSuggestT")

    def of(q: MessageQueue) -> list[str]:
        return [
            a
            for a, cmd in client.pulls
            if cmd.ext_fields.get("bname") == q.broker_name
            and cmd.ext_fields.get("topic") == q.topic
            and cmd.ext_fields.get("queueId") == str(q.queue_id)
        ]

    await client.until_pulls(lambda: len(of(mq)) >= 2)
    first, second = of(mq)[:2]
    assert first == master
    assert second == slave, f"after suggestWhichBrokerId 1 the next pull went to {second}, not {slave}"


M, S1, S2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


@pytest.mark.parametrize(
    ("addrs", "broker_id", "only_this_broker"),
    [
        ({0: M, 1: S1}, MASTER_ID, False),  # the master
        ({1: S1}, MASTER_ID, False),  # master down: the slave
        ({1: S1}, MASTER_ID, True),  # master down, the master only (offsets, before a route refresh): none
        ({0: M, 1: S1}, 1, False),  # the suggested slave
        ({0: M, 2: S2}, 1, False),  # slave 1 gone: the next id
        ({0: M, 2: S2}, 1, True),
        ({0: M}, 1, False),  # no slave: any address, the master (not a slave: commits stay on)
        ({0: M}, 1, True),
        ({0: M, 1: S1}, 7, False),  # a suggestion naming no node: any address
        ({2: S2, 1: S1}, MASTER_ID, False),  # any address: Java's HashMap iterates the small ids first
        ({}, MASTER_ID, False),
    ],
)
def test_the_subscribe_lookup_is_javas(addrs: dict[int, str], broker_id: int, only_this_broker: bool) -> None:
    broker = BrokerData("c", "broker-a", addrs)
    expected = java_find_broker_address_in_subscribe(addrs, broker_id, only_this_broker)
    assert broker.subscribe_addr(broker_id, only_this_broker) == expected


async def test_offsets_of_a_broker_whose_master_is_down_are_read_and_committed_at_its_slave(
    cluster: DevCluster, consumers: list[PushConsumer]
) -> None:
    # RemoteBrokerOffsetStore: the master, else (after a route refresh) any address of the broker. The
    # group's committed offset is read from the slave (it starts there, not from consume_from), and
    # what it consumes is committed there (a 4.9.4 slave stores it; SlaveSynchronize overwrites it with
    # the master's table once the master is back, from where the consumer commits again).
    names = sorted(cluster.brokers)
    down = names[0]
    slave = cluster.brokers[down]
    group, topic = "GZ-slave-offsets", "ZZSlaveOffsetsT"
    await send_to_queues(cluster, topic, 2, queues=1)
    slave.offsets.commit(group, topic, 0, 1)  # what the slave holds of the group's progress

    client = RouteRewriting({down: {1: slave.addr}})
    recorder = Recorder()
    consumer = PushConsumer(_config(group), cluster.namesrv_addr, recorder, client=client)
    client._on_request = consumer.on_broker_request
    consumers.append(consumer)
    consumer.subscribe(topic)
    await consumer.start()

    await recorder.until(lambda got: any(m.body == f"{down}/0/1".encode() for m in got))
    assert f"{down}/0/0".encode() not in [m.body for m in recorder.got]  # it started at the slave's 1
    # The offset in memory (1) rides on no pull to the slave: the commit-offset flag is cleared there.
    to_slave = [cmd for a, cmd in client.pulls if a == slave.addr and cmd.ext_fields.get("bname") == down]
    assert to_slave and not any(int(cmd.ext_fields["sysFlag"]) & PULL_COMMIT_OFFSET for cmd in to_slave)
    await consumer.persist_offsets()
    assert slave.offsets.query(group, topic, 0) == 2

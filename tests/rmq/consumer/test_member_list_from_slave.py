"""The group's member list (GET_CONSUMER_LIST_BY_GROUP) while every master of the topic is down.

Java 4.9.4: RebalanceImpl.rebalanceByTopic asks MQClientInstance.findConsumerIdList, which asks
findBrokerAddrByTopic: one broker of the route, at BrokerData.selectBrokerAddr() (the master, else one
of its slaves, which know the group from the heartbeats Java sends every node). Only when no answer
comes (cidAll null) does it keep the allocation it has. We asked masters only: with every master down
the member list was never known, so a member joining during the failover was never given its share,
and the one consuming every queue kept them all (the same queues consumed by both).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.broker import BrokerApi, ConsumerData
from rocksidecar.rmq.consumer.allocate import Averagely, sort_for_allocation
from rocksidecar.rmq.consumer.config import ConsumeFrom, ConsumerConfig
from rocksidecar.rmq.consumer.push_consumer import PushConsumer
from rocksidecar.rmq.consumer.sticky import AllocateSticky
from rocksidecar.rmq.pool import RemotingClient
from tests.rmq.consumer.helpers import Recorder, send_to_queues
from tests.rmq.consumer.test_pull_from_slave import RouteRewriting

TOPIC = "ZZMembersSlaveT"


@pytest.fixture
async def other_member() -> AsyncIterator[BrokerApi]:
    client = RemotingClient()
    yield BrokerApi(client)
    await client.close()


@pytest.mark.parametrize("allocate", [Averagely, AllocateSticky])
async def test_a_member_joining_while_every_master_is_down_gets_its_share(
    cluster: DevCluster,
    consumers: list[PushConsumer],
    other_member: BrokerApi,
    allocate: type[Averagely] | type[AllocateSticky],
) -> None:
    group = f"GZ-members-slave-{allocate.__name__}"
    client = RouteRewriting({})
    cfg = ConsumerConfig(
        group,
        instance_name="one",
        client_ip="127.0.0.1",
        consume_from=ConsumeFrom.FIRST_OFFSET,
        rebalance_interval_s=3600,
        allocate=allocate(),
    )
    consumer = PushConsumer(cfg, cluster.namesrv_addr, Recorder(), client=client)
    client._on_request = consumer.on_broker_request
    consumers.append(consumer)
    consumer.subscribe(TOPIC)
    await send_to_queues(cluster, TOPIC, 1)
    await consumer.start()
    mq_all = consumer._routes[TOPIC].subscribe_queues(TOPIC)
    assert {mq for mq in consumer.queues if mq.topic == TOPIC} == set(mq_all)  # alone: every queue

    # Every master goes down: the routes list each broker's slave only (id 1, here the same devbroker,
    # which holds the group's registrations as a 4.9.4 slave does from the heartbeats sent to it).
    client.rewrite = {name: {1: b.addr} for name, b in cluster.brokers.items()}
    assert await consumer.refresh_routes()
    assert all(b.master_addr is None for b in consumer._routes[TOPIC].broker_datas)
    # A Java member of the group joins; Java heartbeats every node of the route, slaves included.
    joiner = "127.0.0.2@java"
    data = ConsumerData(group, subscriptions=consumer.consumer_data().subscriptions)
    for b in cluster.brokers.values():
        await other_member.heartbeat(b.addr, joiner, consumers=[data])

    await consumer.rebalance()

    mine = {mq for mq in consumer.queues if mq.topic == TOPIC}
    assert mine, "the member list from the slaves gave us nothing"
    assert mine != set(mq_all), "every queue kept: the joining member's share is consumed twice"
    if allocate is Averagely:  # what the Java member computes from the same list: its share, not ours
        mqs, cids = sort_for_allocation(mq_all, [consumer.client_id, joiner])
        theirs = set(Averagely().allocate(group, joiner, mqs, cids))
        assert mine == set(mq_all) - theirs

"""rocksidecar_consumer_lag of a queue whose broker's master is down: asked of the slave it is pulled from.

Since 1bb5f39 the push consumer consumes such a broker from its slave (findBrokerAddressInSubscribe).
The lag sample asked the max offset of masters only, so exactly those queues had no row while the
failover lasted. Java's admin tools (mqadmin consumerProgress / topicStatus, the Dashboard: the
DefaultMQAdminExtImpl examineConsumeStats and examineTopicStats of 4.9.4) ask each broker at
BrokerData.selectBrokerAddr(): the master, else one of its slaves; so does the lag sample now.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rocksidecar.app.subscriptions.runner import Subscriptions
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.client_id import build_client_id
from rocksidecar.rmq.client_instance import ClientInstance
from tests.rmq.consumer.helpers import send_to_queues
from tests.rmq.consumer.test_pull_from_slave import RouteRewriting

TOPIC = "ZZLagSlaveT"


@pytest.fixture
async def rewriting(cluster: DevCluster) -> AsyncIterator[RouteRewriting]:
    # broker-a's master left the route; its slave (id 1: the same devbroker at that address) is listed
    down = sorted(cluster.brokers)[0]
    client = RouteRewriting({down: {1: cluster.brokers[down].addr}})
    yield client
    await client.close()


async def test_a_queue_pulled_from_a_slave_has_its_lag_row(
    cluster: DevCluster, rewriting: RouteRewriting
) -> None:
    down, up = sorted(cluster.brokers)
    await send_to_queues(cluster, TOPIC, 2)
    instance = ClientInstance(
        cluster.namesrv_addr, remoting=rewriting, client_id=build_client_id("127.0.0.1", "lag")
    )
    rewriting._on_request = instance.on_broker_request
    # grpc: the hub holds what is pulled until a stream asks (none here), so nothing is committed
    spec = SubscriptionSpec(
        name="lagged", topic=TOPIC, group="GZ-lag-slave", endpoint="grpc", consume_from="first"
    )
    subs = Subscriptions([spec], cluster.namesrv_addr, instance=instance)
    try:
        await subs.start()
        owned = {(mq.broker_name, mq.queue_id) for mq in subs.consumers["lagged"].queues if mq.topic == TOPIC}
        assert owned == {(b, q) for b in (down, up) for q in range(4)}  # the slave's queues consumed too

        rows = {(r.broker, r.queue_id): r for r in await subs.lags() if r.topic == TOPIC}
        assert set(rows) == owned, f"no lag row for the queues of {down} (master down): {sorted(rows)}"
        assert all(r.max_offset == 2 for r in rows.values())  # the slave's max offset, as the master's
        assert all(r.lag == 2 for r in rows.values())
    finally:
        await subs.close()
        await instance.close()

"""devbroker's queue locks (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ), as Java's RebalanceLockManager keeps them."""

from __future__ import annotations

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.locks import LOCK_MAX_LIVE_S, QueueLocks
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.consumer.broker_calls import QueueLocker
from rocksidecar.rmq.errors import BrokerError
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand

MQS = [MessageQueue("T", "broker-a", i) for i in range(3)]


def test_a_lock_is_exclusive_renewable_and_lapses() -> None:
    now = [0.0]
    locks = QueueLocks(lambda: now[0])
    assert locks.try_lock("G", "c1", MQS[:2]) == MQS[:2]
    assert locks.try_lock("G", "c2", MQS) == [MQS[2]]  # c1's two are taken
    assert locks.try_lock("OtherGroup", "c2", MQS[:1]) == MQS[:1]  # locks are per group
    now[0] = LOCK_MAX_LIVE_S - 1
    assert locks.try_lock("G", "c1", MQS[:1]) == MQS[:1]  # renewed
    now[0] = LOCK_MAX_LIVE_S + 0.5
    assert locks.owner("G", MQS[1]) is None  # not renewed: lapsed
    assert locks.owner("G", MQS[0]) == "c1"
    assert locks.try_lock("G", "c2", MQS[:2]) == [MQS[1]]
    locks.unlock("G", "c2", [MQS[0]])  # not c2's: nothing happens
    assert locks.owner("G", MQS[0]) == "c1"
    locks.unlock("G", "c1", [MQS[0]])
    assert locks.owner("G", MQS[0]) is None


async def test_lock_and_unlock_over_the_wire(cluster: DevCluster, client: RemotingClient) -> None:
    addr = cluster.brokers["broker-a"].addr
    c1, c2 = QueueLocker(client, "G", "c1"), QueueLocker(client, "G", "c2")
    assert await c1.lock(addr, MQS[:2]) == set(MQS[:2])
    assert await c2.lock(addr, MQS) == {MQS[2]}
    await c1.unlock(addr, MQS[:1])
    assert await c2.lock(addr, MQS[:1]) == {MQS[0]}
    assert cluster.brokers["broker-a"].locks.owner("G", MQS[1]) == "c1"


async def test_a_bad_lock_body_is_refused(cluster: DevCluster, client: RemotingClient) -> None:
    addr = cluster.brokers["broker-a"].addr
    resp = await client.invoke(addr, RemotingCommand(RequestCode.LOCK_BATCH_MQ, {}, b"{}"), 3.0)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "bad lock request body" in (resp.remark or "")
    with pytest.raises(BrokerError, match="bad lock request body"):
        await QueueLocker(client, "", "c1").lock(addr, [])  # as above, through the client: a typed error

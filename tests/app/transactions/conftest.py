"""One devbroker whose clock the test moves and whose transaction checks run only when asked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from rocksidecar.app.transactions.coordinator import TransactionCoordinator
from rocksidecar.app.transactions.records import CF, TransactionRecords
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import ClientInstance
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.producer.transaction import TransactionProducer
from rocksidecar.storage.memory import MemoryKV
from tests.fakes import FakeWallClock


@pytest.fixture
def clock() -> FakeWallClock:
    return FakeWallClock()


@pytest.fixture
async def cluster(clock: FakeWallClock) -> AsyncIterator[DevCluster]:
    async with DevCluster(brokers=1, queues=2, now_ms=clock.now_ms, transaction_check_interval_s=0) as c:
        yield c


@dataclass
class Started:
    """A started transaction producer on ``cluster`` and a coordinator over in-memory records."""

    producer: Producer
    tx: TransactionProducer
    records: TransactionRecords
    coordinator: TransactionCoordinator


@pytest.fixture
async def started(cluster: DevCluster, clock: FakeWallClock) -> AsyncIterator[Started]:
    instance = ClientInstance(cluster.namesrv_addr)
    producer = Producer(instance.namesrv, instance.api, ProducerConfig(group="tx_started"), instance=instance)
    tx = TransactionProducer(producer, "tx_started")
    records = TransactionRecords(MemoryKV([CF]))
    await producer.start()
    tx.start()
    try:
        yield Started(producer, tx, records, TransactionCoordinator(records, tx, None, now_ms=clock.now_ms))
    finally:
        await tx.close()
        await producer.close()
        await instance.close()

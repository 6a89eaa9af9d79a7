"""A due message the broker refuses falls into the retry store, as the service wires it: one KV holding
every component's column families, one group-commit writer, and a publish callable that sends and
spools failures. retry/ is used by this test only; delay/ never imports it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from rocksidecar.delay import COLUMN_FAMILIES as DELAY_CFS
from rocksidecar.delay import DELAY_DUE_AT, DelayedMessage, DelayScheduler, DelayState, DelayStore
from rocksidecar.retry import ReplayLoop, RetryPolicy, RetryRecord, RetryStore
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.delay.conftest import SETTLE_S, message
from tests.fakes import FakeWallClock, FaultyKV


class BrokerDown(Exception):
    redeliverable = True


@dataclass
class Broker:
    """Stores what it is sent unless it is down."""

    down: bool = False
    stored: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # (id, topic, properties)

    def send(self, id_: str, topic: str, properties: dict[str, str]) -> None:
        if self.down:
            raise BrokerDown("connection refused")
        self.stored.append((id_, topic, properties))


@dataclass
class Service:
    clock: FakeWallClock
    kv: FaultyKV
    broker: Broker
    delay: DelayStore
    retry: RetryStore
    scheduler: DelayScheduler
    replay: ReplayLoop

    async def publish(self, msgs: list[DelayedMessage]) -> list[BaseException | None]:
        """Send each message; spool what the broker refuses. An exception only if it is stored nowhere."""
        outcomes: list[BaseException | None] = []
        failed: list[RetryRecord] = []
        for msg in msgs:
            try:
                self.broker.send(msg.id, msg.topic, dict(msg.properties))
                outcomes.append(None)
            except BrokerDown as exc:
                failed.append(to_record(msg, str(exc), self.retry.now_ms()))
                outcomes.append(None)
        if failed:
            try:
                await self.retry.spool_many(failed, self.retry.now_ms() + 3000)
            except StorageError as exc:
                spooled = {r.id for r in failed}
                outcomes = [exc if m.id in spooled else o for m, o in zip(msgs, outcomes, strict=True)]
        return outcomes

    async def deliver(self, record: RetryRecord) -> None:
        self.broker.send(record.id, record.topic, dict(record.properties))

    async def settle(self) -> None:
        await asyncio.wait_for(asyncio.gather(self.scheduler.wait_idle(), self.replay.wait_idle()), SETTLE_S)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()


def to_record(msg: DelayedMessage, error: str, now_ms: int) -> RetryRecord:
    return RetryRecord(
        id=msg.id, topic=msg.topic, body=msg.body, tags=msg.tags, keys=msg.keys, properties=msg.properties,
        sharding_key=msg.sharding_key, type=msg.type, created_ms=msg.created_ms, first_failure_ms=now_ms,
        last_error=error, history=((now_ms, error),),
    )  # fmt: skip


@pytest.fixture
async def svc() -> AsyncIterator[Service]:
    clock = FakeWallClock()
    kv = FaultyKV(MemoryKV((*RETRY_CFS, *DELAY_CFS)))
    writer = GroupCommitWriter(kv)
    delay = DelayStore(kv, writer, now_ms=clock.now_ms, clock=clock.monotonic)
    retry = RetryStore(kv, writer=writer, now_ms=clock.now_ms, clock=clock.monotonic)
    broker = Broker()
    service = Service(clock, kv, broker, delay, retry, None, None)  # type: ignore[arg-type]
    service.scheduler = DelayScheduler(delay, service.publish, sleep=clock.sleep, retry_s=1.0)
    service.replay = ReplayLoop(retry, service.deliver, lambda _t: RetryPolicy(), sleep=clock.sleep)
    await service.scheduler.start()
    await service.replay.start()
    yield service
    await service.scheduler.close()
    await service.replay.close()
    await retry.close()
    await delay.close()
    await writer.close()


async def test_a_refused_due_message_is_spooled_and_redelivered_by_the_retry_store(svc: Service) -> None:
    due = svc.delay.now_ms() + 10_000
    await svc.delay.schedule_many([message("A", due), message("B", due + 1)])
    svc.broker.down = True
    await svc.advance(10.0)
    assert svc.broker.stored == []
    status = svc.delay.get("A")
    assert status is not None and status.state is DelayState.SENT  # handed over: the retry store has it
    spooled = svc.retry.get("A")
    assert spooled is not None and spooled.next_attempt_at_ms == due + 3000
    assert svc.delay.stats().pending == 1 and svc.retry.stats().pending == 1
    await svc.advance(0.001)  # B, a millisecond later, goes the same way
    assert svc.delay.stats().pending == 0 and svc.retry.stats().pending == 2
    svc.broker.down = False
    await svc.advance(3.0)
    assert [(id_, topic) for id_, topic, _ in svc.broker.stored] == [("A", "orders"), ("B", "orders")]
    assert svc.broker.stored[0][2][DELAY_DUE_AT] == str(due)  # the delivery times travel with it
    assert svc.retry.stats().pending == 0


async def test_when_neither_broker_nor_retry_store_takes_it_it_stays_scheduled(svc: Service) -> None:
    due = svc.delay.now_ms() + 100
    await svc.delay.schedule(message("A", due))
    svc.broker.down = True
    svc.kv.write_fault = "disk full"
    await svc.advance(0.1)  # the spool fails: publish answers with the exception
    status = svc.delay.get("A")
    assert status is not None and status.state is DelayState.SCHEDULED
    svc.kv.write_fault = None
    svc.broker.down = False
    await svc.advance(1.0)  # the delay scheduler's own retry
    assert [id_ for id_, _, _ in svc.broker.stored] == ["A"]
    status = svc.delay.get("A")
    assert status is not None and status.state is DelayState.SENT
    assert svc.retry.stats().pending == 0

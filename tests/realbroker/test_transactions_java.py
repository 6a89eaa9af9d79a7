"""The sidecar's transactions and a Java TransactionMQProducer behave alike on real 4.9.4 brokers (issue 29):
in one topic each begins six, commits messages 0 and 3, rolls back 1 and 4 and leaves 2 and 5 undecided; the
broker's check-back of an undecided one is answered UNKNOWN the first time and COMMIT after. A Java
DefaultMQPushConsumer then receives the same messages of both (0, 2, 3, 5), the brokers hold nothing else, and
each side was asked about exactly its undecided ones, twice or more."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from rocksidecar.app.transactions.coordinator import TransactionCoordinator
from rocksidecar.app.transactions.records import CF, Decision, TransactionRecords
from rocksidecar.rmq import Message
from rocksidecar.rmq.producer.transaction import TransactionProducer, TransactionState
from rocksidecar.storage.memory import MemoryKV
from tests.realbroker import java_probe
from tests.realbroker.conftest import producer_on_new_topic, pull_all

N = 6
PLAN = {0: Decision.COMMIT, 1: Decision.ROLLBACK, 2: Decision.NONE}  # by i % 3, as TxProbe.java decides
DELIVERED = {i for i in range(N) if PLAN[i % 3] is not Decision.ROLLBACK}
CHECK_WAIT_S = 200.0  # two checks each: the first after >= 6 s, then every 5 s; a loaded machine is slower


async def _read_java(
    stream: asyncio.StreamReader, sent: dict[str, int], checks: list[tuple[str, str]]
) -> None:
    while line := (await stream.readline()).decode().strip():
        kind, key, *rest = [*line.split(" "), ""]
        if kind == "SENT":
            sent[key] = int(rest[0])
        elif kind == "CHECK":
            checks.append((key, rest[0]))


@pytest.mark.timeout(480)  # two JVMs start and the brokers check twice; the shared machine is busy
async def test_java_transaction_producer_and_the_sidecar_behave_alike(namesrv_addr: str) -> None:
    topic, instance, route, producer = await producer_on_new_topic(namesrv_addr, "txedge_alike")
    group = producer.config.group
    asked: list[tuple[str, TransactionState]] = []

    async def ask_app(tx_id: str, key: str | None, topic_: str) -> TransactionState:
        # as TxProbe's checkLocalTransaction: UNKNOWN the first time, COMMIT after
        first = all(seen != tx_id for seen, _ in asked)
        answer = TransactionState.UNKNOWN if first else TransactionState.COMMIT
        asked.append((tx_id, answer))
        return answer

    tx = TransactionProducer(producer, group)
    coordinator = TransactionCoordinator(TransactionRecords(MemoryKV([CF])), tx, ask_app)
    consumer = await java_probe.start("consume", namesrv_addr, topic, f"{topic}_cg")
    java = await java_probe.start(namesrv_addr, topic, f"{group}_java", str(N), main="TxProbe")
    java_sent: dict[str, int] = {}
    java_checks: list[tuple[str, str]] = []
    assert java.stdout is not None and consumer.stdout is not None
    reader = asyncio.create_task(_read_java(java.stdout, java_sent, java_checks))
    try:
        await producer.start()
        tx.start()
        ours: dict[str, int] = {}
        for i in range(N):
            record = await coordinator.begin(Message(topic, f"sidecar-tx-{i}".encode()))
            ours[record.id] = i
            if PLAN[i % 3] is not Decision.NONE:
                assert (await coordinator.decide(record.id, PLAN[i % 3])).acknowledged
        await instance.heartbeat()  # announce the group now rather than in 30 s
        expected = {k for k, i in ours.items() if i in DELIVERED}
        received: set[str] = set()

        def all_expected() -> set[str]:
            return expected | {k for k, i in java_sent.items() if i in DELIVERED}

        try:
            async with asyncio.timeout(CHECK_WAIT_S):
                while len(java_sent) < N or not all_expected() <= received:
                    line = (await consumer.stdout.readline()).decode().strip()
                    assert line, "the Java consumer exited"
                    if line.startswith("MSG "):
                        received.add(line.split(" ")[1])
        except TimeoutError:
            raise AssertionError(
                f"in {CHECK_WAIT_S} s: sidecar {ours}, Java {java_sent}, received {received}, "
                f"the sidecar asked {asked}, Java asked {java_checks}"
            ) from None
        expected = all_expected()
        assert received == expected
        stored = [m.uniq_key for m in await pull_all(instance.api, route, topic, f"{group}_check")]
        assert sorted(stored) == sorted(expected)  # type: ignore[type-var]  # nothing rolled back, nothing twice

        # asked about exactly the undecided ones, UNKNOWN first and COMMIT after, on both sides
        undecided = {i for i in range(N) if PLAN[i % 3] is Decision.NONE}
        assert {ours[k] for k, _ in asked} == undecided
        assert {java_sent[k] for k, _ in java_checks} == undecided
        for answers in (
            [(k, a.name) for k, a in asked],
            [(k, "UNKNOWN" if a == "UNKNOW" else "COMMIT") for k, a in java_checks],
        ):
            per_id = Counter(k for k, _ in answers)
            assert all(count >= 2 for count in per_id.values()), answers
            for key in per_id:
                said = [a for k, a in answers if k == key]
                assert said[0] == "UNKNOWN" and set(said[1:]) == {"COMMIT"}, (key, said)
        for k, i in ours.items():
            found = coordinator.records.get(k)
            assert found is not None
            assert found.decision is (Decision.ROLLBACK if i not in DELIVERED else Decision.COMMIT)
    finally:
        for proc in (java, consumer):
            await java_probe.stop(proc)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await tx.close()
        await producer.close()
        await instance.close()

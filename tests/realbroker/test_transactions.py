"""Transactional messages against real 4.9.4 brokers (issue 29): half messages stay invisible, END_TRANSACTION
commits or rolls them back, and an undecided half is asked about (CHECK_TRANSACTION_STATE) and decided
by the checker's answer. The shared brokers check every 5 s (transactionCheckInterval=5000) and only
halves older than transactionTimeOut (6 s)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from rocksidecar.app.transactions.coordinator import TransactionCoordinator
from rocksidecar.app.transactions.records import CF, Decision, TransactionRecords
from rocksidecar.rmq import ClientInstance, Message
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.producer.transaction import CheckRequest, TransactionProducer, TransactionState
from rocksidecar.storage.memory import MemoryKV
from tests.app.push_app import push_app
from tests.app.transactions.serve import Serve, begin, check_endpoint, decide, http_client, running, until
from tests.realbroker import java_probe
from tests.realbroker.conftest import create_topic_everywhere, pull_all, unique_topic

CHECK_WAIT_S = 90.0  # first check after >= 6 s, every 5 s; a loaded machine is slower


async def java_received(java: asyncio.subprocess.Process, expected: set[str]) -> set[str]:
    """The ids the Java DefaultMQPushConsumer printed, read until ``expected`` are among them."""
    received: set[str] = set()
    assert java.stdout is not None
    async with asyncio.timeout(120.0):
        while not expected <= received:
            line = (await java.stdout.readline()).decode().strip()
            assert line, "the Java consumer exited"
            if line.startswith("MSG "):
                received.add(line.split(" ")[1])
    return received


async def test_commit_rollback_and_check_back(namesrv_addr: str) -> None:
    topic = unique_topic("tx_rmq")
    group = f"tx_rmq_pg_{os.getpid()}"
    instance = ClientInstance(namesrv_addr)
    route = await create_topic_everywhere(instance.namesrv, instance.api, topic)
    producer = Producer(instance.namesrv, instance.api, ProducerConfig(group=group), instance=instance)
    answers: dict[str, TransactionState] = {}
    asked: dict[str, asyncio.Event] = {}

    async def checker(req: CheckRequest) -> TransactionState:
        event = asked.get(req.msg_id)
        if event is not None and req.message.properties.get("PGROUP") == tx.group:
            event.set()
        return answers.get(req.msg_id, TransactionState.UNKNOWN)

    tx = TransactionProducer(producer, f"{group}_tx", checker)
    try:
        await producer.start()
        tx.start()
        receipts = [await tx.send_half(Message(topic, f"m{i}".encode(), keys=(f"k{i}",))) for i in range(6)]
        await instance.heartbeat()  # announce the group now rather than in 30 s
        for r in receipts[0:2]:
            await tx.end(r, TransactionState.COMMIT)
        for r in receipts[2:4]:
            await tx.end(r, TransactionState.ROLLBACK)
        undecided = receipts[4:]
        answers[undecided[0].msg_id] = TransactionState.COMMIT
        answers[undecided[1].msg_id] = TransactionState.ROLLBACK
        for r in undecided:
            asked[r.msg_id] = asyncio.Event()
        async with asyncio.timeout(CHECK_WAIT_S):
            for event in asked.values():
                await event.wait()
        committed = {r.msg_id for r in receipts[0:2]} | {undecided[0].msg_id}
        async with asyncio.timeout(30.0):
            while True:  # the check's END_TRANSACTION is one-way: poll until the broker stored it
                got = [m.uniq_key for m in await pull_all(instance.api, route, topic, f"{group}_check")]
                if len(got) >= len(committed):
                    break
                await asyncio.sleep(0.2)
        assert sorted(got) == sorted(committed)  # nothing rolled back, nothing twice
        assert tx.checks_answered >= 2
    finally:
        await tx.close()
        await producer.close()
        await instance.close()


async def test_restarted_coordinator_answers_the_real_broker(namesrv_addr: str) -> None:
    """A sidecar stops between begin and commit (its connection closes, as after a SIGKILL); one
    started afresh over the same records is asked by the broker: the synced decision and, for the
    undecided ones, the app's answer decide."""
    topic = unique_topic("tx_restart")
    group = f"tx_restart_pg_{os.getpid()}"
    records = TransactionRecords(MemoryKV([CF]))
    app_answers: dict[str, TransactionState] = {}
    asked: dict[str, asyncio.Event] = {}

    async def ask_app(tx_id: str, key: str | None, topic_: str) -> TransactionState:
        if tx_id in asked:
            asked[tx_id].set()
        return app_answers.get(tx_id, TransactionState.UNKNOWN)

    async def sidecar() -> tuple[ClientInstance, Producer, TransactionProducer, TransactionCoordinator]:
        instance = ClientInstance(namesrv_addr)
        producer = Producer(instance.namesrv, instance.api, ProducerConfig(group=group), instance=instance)
        tx = TransactionProducer(producer, group)
        coordinator = TransactionCoordinator(records, tx, ask_app)
        await producer.start()
        tx.start()
        return instance, producer, tx, coordinator

    async def close(instance: ClientInstance, producer: Producer, tx: TransactionProducer) -> None:
        await tx.close()
        await producer.close()
        await instance.close()

    instance, producer, tx, first = await sidecar()
    route = await create_topic_everywhere(instance.namesrv, instance.api, topic)
    synced = await first.begin(Message(topic, b"synced"))
    commit_by_app = await first.begin(Message(topic, b"app-commit"), transaction_key="k-commit")
    rollback_by_app = await first.begin(Message(topic, b"app-rollback"), transaction_key="k-rollback")
    # the decision reaches the record, then the process dies before END_TRANSACTION leaves it
    stored = records.get(synced.id)
    assert stored is not None
    await records.put(stored.decided(Decision.COMMIT, stored.created_ms))
    await close(instance, producer, tx)

    app_answers[commit_by_app.id] = TransactionState.COMMIT
    app_answers[rollback_by_app.id] = TransactionState.ROLLBACK
    asked.update({commit_by_app.id: asyncio.Event(), rollback_by_app.id: asyncio.Event()})
    instance, producer, tx, _second = await sidecar()  # answers the checks
    try:
        await instance.get_route(topic)
        await instance.heartbeat()
        async with asyncio.timeout(CHECK_WAIT_S):
            for event in asked.values():
                await event.wait()
        expected = {synced.id, commit_by_app.id}
        async with asyncio.timeout(30.0):
            while True:
                got = [m.uniq_key for m in await pull_all(instance.api, route, topic, f"{group}_check")]
                if len(got) >= len(expected):
                    break
                await asyncio.sleep(0.2)
        assert sorted(got) == sorted(expected)  # type: ignore[type-var]
        assert records.get(rollback_by_app.id).decision is Decision.ROLLBACK  # type: ignore[union-attr]
    finally:
        await close(instance, producer, tx)


async def test_java_push_consumer_receives_exactly_the_committed(namesrv_addr: str) -> None:
    """20 begun through the coordinator, 10 committed, 10 rolled back: a Java DefaultMQPushConsumer
    receives the 10 committed and the brokers hold nothing else in the topic."""
    topic = unique_topic("tx_java")
    group = f"tx_java_pg_{os.getpid()}"
    instance = ClientInstance(namesrv_addr)
    route = await create_topic_everywhere(instance.namesrv, instance.api, topic)
    producer = Producer(instance.namesrv, instance.api, ProducerConfig(group=group), instance=instance)
    tx = TransactionProducer(producer, group)
    coordinator = TransactionCoordinator(TransactionRecords(MemoryKV([CF])), tx, None)
    java = await java_probe.start("consume", namesrv_addr, topic, f"{topic}_cg")
    try:
        await producer.start()
        tx.start()
        begun = [await coordinator.begin(Message(topic, f"m{i}".encode())) for i in range(20)]
        committed = {r.id for r in begun[:10]}
        for r in begun[:10]:
            assert (await coordinator.decide(r.id, Decision.COMMIT)).acknowledged
        for r in begun[10:]:
            assert (await coordinator.decide(r.id, Decision.ROLLBACK)).acknowledged
        assert await java_received(java, committed) == committed
        stored = [m.uniq_key for m in await pull_all(instance.api, route, topic, f"{group}_check")]
        assert sorted(stored) == sorted(committed)  # type: ignore[type-var]
    finally:
        await java_probe.stop(java)
        await tx.close()
        await producer.close()
        await instance.close()


@pytest.mark.timeout(480)  # Java start-up, two serve start-ups and checks every 5 s on a loaded machine
async def test_serve_sigkilled_between_begin_and_commit_is_asked_after_restart(
    namesrv_addr: str, tmp_path: Path
) -> None:
    """A real `rocksidecar serve`: one transaction committed, one rolled back, two left undecided when
    the process is SIGKILLed; the restarted one is asked by the broker (transactionCheckInterval=5000)
    and the app's check endpoint decides. A Java DefaultMQPushConsumer receives exactly the committed."""
    topic = unique_topic("tx_serve")
    group = f"tx_serve_pg_{os.getpid()}"
    instance = ClientInstance(namesrv_addr)
    route = await create_topic_everywhere(instance.namesrv, instance.api, topic)
    answers: dict[str, str] = {}
    java = await java_probe.start("consume", namesrv_addr, topic, f"{topic}_cg")
    try:
        with push_app(lambda n: (200, {"content-type": "application/json"}, 0.0)) as app:
            app.respond = check_endpoint(answers)
            serve = Serve(
                namesrv_addr, tmp_path / "data",
                TRANSACTIONS_CHECK_ENDPOINT=app.url, TRANSACTIONS_GROUP=group, PRODUCER_GROUP=group,
            )  # fmt: skip
            async with http_client() as http:
                async with running(serve, http):
                    ids = [await begin(http, serve.url, topic, key) for key in ("c", "r", "app-c", "app-r")]
                    committed, rolled_back, by_app_commit, by_app_rollback = ids
                    assert (await decide(http, serve.url, committed, "commit"))["acknowledged"] is True
                    assert (await decide(http, serve.url, rolled_back, "rollback"))["acknowledged"] is True
                    await serve.kill()
                answers.update({by_app_commit: "COMMIT", by_app_rollback: "ROLLBACK"})
                app.got.clear()  # checks the first process answered UNKNOWN do not count
                async with running(serve, http):
                    asked = lambda: {json.loads(g.body)["id"] for g in app.got}  # noqa: E731
                    await until(
                        lambda: {by_app_commit, by_app_rollback} <= asked(), "the checks", CHECK_WAIT_S
                    )
                    expected = {committed, by_app_commit}
                    assert await java_received(java, expected) == expected

                    async def rolled_back_by_app() -> bool:
                        # recorded once the app's answer is back: the app being asked (above) and the
                        # commit reaching Java do not wait for it
                        got = await http.get(f"{serve.url}/v1/transactions/{by_app_rollback}")
                        return bool(got.json()["state"] == "ROLLED_BACK")

                    await until(rolled_back_by_app, "the app's rollback recorded", CHECK_WAIT_S)
        stored = [m.uniq_key for m in await pull_all(instance.api, route, topic, f"{group}_check")]
        assert sorted(stored) == sorted(expected)  # type: ignore[type-var]
    finally:
        await java_probe.stop(java)
        await instance.close()

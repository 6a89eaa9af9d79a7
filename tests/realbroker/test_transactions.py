"""Transactional messages against real 4.9.4 brokers (issue 29): half messages stay invisible, END_TRANSACTION
commits or rolls them back, and an undecided half is asked about (CHECK_TRANSACTION_STATE) and decided
by the checker's answer. The shared brokers check every 5 s (transactionCheckInterval=5000) and only
halves older than transactionTimeOut (6 s)."""

from __future__ import annotations

import asyncio
import os

from rocksidecar.rmq import ClientInstance, Message
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.producer.transaction import CheckRequest, TransactionProducer, TransactionState
from tests.realbroker.conftest import create_topic_everywhere, pull_all, unique_topic

CHECK_WAIT_S = 90.0  # first check after >= 6 s, every 5 s; a loaded machine is slower


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

"""Sidecar subscriptions on real RocketMQ 4.9.4: a Java producer's messages reach the app through the
sidecar byte-exact; a sidecar and a Java DefaultMQPushConsumer in one group split the queues with no
overlap and no gap. Skipped unless ROCKSIDECAR_TEST_NAMESRV is set (see conftest.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from rocksidecar.app.service import Service
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.rmq import BrokerApi, Message, NameServerClient, RemotingClient, new_uniq_id
from tests.app.conftest import settings_for
from tests.app.push_app import PushApp, push_app
from tests.realbroker import java_probe
from tests.realbroker.conftest import create_topic_everywhere, new_topic, unique_topic

WAIT_S = 90.0


async def _committed(namesrv: str, topic: str, group: str) -> int:
    """The group's committed offsets on the brokers, summed over the topic's queues."""
    client = RemotingClient()
    try:
        route = await NameServerClient(client, namesrv).get_route(topic)
        api = BrokerApi(client)
        total = 0
        for mq in route.subscribe_queues(topic):
            offset = await api.query_consumer_offset(route.master_addr(mq.broker_name) or "", group, mq)
            total += offset or 0
        return total
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def sidecar(
    tmp_path: Path, namesrv: str, topic: str, group: str, app: PushApp, **spec: Any
) -> AsyncIterator[Service]:
    sub = SubscriptionSpec("orders", topic, group, app.url, consume_from="first", **spec)
    service = Service(settings_for(tmp_path, namesrv=(namesrv,), subscriptions=(sub,)))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


async def test_java_producer_to_the_app_through_a_subscription_byte_exact(
    namesrv_addr: str, tmp_path: Path
) -> None:
    topic = await new_topic(namesrv_addr, "RsSubJava")
    sent = await java_probe.produce(namesrv_addr, topic, 40)
    with push_app() as app:
        async with sidecar(tmp_path, namesrv_addr, topic, f"{topic}_g", app):
            await app.until(lambda got: len({g.headers["ce-id"] for g in got}) >= len(sent), WAIT_S)
    got = {g.headers["ce-id"]: g.body for g in app.got}
    assert got == sent  # every message, byte-exact, ce-id = Java's getMsgId()
    assert {g.headers["ce-rocketmqtags"] for g in app.got} == {"java"}


async def test_java_producer_to_a_bulk_subscription_byte_exact(namesrv_addr: str, tmp_path: Path) -> None:
    topic = await new_topic(namesrv_addr, "RsSubBulk")
    sent = await java_probe.produce(namesrv_addr, topic, 200)
    with push_app(lambda _n: (200, {}, 0.0)) as app:

        def all_taken(body: bytes) -> bytes:
            ids = [e["entryId"] for e in orjson.loads(body)["entries"]]
            return orjson.dumps({"statuses": [{"entryId": i, "status": "SUCCESS"} for i in ids]})

        app.respond = all_taken

        def events() -> list[dict[str, Any]]:
            return [e["event"] for g in app.got for e in orjson.loads(g.body)["entries"]]

        async with sidecar(tmp_path, namesrv_addr, topic, f"{topic}_g", app, bulk=True):
            await app.until(lambda _got: len({e["id"] for e in events()}) >= len(sent), WAIT_S)
    got = {e["id"]: base64.b64decode(e["data_base64"]) for e in events()}
    assert got == sent  # every message, byte-exact, id = Java's getMsgId()
    assert {e["rocketmqtags"] for e in events()} == {"java"}
    assert len(app.got) < len(events())  # batched
    print(f"{len(events())} messages in {len(app.got)} POSTs")


async def test_sidecar_and_java_consumer_split_the_queues_with_no_overlap_and_no_gap(
    namesrv_addr: str, tmp_path: Path
) -> None:
    topic = await new_topic(namesrv_addr, "RsSubSplit")
    group = f"{topic}_g"
    java = await java_probe.start("consume", namesrv_addr, topic, group)
    try:
        with push_app() as app:
            async with sidecar(tmp_path, namesrv_addr, topic, group, app) as service:
                assert service.subscriptions is not None and java.stdout is not None
                consumer = service.subscriptions.consumers["orders"]
                java_queues: set[str] = set()
                every = {f"{b}:{q}" for b in ("broker-a", "broker-b") for q in range(4)}

                def ours() -> set[str]:
                    return {f"{mq.broker_name}:{mq.queue_id}" for mq in consumer.queues if mq.topic == topic}

                async with asyncio.timeout(WAIT_S):
                    # Converged: both sides hold queues, together all of them, none twice.
                    while not (
                        java_queues and ours() and java_queues | ours() == every and not java_queues & ours()
                    ):
                        line = (await java.stdout.readline()).decode().strip()
                        assert line, "the Java consumer exited"
                        if line.startswith("ALLOC"):
                            java_queues = set(filter(None, line.removeprefix("ALLOC").strip().split(",")))
                assert len(java_queues) == len(ours()) == 4  # AVG over two members: half each
    finally:
        await java_probe.stop(java)


WINDOW = 8


async def test_sigkill_mid_stream_every_message_at_least_once_after_restart(
    namesrv_addr: str, tmp_path: Path
) -> None:
    topic = await new_topic(namesrv_addr, "RsSubKill")
    sent = await java_probe.produce(namesrv_addr, topic, 400)
    # The app takes 5 ms per message, 4 at a time: the kill lands while most are still to come.
    with push_app(lambda n: (200, {}, 0.005)) as app:
        spec = {"name": "orders", "topic": topic, "group": f"{topic}_g", "endpoint": app.url}
        env = {
            **os.environ,
            "ROCKSIDECAR_NAMESRV": namesrv_addr,
            "ROCKSIDECAR_DATA_DIR": str(tmp_path / "data"),
            "ROCKSIDECAR_HTTP_ADDR": "127.0.0.1:0",
            "ROCKSIDECAR_GRPC_ADDR": "127.0.0.1:0",
            "ROCKSIDECAR_SUBSCRIPTIONS": json.dumps(
                [{**spec, "consume_from": "first", "concurrency": 4, "commit_window": WINDOW}]
            ),
        }
        serve = [str(Path(sys.executable).with_name("rocksidecar")), "serve"]
        first = await asyncio.create_subprocess_exec(*serve, env=env, stderr=asyncio.subprocess.DEVNULL)
        try:
            await app.until(lambda got: len(got) >= 100, WAIT_S)
            # Kill once the broker holds some committed progress (the sidecar persists every 0.5 s):
            # otherwise everything delivered so far is due again, which proves nothing.
            for _ in range(int(WAIT_S / 0.05)):
                if await _committed(namesrv_addr, topic, spec["group"]) > 0:
                    break
                await asyncio.sleep(0.05)  # polling the broker: it has no event to await
            else:
                raise AssertionError("the sidecar never committed an offset")
        finally:
            first.kill()  # SIGKILL: no offset persisted on the way out
            await first.wait()
        at_kill = len(app.got)
        second = await asyncio.create_subprocess_exec(*serve, env=env, stderr=asyncio.subprocess.DEVNULL)
        try:
            await app.until(lambda got: {g.headers["ce-id"] for g in got} >= set(sent), WAIT_S)
        finally:
            second.terminate()
            await second.wait()
    ids = [g.headers["ce-id"] for g in app.got]
    duplicates = len(ids) - len(set(ids))
    print(f"received before the kill {at_kill}, in all {len(ids)}, duplicates {duplicates}")
    assert set(ids) == set(sent)
    assert all(g.body == sent[g.headers["ce-id"]] for g in app.got)
    # The commit window: no queue had more than WINDOW messages handed out beyond the offset the broker
    # acknowledged, so no more than that per queue comes again (8 queues: 2 brokers x 4).
    assert duplicates <= WINDOW * 8
    assert duplicates < at_kill


async def test_orderly_keeps_per_key_order_across_a_rebalance(namesrv_addr: str, tmp_path: Path) -> None:
    # One key per queue (as a sharding key maps to one queue), 60 messages each, sent before anyone
    # consumes; a second sidecar joins the group midway and takes half the queues.
    client = RemotingClient()
    try:
        ns, api = NameServerClient(client, namesrv_addr), BrokerApi(client)
        topic = unique_topic("RsSubOrder")
        route = await create_topic_everywhere(ns, api, topic)
        for mq in route.publish_queues(topic):
            for seq in range(60):
                msg = Message(topic, f"{mq.broker_name}-{mq.queue_id}/{seq}".encode(), id=new_uniq_id())
                await api.send(route.master_addr(mq.broker_name) or "", mq, msg, msg.id or "", 10.0)
    finally:
        await client.close()
    group = f"{topic}_g"
    with push_app(lambda n: (200, {}, 0.01)) as app:
        sub = SubscriptionSpec("orders", topic, group, app.url, mode="orderly", consume_from="first")
        first = Service(settings_for(tmp_path / "a", namesrv=(namesrv_addr,), subscriptions=(sub,)))
        second = Service(settings_for(tmp_path / "b", namesrv=(namesrv_addr,), subscriptions=(sub,)))
        await first.start()
        try:
            await app.until(lambda got: len(got) >= 100, WAIT_S)
            await second.start()
            try:
                assert second.subscriptions is not None
                joined = second.subscriptions.consumers["orders"]
                async with asyncio.timeout(WAIT_S):
                    while not any(mq.topic == topic for mq in joined.queues):
                        await joined.stats.reach("rebalances_done", joined.stats["rebalances_done"] + 1)
                await app.until(lambda got: len({g.body for g in got}) >= 8 * 60, WAIT_S)
                assert joined.stats["consume_ok"] > 0  # the newcomer did consume what it took over
            finally:
                await second.stop()
        finally:
            await first.stop()
    by_key: dict[str, list[int]] = {}
    for g in app.got:
        key, seq = g.body.decode().split("/")
        by_key.setdefault(key, []).append(int(seq))
    assert len(by_key) == 8
    moved = 0
    for key, seqs in by_key.items():
        first_seen = list(dict.fromkeys(seqs))  # order of first deliveries
        assert first_seen == list(range(60)), key  # never a later message before an earlier one
        moved += len(seqs) != len(first_seen)
    print(f"deliveries {len(app.got)}, keys redelivered after the move: {moved}")

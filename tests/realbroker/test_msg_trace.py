"""RocketMQ message trace on real RocketMQ 4.9.4 (brokers with traceTopicEnable=true): a message sent
through the sidecar and delivered by its subscription shows its Pub record and its SubBefore/SubAfter
records (one Sub row) in `mqadmin queryMsgTraceById`, whether the subscription POSTs it or a gRPC
stream takes it; a Java DefaultMQPushConsumer with enableMsgTrace on
reads a sidecar-sent message and its Sub record lands in the same trace as the sidecar's Pub. Skipped
unless ROCKSIDECAR_TEST_NAMESRV is set."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.config import Settings
from rocksidecar.app.service import Service
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from tests.app.conftest import settings_for
from tests.app.push_app import push_app
from tests.realbroker import java_probe
from tests.realbroker.conftest import new_topic

WAIT_S = 90.0
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


async def _query_trace(broker_ctl: Path, namesrv: str, msg_id: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(broker_ctl), "java", "org.apache.rocketmq.tools.command.MQAdminStartup", "queryMsgTraceById",
        "-n", namesrv, "-i", msg_id,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(WAIT_S):
        out, _ = await proc.communicate()
    return out.decode(errors="replace")


async def _send_one(
    settings: Settings, topic: str, then: Callable[[Service, str], Awaitable[None]] | None = None
) -> str:
    """The id of one message sent through a sidecar; ``then(sidecar, id)`` runs before the sidecar stops
    (its stop flushes the last trace records)."""
    service = Service(settings)
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http.port}") as http:
            r = await http.post("/v1/messages", json={"topic": topic, "body": "traced", "keys": ["tk1"]})
        assert r.status_code == 200, r.text
        msg_id: str = r.json()["id"]
        if then is not None:
            await then(service, msg_id)
    finally:
        await service.stop()
    return msg_id


async def _trace_until(broker_ctl: Path, namesrv: str, msg_id: str, *kinds: str) -> str:
    """queryMsgTraceById's output once it shows rows of every kind (the trace messages are indexed by
    key asynchronously on the broker), or the last output after 30 tries."""
    text = ""
    for _ in range(30):
        text = await _query_trace(broker_ctl, namesrv, msg_id)
        if all(_rows(text, kind) for kind in kinds):
            break
        await asyncio.sleep(1)
    return text


def _rows(text: str, kind: str) -> list[list[str]]:
    """The distinct rows of one kind (Pub, Sub) that queryMsgTraceById printed."""
    rows = {tuple(line.split()) for line in text.splitlines() if line.split()[:1] == [kind]}
    return [list(r) for r in sorted(rows)]


@pytest.mark.timeout(360)  # up to 90 s for the delivery, then mqadmin (a JVM per try) until indexed
async def test_mqadmin_shows_the_sidecar_s_send_and_consume_records(
    namesrv_addr: str, broker_ctl: Path, tmp_path: Path
) -> None:
    topic = await new_topic(namesrv_addr, "traceMsgTrace")
    group = f"{topic}_g"
    with push_app() as app:
        sub = SubscriptionSpec("traced", topic, group, app.url, consume_from="first")
        settings = settings_for(tmp_path, namesrv=(namesrv_addr,), subscriptions=(sub,), msg_trace=True,
                                producer_group="traceProducer")  # fmt: skip

        async def delivered(_: Service, msg_id: str) -> None:
            await app.until(lambda got: any(g.headers["ce-id"] == msg_id for g in got), WAIT_S)

        msg_id = await _send_one(settings, topic, delivered)
    text = await _trace_until(broker_ctl, namesrv_addr, msg_id, "Pub", "Sub")
    # mqadmin merges a SubBefore/SubAfter pair into one Sub row
    assert [r[:2] for r in _rows(text, "Pub")] == [["Pub", "traceProducer"]], text[-3000:]
    assert [(r[1], r[-1]) for r in _rows(text, "Sub")] == [(group, "success")], text[-3000:]
    print(text)


@pytest.mark.timeout(360)
async def test_mqadmin_shows_the_consume_records_of_a_grpc_subscription(
    namesrv_addr: str, broker_ctl: Path, tmp_path: Path
) -> None:
    """A gRPC subscription's delivery, acknowledged by the app, writes its SubBefore/SubAfter too."""
    topic = await new_topic(namesrv_addr, "traceGrpcSub")
    group = f"{topic}_g"
    sub = SubscriptionSpec("traced", topic, group, "grpc", consume_from="first")
    settings = settings_for(tmp_path, namesrv=(namesrv_addr,), subscriptions=(sub,), msg_trace=True,
                            producer_group="traceGrpcProducer")  # fmt: skip

    async def acked(service: Service, msg_id: str) -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc.port}") as channel:
            stub = pb_grpc.SidecarStub(channel)
            call = stub.Subscribe(pb.SubscribeRequest(subscription="traced"))
            async with asyncio.timeout(WAIT_S):
                while (d := await call.read()).id != msg_id:
                    await stub.Ack(pb.AckRequest(delivery_id=d.delivery_id, outcome=pb.ACK_OK))
            await stub.Ack(pb.AckRequest(delivery_id=d.delivery_id, outcome=pb.ACK_OK))
            call.cancel()

    msg_id = await _send_one(settings, topic, acked)
    text = await _trace_until(broker_ctl, namesrv_addr, msg_id, "Pub", "Sub")
    assert [r[:2] for r in _rows(text, "Pub")] == [["Pub", "traceGrpcProducer"]], text[-3000:]
    assert [(r[1], r[-1]) for r in _rows(text, "Sub")] == [(group, "success")], text[-3000:]


async def _consumed_by_java(proc: asyncio.subprocess.Process, msg_id: str) -> None:
    """Wait for the Java probe's ``MSG <msgId> ...`` line for ``msg_id``."""
    assert proc.stdout is not None
    async with asyncio.timeout(WAIT_S):
        while True:
            line = (await proc.stdout.readline()).decode()
            assert line, "the Java consumer ended before it consumed the message"
            if line.startswith(f"MSG {msg_id} "):
                return


@pytest.mark.timeout(420)  # as above, plus the Java consumer's start-up and shutdown
async def test_a_java_consumer_with_msg_trace_joins_the_sidecar_s_trace(
    namesrv_addr: str, broker_ctl: Path, tmp_path: Path
) -> None:
    topic = await new_topic(namesrv_addr, "traceJavaSub")
    group = f"{topic}_jg"
    java = await java_probe.start("traced", namesrv_addr, topic, group, TRACE_TOPIC)
    try:
        settings = settings_for(tmp_path, namesrv=(namesrv_addr,), msg_trace=True,
                                producer_group="traceJavaProducer")  # fmt: skip
        msg_id = await _send_one(settings, topic)
        await _consumed_by_java(java, msg_id)
        # Queried while the Java consumer still runs: 4.9.4's AsyncTraceDispatcher hands its batch to a
        # sending pool and its shutdown does not wait for that send, so a consumer stopped right after
        # consuming may never write its Sub row.
        text = await _trace_until(broker_ctl, namesrv_addr, msg_id, "Pub", "Sub")
    finally:
        await java_probe.stop(java)
    assert [r[:2] for r in _rows(text, "Pub")] == [["Pub", "traceJavaProducer"]], text[-3000:]
    assert [(r[1], r[-1]) for r in _rows(text, "Sub")] == [(group, "success")], text[-3000:]
    print(text)

"""A sidecar subscription on devbroker: what the sidecar's API accepted reaches the app as a CloudEvent;
the app's answer decides (2xx done, 429 later, other status or timeout: sent back and delivered again);
metrics show deliveries, lag and owned queues."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.service import COLUMN_FAMILIES, Service
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, NameServerClient, RemotingClient
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.producer import Producer, ProducerConfig
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.storage.rocks import RocksKV
from tests.app.conftest import settings_for
from tests.app.push_app import Answer, PushApp, push_app


@dataclasses.dataclass
class Rig:
    cluster: DevCluster
    service: Service
    api: httpx.AsyncClient
    app: PushApp

    async def consumed(self, stat: str, count: int) -> None:
        """Wait until the subscription's consumer counted ``count`` (its outcome hooks ran by then)."""
        assert self.service.subscriptions is not None
        async with asyncio.timeout(15):
            await self.service.subscriptions.consumers["orders"].stats.reach(stat, count)


@asynccontextmanager
async def rig(
    tmp_path: Path, topic: str, answer: Callable[[int], Answer] | None = None, **spec: Any
) -> AsyncIterator[Rig]:
    async with DevCluster(brokers=2, queues=2) as cluster:
        for broker in cluster.brokers.values():
            broker.topics.ensure(topic, 2)
        with push_app(answer) as app:
            sub = SubscriptionSpec(
                **{
                    "name": "orders",
                    "topic": topic,
                    "group": f"g-{topic}",
                    "endpoint": app.url,
                    "consume_from": "first",
                    **spec,
                }
            )
            settings = settings_for(tmp_path, namesrv=(cluster.namesrv_addr,), subscriptions=(sub,))
            (tmp_path / "data").mkdir(exist_ok=True)
            kv = RocksKV.open(tmp_path / "data" / "store", COLUMN_FAMILIES)
            service = Service(settings, kv=kv)
            await service.start()
            try:
                async with httpx.AsyncClient(
                    base_url=f"http://127.0.0.1:{service.http.port}", timeout=30
                ) as api:
                    yield Rig(cluster, service, api, app)
            finally:
                await service.stop()


async def send(api: httpx.AsyncClient, topic: str, body: bytes, **extra: Any) -> str:
    resp = await api.post(
        "/v1/messages", json={"topic": topic, "bodyBase64": base64.b64encode(body).decode(), **extra}
    )
    assert resp.status_code < 300, resp.text
    return str(resp.json()["id"])


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text ``text``."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # the client sorts labels
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head == (f"{name}{{{want}}}" if labels else name):
            return float(value)
    raise AssertionError(f"no sample {name}{{{want}}}")


async def test_accepted_messages_reach_the_app_as_cloudevents(tmp_path: Path) -> None:
    async with rig(tmp_path, "SubPush") as r:
        bodies = [bytes([i, 0, 255]) + b"payload" for i in range(6)]
        ids = [
            await send(r.api, "SubPush", b, tags="TagA", keys=["k-" + str(i)], properties={"region": "eu"})
            for i, b in enumerate(bodies)
        ]
        await r.app.until(lambda got: len(got) >= 6)
        by_id = {g.headers["ce-id"]: g for g in r.app.got}
        assert sorted(by_id) == sorted(ids)  # ce-id is the id the sidecar answered, each once
        for msg_id, body in zip(ids, bodies, strict=True):
            got = by_id[msg_id]
            assert got.body == body and got.path == "/events"
            assert got.headers["ce-specversion"] == "1.0" and got.headers["ce-type"]
            assert got.headers["ce-rocketmqtags"] == "TagA" and got.headers["ce-region"] == "eu"
            assert got.headers["ce-rocketmqreconsumetimes"] == "0"
        await r.consumed("consume_ok", 6)
        await r.service.sample_lag()
        text = (await r.api.get("/metrics")).text
        assert (
            metric(text, "rocksidecar_subscription_deliveries_total", subscription="orders", outcome="ok")
            == 6
        )
        # 2 brokers x 2 queues of the topic, and apart from them the group's %RETRY% queue on each broker
        assert metric(text, "rocksidecar_consumer_queues_owned", subscription="orders", kind="topic") == 4
        assert metric(text, "rocksidecar_consumer_queues_owned", subscription="orders", kind="retry") == 2
        assert metric(text, "rocksidecar_consumer_rebalances", subscription="orders") >= 1
        topic_rows = [row for row in r.service.lags if row.topic == "SubPush"]
        assert sorted(row.max_offset for row in topic_rows) != [0, 0, 0, 0]  # messages were stored
        assert [row.lag for row in topic_rows] == [0, 0, 0, 0]  # and all consumed
        for row in topic_rows:
            labels = {
                "broker": row.broker,
                "queue": str(row.queue_id),
                "subscription": "orders",
                "topic": "SubPush",
            }
            assert metric(text, "rocksidecar_consumer_lag", **labels) == 0
            assert metric(text, "rocksidecar_consumer_in_flight", **labels) == 0
        page = (await r.api.get("/ui")).text
        assert "Consumer lag" in page and 'data-k="lag-total">0<' in page
        assert page.count('data-k="lag-orders-') == len(r.service.lags) == 6


async def test_a_message_born_past_rfc_3339_s_years_reaches_the_app_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer's born timestamp is its own 64-bit number. One of 2**62 failed every delivery
    (CloudEvents' time: "year is out of range") and went back to the broker until it was dead-lettered:
    now it is delivered once, at once, without the (optional) time."""
    async with rig(tmp_path, "SubBorn") as r:
        client = RemotingClient()
        producer = Producer(
            NameServerClient(client, r.cluster.namesrv_addr), BrokerApi(client), ProducerConfig()
        )
        await producer.start()
        try:
            with monkeypatch.context() as patched:  # the producer's clock, as it writes bornTimestamp
                patched.setattr("rocksidecar.rmq.broker.time_ns", lambda: 2**62 * 1_000_000)
                await producer.send(Message("SubBorn", b"born in year 146140482"))
        finally:
            await producer.close()
            await client.close()
        await r.consumed("consume_ok", 1)
        [got] = r.app.got
        assert got.body == b"born in year 146140482" and "ce-time" not in got.headers
        assert got.headers["ce-rocketmqreconsumetimes"] == "0"


async def test_no_subscriptions_no_consumer_section(tmp_path: Path) -> None:
    async with DevCluster(brokers=1) as cluster:
        service = Service(settings_for(tmp_path, namesrv=(cluster.namesrv_addr,)))
        await service.start()
        try:
            assert service.subscriptions is None
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http.port}") as api:
                page = (await api.get("/ui")).text
                metrics = (await api.get("/metrics")).text
            assert "<h2>Brokers</h2>" in page and "Consumer lag" not in page
            assert "rocksidecar_consumer_lag" not in metrics
        finally:
            await service.stop()


async def test_failed_answer_is_sent_back_and_delivered_again(tmp_path: Path) -> None:
    # The first answer is 500: the broker gets it back and offers it again, counted as a reconsume.
    async with rig(tmp_path, "SubFail", answer=lambda n: (500 if n == 0 else 200, {}, 0.0)) as r:
        msg_id = await send(r.api, "SubFail", b"once")
        await r.app.until(lambda got: len(got) >= 2)
        first, second = r.app.got[:2]
        assert first.headers["ce-id"] == second.headers["ce-id"] == msg_id
        assert (first.headers["ce-rocketmqreconsumetimes"], second.headers["ce-rocketmqreconsumetimes"]) == (
            "0",
            "1",
        )
        assert second.body == b"once"
        await r.consumed("consume_ok", 1)
        text = (await r.api.get("/metrics")).text
        assert (
            metric(text, "rocksidecar_subscription_deliveries_total", subscription="orders", outcome="failed")
            == 1
        )


async def test_timeout_is_a_failure_and_sent_back(tmp_path: Path) -> None:
    # The app holds its first answer for 30 s; the subscription's timeout is 0.3 s.
    async with rig(
        tmp_path, "SubSlow", answer=lambda n: (200, {}, 30.0 if n == 0 else 0.0), timeout_s=0.3
    ) as r:
        msg_id = await send(r.api, "SubSlow", b"slow")
        # the slow answer is recorded only when released, so wait for the redelivery first
        await r.app.until(lambda got: any(g.headers["ce-rocketmqreconsumetimes"] == "1" for g in got))
        again = next(g for g in r.app.got if g.headers["ce-rocketmqreconsumetimes"] == "1")
        assert again.headers["ce-id"] == msg_id
        await r.consumed("consume_ok", 1)
        text = (await r.api.get("/metrics")).text
        assert (
            metric(text, "rocksidecar_subscription_deliveries_total", subscription="orders", outcome="error")
            == 1
        )


async def test_429_is_retried_in_place_without_a_reconsume(tmp_path: Path) -> None:
    async with rig(
        tmp_path, "SubBusy", answer=lambda n: (429, {"Retry-After": "0"}, 0.0) if n < 2 else (200, {}, 0.0)
    ) as r:
        msg_id = await send(r.api, "SubBusy", b"busy")
        await r.app.until(lambda got: len(got) >= 3)
        assert [g.headers["ce-id"] for g in r.app.got] == [msg_id] * 3
        await r.consumed("consume_ok", 1)
        assert {g.headers["ce-rocketmqreconsumetimes"] for g in r.app.got} == {"0"}  # never sent back
        text = (await r.api.get("/metrics")).text
        assert (
            metric(text, "rocksidecar_subscription_deliveries_total", subscription="orders", outcome="later")
            == 2
        )
        assert (
            metric(text, "rocksidecar_subscription_deliveries_total", subscription="orders", outcome="ok")
            == 1
        )


# --- gRPC Subscribe / Ack -------------------------------------------------------------------------
def stub_for(r: Rig) -> tuple[grpc.aio.Channel, pb_grpc.SidecarStub]:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{r.service.grpc.port}")
    return channel, pb_grpc.SidecarStub(channel)


async def test_grpc_subscribe_delivers_and_ack_completes(tmp_path: Path) -> None:
    async with rig(tmp_path, "SubGrpc", endpoint="grpc") as r:
        channel, stub = stub_for(r)
        async with channel:
            call = stub.Subscribe(pb.SubscribeRequest(subscription="orders"))
            msg_id = await send(r.api, "SubGrpc", b"\x01grpc", tags="T1", properties={"region": "eu"})
            d = await call.read()
            assert (d.id, d.topic, d.body, d.tags, d.reconsume_times) == (
                msg_id,
                "SubGrpc",
                b"\x01grpc",
                "T1",
                0,
            )
            assert dict(d.properties) == {"region": "eu"} and d.delivery_id
            await stub.Ack(pb.AckRequest(delivery_id=d.delivery_id, outcome=pb.ACK_OK))
            await r.consumed("consume_ok", 1)
            with pytest.raises(grpc.aio.AioRpcError) as err:  # answered already
                await stub.Ack(pb.AckRequest(delivery_id=d.delivery_id, outcome=pb.ACK_OK))
            assert err.value.code() is grpc.StatusCode.NOT_FOUND
            call.cancel()


async def test_grpc_unacked_delivery_is_sent_back_after_its_timeout(tmp_path: Path) -> None:
    async with rig(tmp_path, "SubGrpcTo", endpoint="grpc", timeout_s=0.3) as r:
        channel, stub = stub_for(r)
        async with channel:
            call = stub.Subscribe(pb.SubscribeRequest(subscription="orders"))
            msg_id = await send(r.api, "SubGrpcTo", b"late")
            first = await call.read()  # never acked
            again = await call.read()  # the broker's redelivery from the retry topic
            assert first.id == again.id == msg_id and first.delivery_id != again.delivery_id
            assert (first.reconsume_times, again.reconsume_times) == (0, 1)
            await stub.Ack(pb.AckRequest(delivery_id=again.delivery_id, outcome=pb.ACK_OK))
            await r.consumed("consume_ok", 1)
            assert r.service.subscriptions is not None
            assert r.service.subscriptions.consumers["orders"].stats["consume_failed"] == 1
            call.cancel()


async def test_grpc_stream_that_ends_hands_its_deliveries_to_another(tmp_path: Path) -> None:
    async with rig(tmp_path, "SubGrpcLost", endpoint="grpc") as r:
        channel, stub = stub_for(r)
        async with channel:
            first_call = stub.Subscribe(pb.SubscribeRequest(subscription="orders"))
            msg_id = await send(r.api, "SubGrpcLost", b"x")
            d1 = await first_call.read()
            first_call.cancel()  # the app instance goes away without answering
            second = stub.Subscribe(pb.SubscribeRequest(subscription="orders"))
            d2 = await second.read()
            assert d2.id == d1.id == msg_id and d2.reconsume_times == 0  # not counted as a failure
            await stub.Ack(pb.AckRequest(delivery_id=d2.delivery_id, outcome=pb.ACK_LATER, retry_after_ms=1))
            d3 = await second.read()  # LATER: offered again, still not a reconsume
            assert d3.id == msg_id and d3.reconsume_times == 0
            await stub.Ack(pb.AckRequest(delivery_id=d3.delivery_id, outcome=pb.ACK_OK))
            await r.consumed("consume_ok", 1)
            second.cancel()


async def test_grpc_unknown_subscription_is_not_found(tmp_path: Path) -> None:
    async with rig(tmp_path, "SubGrpcNf", endpoint="grpc") as r:
        channel, stub = stub_for(r)
        async with channel:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Subscribe(pb.SubscribeRequest(subscription="nope")).read()
            assert err.value.code() is grpc.StatusCode.NOT_FOUND and "nope" in (err.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Ack(pb.AckRequest(delivery_id="d-unknown", outcome=pb.ACK_OK))
            assert err.value.code() is grpc.StatusCode.NOT_FOUND


async def test_a_bulk_subscription_gets_batches_and_its_statuses_apply_per_message(tmp_path: Path) -> None:
    import orjson

    def statuses(body: bytes) -> bytes:
        # DROP what carries "drop", RETRY what carries "retry" the first time it comes, SUCCESS the rest
        out = []
        for e in orjson.loads(body)["entries"]:
            data = base64.b64decode(e["event"]["data_base64"])
            again = int(e["event"]["rocketmqreconsumetimes"]) > 0
            status = "DROP" if b"drop" in data else "RETRY" if b"retry" in data and not again else "SUCCESS"
            out.append({"entryId": e["entryId"], "status": status})
        return orjson.dumps({"statuses": out})

    ok = lambda _n: (200, {"content-type": "application/json"}, 0.0)  # noqa: E731  # 204 has no body
    async with rig(tmp_path, "SubBulk", ok, bulk=True, bulk_max_messages=32, commit_window=0) as r:
        r.app.respond = statuses
        bodies = [b"ok-%d" % i for i in range(30)] + [b"retry-1", b"drop-1"]
        items = [{"topic": "SubBulk", "bodyBase64": base64.b64encode(b).decode()} for b in bodies]
        resp = await r.api.post("/v1/messages:batch", json={"messages": items})  # one queue, one pull
        assert resp.status_code < 300, resp.text
        await r.consumed("consume_ok", 31)  # 30 ok + the retried one, redelivered and taken
        await r.consumed("dead_lettered", 1)
        entries = [e for g in r.app.got for e in orjson.loads(g.body)["entries"]]
        got = [base64.b64decode(e["event"]["data_base64"]) for e in entries]
        assert set(got) == set(bodies)
        assert got.count(b"retry-1") == 2 and got.count(b"drop-1") == 1  # DROP is never offered again
        assert len(r.app.got) < len(entries)  # batches, not one POST per message
        assert {g.headers["content-type"] for g in r.app.got} == {"application/json"}
        dead = [m.body for b in r.cluster.brokers.values() for m in b.messages("%DLQ%g-SubBulk")]
        assert dead == [b"drop-1"]  # dropped by the app, kept in the group's DLQ
        text = (await r.api.get("/metrics")).text
        sub = {"subscription": "orders"}
        assert metric(text, "rocksidecar_subscription_deliveries_total", **sub, outcome="dropped") == 1
        assert metric(text, "rocksidecar_subscription_deliveries_total", **sub, outcome="failed") == 1


async def test_a_body_too_deeply_nested_to_write_does_not_fail_its_bulk_batch(tmp_path: Path) -> None:
    """One message whose JSON body nests deeper than orjson writes (255..1024 levels; it reads them) made
    its whole batch fail before the POST: all sent back, the app saw none of them."""
    import orjson

    def statuses(body: bytes) -> bytes:
        entries = orjson.loads(body)["entries"]
        return orjson.dumps({"statuses": [{"entryId": e["entryId"], "status": "SUCCESS"} for e in entries]})

    ok = lambda _n: (200, {"content-type": "application/json"}, 0.0)  # noqa: E731  # 204 has no body
    async with rig(tmp_path, "SubDeep", ok, bulk=True, bulk_max_messages=32, commit_window=0) as r:
        r.app.respond = statuses
        deep = b"[" * 300 + b"]" * 300  # valid JSON
        items = [
            {"topic": "SubDeep", "bodyBase64": base64.b64encode(b"ok-%d" % i).decode()} for i in range(5)
        ]
        items.append(
            {
                "topic": "SubDeep",
                "bodyBase64": base64.b64encode(deep).decode(),
                "properties": {"content-type": "application/json"},
            }
        )
        resp = await r.api.post("/v1/messages:batch", json={"messages": items})  # one queue, one pull
        assert resp.status_code < 300, resp.text
        await r.consumed("consume_ok", 6)
        events = [e["event"] for g in r.app.got for e in orjson.loads(g.body)["entries"]]
        got = sorted(base64.b64decode(e["data_base64"]) for e in events)
        assert got == sorted([b"ok-%d" % i for i in range(5)] + [deep])  # each offered once, byte-exact
        assert r.service.subscriptions is not None
        assert r.service.subscriptions.consumers["orders"].stats["consume_failed"] == 0


async def test_grpc_a_delivery_that_ends_every_stream_is_sent_back_as_a_failure(tmp_path: Path) -> None:
    """Audit (session 13): a message with the largest body the sidecar accepts (4 MiB) makes a Delivery
    over a default grpc client's receive limit, so every stream it is written to ends; a lost delivery
    was handed on without counting a failure, so it went round the streams for ever, never sent back nor
    dead-lettered. Now the third stream in a row that ends without answering it counts as a failure."""
    async with rig(tmp_path, "SubGrpcHuge", endpoint="grpc") as r:
        channel, stub = stub_for(r)
        roomy = grpc.aio.insecure_channel(
            f"127.0.0.1:{r.service.grpc.port}", options=[("grpc.max_receive_message_length", 8 << 20)]
        )
        async with channel, roomy:
            msg_id = await send(r.api, "SubGrpcHuge", b"x" * (4 << 20))
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Subscribe(pb.SubscribeRequest(subscription="orders")).read()
                assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            call = pb_grpc.SidecarStub(roomy).Subscribe(pb.SubscribeRequest(subscription="orders"))
            d = await call.read()
            assert (d.id, len(d.body), d.reconsume_times) == (msg_id, 4 << 20, 1)  # sent back once
            await stub.Ack(pb.AckRequest(delivery_id=d.delivery_id, outcome=pb.ACK_OK))
            await r.consumed("consume_ok", 1)
            assert r.service.subscriptions is not None
            assert r.service.subscriptions.consumers["orders"].stats["consume_failed"] == 1
            call.cancel()


async def test_an_operators_resend_and_reset_reach_the_app_again(tmp_path: Path) -> None:
    """What an operator does to a group with the Dashboard or mqadmin works on the sidecar's: a stored
    message resent to the member (CONSUME_MESSAGE_DIRECTLY) is delivered to the app once more; a reset
    of the group's offsets to the start (resetOffsetByTime) delivers everything again."""
    async with rig(tmp_path, "SubOps") as r:
        msg_id = await send(r.api, "SubOps", b"again and again")
        await r.consumed("consume_ok", 1)
        assert r.service.subscriptions is not None
        consumer = r.service.subscriptions.consumers["orders"]
        [(name, stored)] = [(n, m) for n, b in r.cluster.brokers.items() for m in b.messages("SubOps")]
        client = RemotingClient()
        try:
            addr = r.cluster.brokers[name].addr
            fields = {
                "consumerGroup": "g-SubOps",
                "clientId": consumer.client_id,
                "msgId": stored.offset_msg_id,
            }
            resend = await client.invoke(
                addr, RemotingCommand(RequestCode.CONSUME_MESSAGE_DIRECTLY, fields), 15
            )
            assert resend.code == ResponseCode.SUCCESS and b'"consumeResult":"CR_SUCCESS"' in resend.body
            await r.app.until(lambda got: len(got) >= 2)
            await consumer.persist_offsets()
            fields = {"topic": "SubOps", "group": "g-SubOps", "timestamp": "0", "isForce": "true"}
            reset = await client.invoke(
                addr, RemotingCommand(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields), 5
            )
            assert reset.code == ResponseCode.SUCCESS, reset.remark
            await r.app.until(lambda got: len(got) >= 3)
        finally:
            await client.close()
        assert [g.headers["ce-id"] for g in r.app.got] == [msg_id] * 3
        assert [g.body for g in r.app.got] == [b"again and again"] * 3
        text = (await r.api.get("/metrics")).text
        actions = "rocksidecar_consumer_operator_actions_total"
        assert metric(text, actions, subscription="orders", action="resend") == 1
        assert metric(text, actions, subscription="orders", action="reset") == 2  # the broker's 2 queues

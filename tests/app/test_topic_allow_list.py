"""ROCKSIDECAR_TOPICS as an allow-list (issue 27 item 15): a topic outside it is refused on every send
path, naming ``topic``, before anything is stored; unset, any valid topic goes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from rocksidecar.app import config
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.request import Limits, MessageSpec, RequestError, prepare
from rocksidecar.app.topic_allow import TopicAllowList
from tests.app.conftest import Stack

ALLOWED = ("Orders", "audit-*", "*-events")


@pytest.mark.parametrize(
    ("topic", "ok"),
    [
        ("Orders", True),
        ("audit-", True),
        ("audit-eu", True),
        ("billing-events", True),
        ("Order", False),
        ("Orders2", False),
        ("xaudit-eu", False),
        ("audit", False),
        ("billing-events-x", False),
    ],
)
def test_names_and_star_patterns(topic: str, ok: bool) -> None:
    assert TopicAllowList.of(ALLOWED).allows(topic) is ok


def test_setting_is_parsed_bounded_and_its_names_are_preloaded() -> None:
    s = config.load({"ROCKSIDECAR_TOPICS": "Orders, audit-*"}, require_namesrv=False)
    assert s.topics == ("Orders", "audit-*") and s.preloaded_topics == ("Orders",)
    for bad in ("Orders,audit-?", "a b", "x" * 128, ",".join(f"t{i}" for i in range(1001))):
        with pytest.raises(config.ConfigError, match=r"^ROCKSIDECAR_TOPICS: "):
            config.load({"ROCKSIDECAR_TOPICS": bad}, require_namesrv=False)


def test_prepare_refuses_other_topics_and_unset_allows_any() -> None:
    limits = Limits(max_body_bytes=64, max_delay_ms=10**9, topics=TopicAllowList.of(ALLOWED))
    assert prepare(MessageSpec(topic="audit-1", body="x"), limits, 0).message.topic == "audit-1"
    with pytest.raises(RequestError) as err:
        prepare(MessageSpec(topic="Ordres", body="x"), limits, 0)
    assert err.value.field == "topic" and err.value.status == 400 and "Ordres" in err.value.detail
    anything = Limits(max_body_bytes=64, max_delay_ms=10**9)
    assert prepare(MessageSpec(topic="Ordres", body="x"), anything, 0).message.topic == "Ordres"


@pytest.fixture
async def stack(make_stack: Callable[..., Any]) -> AsyncIterator[Stack]:
    async with make_stack(topics=ALLOWED) as s:
        yield s


def _nothing_kept(stack: Stack, topic: str) -> None:
    assert not stack.stored(topic)
    assert stack.service.retry.stats().pending == 0 and stack.service.delay.stats().pending == 0


@pytest.mark.parametrize("extra", [{}, {"delayMs": 60_000}])
async def test_http_single_refuses_with_problem_naming_topic(stack: Stack, extra: dict[str, Any]) -> None:
    r = await stack.http.post("/v1/messages", json={"topic": "Ordres", "body": "x", **extra})
    assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["field"] == "topic"
    _nothing_kept(stack, "Ordres")
    ok = await stack.http.post("/v1/messages", json={"topic": "Orders", "body": "x"})
    assert ok.status_code == 200 and [m.body for m in stack.stored("Orders")] == [b"x"]


async def test_http_batch_refuses_per_item(stack: Stack) -> None:
    msgs = [
        {"topic": "audit-1", "body": "a"},
        {"topic": "Ordres", "body": "b"},
        {"topic": "Ordres", "body": "c", "delayMs": 60_000},
    ]
    r = await stack.http.post("/v1/messages:batch", json={"messages": msgs})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["SENT", "REJECTED", "REJECTED"]
    assert [x["error"]["field"] for x in results[1:]] == ["messages[1].topic", "messages[2].topic"]
    assert [m.body for m in stack.stored("audit-1")] == [b"a"]
    _nothing_kept(stack, "Ordres")


async def test_grpc_send_and_batch_refuse(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        stub = pb_grpc.SidecarStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Send(pb.SendRequest(message=pb.Message(topic="Ordres", body="x")))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(info.value.trailing_metadata() or ())["field"] == "topic"
        batch = await stub.SendBatch(
            pb.SendBatchRequest(
                messages=[pb.Message(topic="x-events", body="ok"), pb.Message(topic="Ordres", body="no")]
            )
        )
    ok, bad = batch.results
    assert ok.HasField("result") and bad.error.field == "messages[1].topic"
    assert [m.body for m in stack.stored("x-events")] == [b"ok"]
    _nothing_kept(stack, "Ordres")

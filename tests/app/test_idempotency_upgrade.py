"""Idempotency-Key answers kept by an earlier version, replayed by today's code within the window.

Moved here from the session-31 reviews (tests/storage/test_zz_review_upgrade.py, its tests 2 and 3, and
tests/app/test_zz_review_residue.py), which failed on the code before: an HTTP answer kept under the
fingerprint before 431331e was refused 422 "Idempotency-Key reused", and a gRPC answer kept as its JSON
view before b4b0005 ended the retry UNKNOWN (KeyError).

Old bytes below come from commit 85519f0 (the parent of 431331e, 2026-11-23), run from a worktree:

- its sidecar store had the column families retry_*, idem, idem_expiry and delay_* only (app/service.py
  COLUMN_FAMILIES): dmq_forwarded (2571c1c) and transactions (6a81c84) came later;
- IdempotencyStore.run("order-42", fingerprint("/v1/messages", "", body), ...) for the HTTP POST
  /v1/messages with ``body`` below kept the answer document below (its fingerprint is the old one: the
  path, the query string as Starlette printed it, and the raw body bytes).

The gRPC ones hold bytes from 69f8030 (a kept gRPC answer), described where they are used.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest

from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.config import Settings
from rocksidecar.app.idempotency import CF_ANSWERS, CF_EXPIRY, fingerprint
from rocksidecar.app.service import Service
from rocksidecar.devbroker import DevCluster
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import RocksKV
from tests.app.conftest import Stack

# --- what 85519f0's sidecar store held -----------------------------------------------------------------
OLD_CFS = (
    "retry_pending", "retry_index", "retry_dead", "retry_meta",
    "idem", "idem_expiry",
    "delay_due", "delay_index", "delay_done", "delay_done_expiry", "delay_meta",
)  # fmt: skip

# --- an Idempotency-Key answer 85519f0 kept for POST /v1/messages ---------------------------------------
OLD_KEY = "order-42"
OLD_BODY = b'{"topic": "orders", "body": "hello"}'  # as the client sends it, again on its retry
OLD_FP = "94e0fd52e2eee2931d70018d5508c6178f5e2f9eefe461532f795dea44e0422e"
OLD_ANSWER = {
    "id": "0A0000010000000000000000000000AB",
    "status": "SENT",
    "broker": "broker-a",
    "queueId": 1,
    "queueOffset": 7,
    "msgId": "0A00000100002A9F0000000000000007",
}


def _old_kept_answer(created_ms: int) -> tuple[Put, Put]:
    """The two rows 85519f0's IdempotencyStore._keep wrote (its literal output had created_ms
    1764000000000; here the same document made ``created_ms``, so that it is inside today's window)."""
    doc = orjson.dumps({"fp": OLD_FP, "created_ms": created_ms, "status": 200, "body": OLD_ANSWER})
    expiry = b"%013d" % created_ms + OLD_KEY.encode()
    return Put("idem", OLD_KEY.encode(), doc), Put("idem_expiry", expiry, b"")


def test_the_old_fingerprint_is_what_85519f0_computed() -> None:
    """The literal above is the old rule (path, '?', Starlette's query string, newline, raw body): this
    passes on today's code and documents how OLD_FP was made."""
    assert hashlib.sha256(b"/v1/messages?\n" + OLD_BODY).hexdigest() == OLD_FP


@contextlib.asynccontextmanager
async def _upgraded_sidecar(tmp_path: Path, rows: list[Put]) -> AsyncIterator[tuple[DevCluster, Service]]:
    """Today's sidecar started on a store an earlier version left with ``rows`` (and its column
    families only), over a devbroker."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    kv = RocksKV.open(data_dir / "store", OLD_CFS)
    kv.write(rows, sync=True)
    kv.close()
    async with DevCluster(brokers=1, queues=2) as cluster:
        settings = Settings(
            http_addr="127.0.0.1:0",
            grpc_addr="127.0.0.1:0",
            data_dir=str(data_dir),
            retry_default=RetryPolicy((0.05, 0.1, 0.2, 0.5), 1000),
            send_timeout_ms=1000,
            namesrv=(cluster.namesrv_addr,),
        )
        service = Service(settings)
        await service.start()
        try:
            yield cluster, service
        finally:
            await service.stop()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_a_retry_after_the_upgrade_gets_the_answer_kept_before_it(tmp_path: Path) -> None:
    """A client whose POST /v1/messages (Idempotency-Key order-42) was answered 200 SENT by the earlier
    version retries the very same request after the upgrade, inside the 24 h window (its first answer
    was lost to a timeout, or the restart cut the connection). Expected: the kept answer, replayed (200,
    same id, nothing sent). Actual: 422 "Idempotency-Key reused": 431331e changed the fingerprint (the
    ack mode in place of the query string, canonical JSON in place of the raw bytes) and the kept
    answers' old fingerprints are compared as they are, so every such retry is refused as another
    request: the client is told its stored message failed for bad input."""
    async with _upgraded_sidecar(tmp_path, list(_old_kept_answer(_now_ms() - 60_000))) as (cluster, service):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http.port}", timeout=30) as http:
            again = await http.post(
                "/v1/messages",
                content=OLD_BODY,
                headers={"Idempotency-Key": OLD_KEY, "content-type": "application/json"},
            )
        assert again.status_code == 200, again.text
        assert again.json()["id"] == OLD_ANSWER["id"]
        assert again.headers.get("idempotent-replayed") == "true"
        assert not any(b.messages("orders") for b in cluster.brokers.values())


def _keep(stack: Stack, key: str, fp: str, status: int, body: dict[str, Any]) -> None:
    """An answer document as the earlier versions' IdempotencyStore._keep wrote it, made now."""
    now = stack.service.idempotency._now_ms()
    doc = orjson.dumps({"fp": fp, "created_ms": now, "status": status, "body": body})
    stack.kv.write(
        [Put(CF_ANSWERS, key.encode(), doc), Put(CF_EXPIRY, b"%013d" % now + key.encode(), b"")], sync=True
    )


async def test_an_old_answer_is_replayed_for_its_query_string_and_raw_body_only(stack: Stack) -> None:
    """The legacy fingerprint is the one 85519f0 computed (the query string as Starlette printed it,
    the raw body): its retry gets the kept answer; the
    same key with another body, or the same body in other spacing (the old rule told them apart), is
    still refused 422, and nothing is sent."""
    body = b'{"topic":"IdemQ", "body":"hello"}'
    legacy = hashlib.sha256(b"/v1/messages?ack=broker&x=%C3%A9\n" + body).hexdigest()
    _keep(stack, "old-q", legacy, 202, {**OLD_ANSWER, "status": "SPOOLED"})
    headers = {"Idempotency-Key": "old-q", "content-type": "application/json"}
    again = await stack.http.post("/v1/messages?ack=broker&x=%c3%a9", content=body, headers=headers)
    assert again.status_code == 202, again.text
    assert again.json()["id"] == OLD_ANSWER["id"]
    assert again.headers.get("idempotent-replayed") == "true"
    for other in (b'{"topic":"IdemQ", "body":"other"}', b'{"topic": "IdemQ", "body": "hello"}'):
        refused = await stack.http.post("/v1/messages?ack=broker&x=%c3%a9", content=other, headers=headers)
        assert refused.status_code == 422, refused.text
        assert refused.json()["title"] == "Idempotency-Key reused"
    assert stack.stored("IdemQ") == []


# --- a gRPC answer kept by an earlier version breaks the retry's handler --------------------------------
# 69f8030 (the parent of b4b0005, 2026-11-23) kept a gRPC Send's answer as the HTTP one: (200 or 202, the
# outcome's JSON view). Its IdempotencyStore.run("grpc-42", fingerprint("/grpc/Send", "", request bytes))
# for the request below kept this document (created_ms 1764000000000 in its literal output).
GRPC_KEY = "grpc-42"
GRPC_REQUEST = bytes.fromhex("0a0f0a066f7264657273120568656c6c6f1a07677270632d3432")  # deterministic bytes
GRPC_FP = "6ac4c3df17a9c09c9eb80a27a596aa84165b997f29ee0a7b7ede7b57c1a15dbf"
GRPC_ANSWER = {
    "id": "0A0000010000000000000000000000CD",
    "status": "SENT",
    "broker": "broker-a",
    "queueId": 1,
    "queueOffset": 8,
    "msgId": "0A00000100002A9F0000000000000008",
}


def _old_kept_grpc_answer(created_ms: int) -> list[Put]:
    doc = orjson.dumps({"fp": GRPC_FP, "created_ms": created_ms, "status": 200, "body": GRPC_ANSWER})
    expiry = b"%013d" % created_ms + GRPC_KEY.encode()
    return [Put("idem", GRPC_KEY.encode(), doc), Put("idem_expiry", expiry, b"")]


async def test_a_grpc_retry_after_the_upgrade_gets_the_send_response_kept_before_it(tmp_path: Path) -> None:
    """A gRPC Send with idempotency_key grpc-42 answered OK (SENT) by 69f8030, retried identically after
    the upgrade within the window. Expected: the kept answer as a SendResponse (same id, SENT, marked
    idempotent-replayed), nothing sent. Actual: the fingerprint matches, the kept document is found, and
    the handler reads body["proto"] (b4b0005's form of a kept gRPC answer) from a document that has
    none: KeyError escapes the handler, the client gets UNKNOWN ("Unexpected <class 'KeyError'>") for a
    message that was sent, and again on every retry for 24 h."""
    request = pb.SendRequest.FromString(GRPC_REQUEST)
    assert request.idempotency_key == GRPC_KEY and request.message.topic == "orders"
    async with _upgraded_sidecar(tmp_path, _old_kept_grpc_answer(_now_ms() - 60_000)) as (cluster, service):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc.port}") as channel:
            call = pb_grpc.SidecarStub(channel).Send(request, timeout=30)  # type: ignore[no-untyped-call]
            try:
                response = await call
            except grpc.aio.AioRpcError as exc:
                pytest.fail(f"the retry was answered {exc.code().name}: {exc.details()}")
            metadata = dict(await call.initial_metadata() or ())
        assert response.id == GRPC_ANSWER["id"]
        assert metadata.get("idempotent-replayed") == "true"
        assert not any(b.messages("orders") for b in cluster.brokers.values())


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[pb_grpc.SidecarStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.service.grpc.port}") as channel:
        yield pb_grpc.SidecarStub(channel)  # type: ignore[no-untyped-call]


async def test_a_grpc_send_answer_kept_by_the_earlier_version_is_replayed_not_failed(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """Before b4b0005 the gRPC surface kept a keyed Send's answer as its JSON view (app.api.views.
    outcome_view, status 200 for SENT), under the same fingerprint as today ("/grpc/Send" + the request
    serialized deterministically) and in the same document ({"fp","created_ms","status","body"}). A
    client whose Send timed out before the upgrade retries with its key after it: it must get the kept
    answer (the message's id), not an error, and nothing may be sent again."""
    req = pb.SendRequest(message=pb.Message(topic="IdemOld", body="x"), idempotency_key="old-1")
    fp = fingerprint("/grpc/Send", "", req.SerializeToString(deterministic=True))
    now = stack.service.idempotency._now_ms()
    view = {"id": "AC1100010001000000000000000000AA", "status": "SENT", "broker": "broker-a",
            "queueId": 1, "queueOffset": 7, "msgId": "0A00000100002A9F0000000000000123"}  # fmt: skip
    doc = orjson.dumps({"fp": fp, "created_ms": now, "status": 200, "body": view})
    stack.kv.write(
        [Put(CF_ANSWERS, b"old-1", doc), Put(CF_EXPIRY, b"%013d" % now + b"old-1", b"")], sync=True
    )

    try:
        answer = await stub.Send(req, timeout=10)
    except grpc.aio.AioRpcError as exc:
        pytest.fail(f"the kept answer was not replayed: {exc.code().name} {exc.details()}")
    assert answer.id == view["id"]
    assert answer.status == pb.Status.SENT
    assert stack.stored("IdemOld") == []  # not sent again


async def test_a_spooled_send_and_a_batch_kept_by_the_earlier_version_are_replayed(
    stack: Stack, stub: pb_grpc.SidecarStub
) -> None:
    """69f8030's other kept forms: a Send answered 202 (SPOOLED, with its next attempt and last error)
    and a SendBatch's view (an item refused with HTTP's field names, which gRPC spells its own way), as
    its _send_response and _error mapped them."""
    send = pb.SendRequest(message=pb.Message(topic="IdemOld", body="x"), idempotency_key="old-s")
    spooled = {"id": "AC1100010001000000000000000000BB", "status": "SPOOLED", "nextAttemptAt": 1764000003000,
               "lastError": "broker-a: timeout"}  # fmt: skip
    _keep(
        stack,
        "old-s",
        fingerprint("/grpc/Send", "", send.SerializeToString(deterministic=True)),
        202,
        spooled,
    )
    answer = await stub.Send(send, timeout=10)
    assert (answer.id, answer.status) == (spooled["id"], pb.Status.SPOOLED)
    assert (answer.next_attempt_at_ms, answer.last_error) == (1764000003000, "broker-a: timeout")

    batch = pb.SendBatchRequest(
        messages=[pb.Message(topic="IdemOld", body="a"), pb.Message(topic="IdemOld", body="b", delay_ms=-1)],
        idempotency_key="old-b",
    )
    error = {"type": "about:blank", "title": "Bad Request", "status": 400,
             "detail": "delayMs must be >= 0", "field": "messages[1].delayMs"}  # fmt: skip
    view = {"results": [{"index": 0, **GRPC_ANSWER}, {"index": 1, "status": "REJECTED", "error": error}],
            "sent": 1, "spooled": 0, "scheduled": 0, "rejected": 1, "failed": 0}  # fmt: skip
    _keep(
        stack,
        "old-b",
        fingerprint("/grpc/SendBatch", "", batch.SerializeToString(deterministic=True)),
        200,
        view,
    )
    results = (await stub.SendBatch(batch, timeout=10)).results
    assert [r.index for r in results] == [0, 1]
    assert (results[0].result.id, results[0].result.queue_offset) == (GRPC_ANSWER["id"], 8)
    assert results[1].error == pb.Error(
        http_status=400, title="Bad Request", detail="delay_ms must be >= 0", field="messages[1].delay_ms"
    )
    assert stack.stored("IdemOld") == []


@pytest.mark.parametrize(
    "body",
    [
        {"proto": "not base64!"},
        {"proto": 7},
        {"id": "AC1100010001000000000000000000CC", "status": "LOST"},
        {"status": "SENT"},
        {"id": 7, "status": "SENT"},
    ],
)
async def test_a_kept_grpc_answer_that_cannot_be_decoded_is_a_damaged_answer(
    stack: Stack, stub: pb_grpc.SidecarStub, body: dict[str, Any]
) -> None:
    """A kept answer that is neither today's form nor a view the earlier version wrote ends the call
    INTERNAL naming the damage (as HTTP's 500 "Damaged answer"), not UNKNOWN from an exception that
    escaped the handler; nothing is sent."""
    req = pb.SendRequest(message=pb.Message(topic="IdemOld", body="x"), idempotency_key="bad-1")
    _keep(stack, "bad-1", fingerprint("/grpc/Send", "", req.SerializeToString(deterministic=True)), 200, body)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Send(req, timeout=10)
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    assert "damaged" in (caught.value.details() or "")
    assert stack.stored("IdemOld") == []

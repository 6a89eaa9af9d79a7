"""gRPC transaction methods (issue 29) over devbroker, by the HTTP routes' rules: begin stores the half and
answers its id, commit/rollback answer the decided Transaction; unknown id NOT_FOUND, the other decision
FAILED_PRECONDITION, a repeat the same answer; bad input INVALID_ARGUMENT naming the field with nothing
stored; a sidecar without transactions answers UNIMPLEMENTED."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from rocksidecar.app.api.grpc import SidecarServicer
from rocksidecar.app.api.operations import EdgeDeps
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.app.api.servers import GrpcServer
from rocksidecar.app.idempotency import COLUMN_FAMILIES as IDEMPOTENCY_CFS
from rocksidecar.app.idempotency import IdempotencyStore
from rocksidecar.app.metrics import Metrics
from rocksidecar.app.request import Limits
from rocksidecar.app.sidecar import Sidecar
from rocksidecar.app.transactions.grpc import GrpcTransactions
from rocksidecar.app.transactions.records import TransactionRecords
from rocksidecar.devbroker import DevCluster
from rocksidecar.devbroker.transactions import HALF_TOPIC
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.store import RetryStore
from rocksidecar.rmq.producer import Producer
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.memory import MemoryKV
from tests.app.transactions.conftest import Started
from tests.fakes import FakeWallClock

TOPIC = "TxGrpc"
LIMITS = Limits(max_body_bytes=1024, max_delay_ms=60_000)


@dataclass
class Env:
    cluster: DevCluster
    stub: pb_grpc.SidecarStub
    records: TransactionRecords
    bare: pb_grpc.SidecarStub  # a sidecar without transactions

    def real(self) -> list[str | None]:
        return [m.uniq_key for b in self.cluster.brokers.values() for m in b.messages(TOPIC)]

    def halves(self) -> int:
        return sum(len(b.messages(HALF_TOPIC)) for b in self.cluster.brokers.values())


def _servicer(producer: Producer, clock: FakeWallClock, rpcs: GrpcTransactions | None) -> SidecarServicer:
    retry = RetryStore(MemoryKV(list(RETRY_CFS)), now_ms=clock.now_ms)
    sidecar = Sidecar(producer, retry, policy_for=lambda _t: RetryPolicy((1.0,), 3), now_ms=clock.now_ms)
    kv = MemoryKV(list(IDEMPOTENCY_CFS))
    idempotency = IdempotencyStore(kv, GroupCommitWriter(kv), window_s=60, now_ms=clock.now_ms)
    deps = EdgeDeps(sidecar, LIMITS, 100, Metrics(), idempotency, clock.now_ms)
    return SidecarServicer(deps, transactions=rpcs)


@pytest.fixture
async def env(cluster: DevCluster, clock: FakeWallClock, started: Started) -> AsyncIterator[Env]:
    rpcs = GrpcTransactions(started.coordinator, LIMITS, clock.now_ms)
    servers = [
        GrpcServer(_servicer(started.producer, clock, r), "127.0.0.1:0", grace_s=0.1) for r in (rpcs, None)
    ]
    for server in servers:
        await server.start()
    try:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{servers[0].port}") as channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{servers[1].port}") as bare,
        ):
            yield Env(cluster, pb_grpc.SidecarStub(channel), started.records, pb_grpc.SidecarStub(bare))
    finally:
        for server in servers:
            await server.stop()


async def _refused(call: object, code: grpc.StatusCode) -> str:
    """The ``field`` trailing metadata of a call that must end with ``code``."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    assert info.value.code() == code, info.value.details()
    return str(dict(info.value.trailing_metadata() or ()).get("field"))


async def test_begin_commit_repeat_conflict(env: Env) -> None:
    begun = await env.stub.BeginTransaction(
        pb.BeginTransactionRequest(message=pb.Message(topic=TOPIC, body="hi"), transaction_key="o-1")
    )
    assert begun.state == pb.TX_PREPARED and begun.transaction_key == "o-1" and begun.topic == TOPIC
    assert begun.broker.startswith("broker-") and env.halves() == 1 and env.real() == []
    first = await env.stub.CommitTransaction(pb.TransactionRequest(id=begun.id))
    assert first.state == pb.TX_COMMITTED and first.acknowledged and first.decided_ms > 0
    again = await env.stub.CommitTransaction(pb.TransactionRequest(id=begun.id))
    assert again == first
    field = await _refused(
        env.stub.RollbackTransaction(pb.TransactionRequest(id=begun.id)), grpc.StatusCode.FAILED_PRECONDITION
    )
    assert field == "id"
    assert env.real() == [begun.id]
    assert (await env.stub.GetTransaction(pb.TransactionRequest(id=begun.id))) == first


async def test_rollback_then_commit_fails_and_nothing_is_delivered(env: Env) -> None:
    begun = await env.stub.BeginTransaction(
        pb.BeginTransactionRequest(message=pb.Message(topic=TOPIC, body="x"))
    )
    rolled = await env.stub.RollbackTransaction(pb.TransactionRequest(id=begun.id))
    assert rolled.state == pb.TX_ROLLED_BACK
    code = grpc.StatusCode.FAILED_PRECONDITION
    assert await _refused(env.stub.CommitTransaction(pb.TransactionRequest(id=begun.id)), code) == "id"
    assert env.real() == []


async def test_an_idempotency_key_begins_once(env: Env) -> None:
    req = pb.BeginTransactionRequest(message=pb.Message(topic=TOPIC, body="x"), idempotency_key="b-1")
    first, again = await env.stub.BeginTransaction(req), await env.stub.BeginTransaction(req)
    assert first == again and env.halves() == 1


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.BeginTransactionRequest(), "message"),
        (pb.BeginTransactionRequest(message=pb.Message(topic="RMQ_SYS_TRANS_HALF_TOPIC", body="x")), "topic"),
        (pb.BeginTransactionRequest(message=pb.Message(topic=TOPIC, body="x" * 2000)), "body"),
        (
            pb.BeginTransactionRequest(message=pb.Message(topic=TOPIC, body="x", delay_ms=1000)),
            "delay_ms",
        ),
        (
            pb.BeginTransactionRequest(
                message=pb.Message(topic=TOPIC, body="x", deliver_at_ms=1_700_000_060_000)
            ),
            "deliver_at",
        ),
        (
            pb.BeginTransactionRequest(message=pb.Message(topic=TOPIC, body="x"), transaction_key=""),
            "transaction_key",
        ),
        (
            pb.BeginTransactionRequest(message=pb.Message(topic=TOPIC, body="x"), transaction_key="k" * 257),
            "transaction_key",
        ),
        (
            pb.BeginTransactionRequest(
                message=pb.Message(topic=TOPIC, body="x", properties={"PGROUP": "other"})
            ),
            "properties.PGROUP",
        ),
    ],
)
async def test_bad_input_is_invalid_argument_before_anything_is_stored(
    env: Env, request_: pb.BeginTransactionRequest, field: str
) -> None:
    assert await _refused(env.stub.BeginTransaction(request_), grpc.StatusCode.INVALID_ARGUMENT) == field
    assert env.halves() == 0 and env.records.all() == []


async def test_unknown_or_missing_id(env: Env) -> None:
    for method in (env.stub.CommitTransaction, env.stub.RollbackTransaction, env.stub.GetTransaction):
        assert await _refused(method(pb.TransactionRequest(id="nope")), grpc.StatusCode.NOT_FOUND) == "id"
        assert await _refused(method(pb.TransactionRequest(id="x" * 500)), grpc.StatusCode.NOT_FOUND) == "id"
        assert await _refused(method(pb.TransactionRequest()), grpc.StatusCode.INVALID_ARGUMENT) == "id"


async def test_without_transactions_the_methods_are_unimplemented(env: Env) -> None:
    code = grpc.StatusCode.UNIMPLEMENTED
    req = pb.BeginTransactionRequest(message=pb.Message(topic=TOPIC, body="x"))
    await _refused(env.bare.BeginTransaction(req), code)
    await _refused(env.bare.CommitTransaction(pb.TransactionRequest(id="a")), code)
    assert env.halves() == 0

"""RemotingClient's shared connect (one per address, however many callers wait on it): the connect runs
with the client's own connect timeout whatever each caller's budget, each caller waits its own budget,
and a close during a connect fails its waiters with a RocketMQError. Before, the first caller's budget
bounded the connect of every caller, and a close left them cancelled (asyncio.CancelledError) although
nobody cancelled them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rocksidecar.rmq import pool as pool_module
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import ClientError, ConnectError
from rocksidecar.rmq.pool import DEFAULT_CONNECT_TIMEOUT_S, RemotingClient
from rocksidecar.rmq.protocol.frame import RemotingCommand

ADDR = "broker-a:10911"


class FakeConn:
    is_closed = False

    async def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS)

    def close(self) -> None:
        self.is_closed = True


class GatedConnect:
    """``connect`` of the pool that records each connect's limit and completes when ``gate`` opens; a
    limit below ``takes_s`` times out there, as asyncio.timeout(limit) around a slow handshake would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, takes_s: float = 0.5) -> None:
        self.limits: list[float] = []
        self.started = asyncio.Event()
        self.gate = asyncio.Event()
        self.takes_s = takes_s
        monkeypatch.setattr(pool_module, "connect", self)

    async def __call__(self, addr: str, timeout_s: float, *args: Any, **kw: Any) -> FakeConn:
        self.limits.append(timeout_s)
        self.started.set()
        await self.gate.wait()
        if timeout_s < self.takes_s:
            raise ConnectError(f"cannot connect to {addr}: timed out", addr=addr)
        return FakeConn()


@pytest.fixture
def connect(monkeypatch: pytest.MonkeyPatch) -> GatedConnect:
    return GatedConnect(monkeypatch)


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    made = RemotingClient()
    yield made
    await made.close()


def heartbeat(client: RemotingClient, timeout_s: float) -> asyncio.Task[RemotingCommand]:
    return asyncio.create_task(client.invoke(ADDR, RemotingCommand(RequestCode.HEART_BEAT), timeout_s))


async def test_a_short_budget_caller_does_not_fail_the_shared_connect_of_the_others(
    connect: GatedConnect, client: RemotingClient
) -> None:
    # A send with 0.1 s left (a retry after a slow first attempt) starts the connect to a broker that
    # takes 0.5 s to accept (TLS across zones); a caller with its full 3 s joins it. Java's
    # NettyRemotingClient connects with its own connectTimeoutMillis whatever the request's.
    hurried, patient = heartbeat(client, 0.1), heartbeat(client, 3.0)
    await connect.started.wait()
    await asyncio.sleep(0)  # the patient caller joins the connect under way (no time passes)
    connect.gate.set()
    results = await asyncio.gather(hurried, patient, return_exceptions=True)
    assert not isinstance(results[1], BaseException), results[1]
    assert connect.limits == [DEFAULT_CONNECT_TIMEOUT_S]  # one connect, on the client's timeout


async def test_a_caller_whose_budget_runs_out_fails_alone_and_the_connect_goes_on(
    connect: GatedConnect, client: RemotingClient
) -> None:
    patient = heartbeat(client, 3.0)
    await connect.started.wait()
    with pytest.raises(ConnectError, match="cannot connect to broker-a:10911: timed out"):
        await heartbeat(client, 0.01)  # the error a connect timing out raises: callers' handling stays
    cancelled = heartbeat(client, 3.0)
    await asyncio.sleep(0)  # it waits on the connect too
    cancelled.cancel()  # a caller cancelled by its own caller ends cancelled, as always
    await asyncio.gather(cancelled, return_exceptions=True)
    assert cancelled.cancelled()
    connect.gate.set()
    assert (await patient).code == ResponseCode.SUCCESS
    assert connect.limits == [DEFAULT_CONNECT_TIMEOUT_S]
    assert client.connected_addresses() == [ADDR]


async def test_close_during_a_connect_fails_the_waiter_with_a_rocketmq_error_not_cancelled(
    connect: GatedConnect, client: RemotingClient
) -> None:
    # close() cancels the shared connect; a send in flight at shutdown must end in the callers'
    # ``except RocketMQError`` (spool for retry, fail over, answer 5xx), as a request in flight on an
    # open connection does with ConnectionClosed, not as a cancelled task.
    request = heartbeat(client, 3.0)
    await connect.started.wait()
    await client.close()
    (outcome,) = await asyncio.gather(request, return_exceptions=True)
    assert not request.cancelled()
    assert isinstance(outcome, ClientError) and "closed" in str(outcome)
    with pytest.raises(ClientError, match="the remoting client is closed"):
        await client.connection(ADDR)

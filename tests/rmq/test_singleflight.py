"""rocksidecar.rmq.singleflight: one in-flight call per key, behind the pool's connects and the
producer's route requests."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar.rmq.errors import TopicNotExist
from rocksidecar.rmq.producer.routes import TopicRoutes
from rocksidecar.rmq.route import TopicRouteData
from rocksidecar.rmq.singleflight import SingleFlight
from tests.fakes import route


class Gated:
    """A call that counts how often it starts and ends only when the test opens its gate."""

    def __init__(self) -> None:
        self.starts = 0
        self.gate = asyncio.Event()

    async def __call__(self, value: int) -> int:
        self.starts += 1
        await self.gate.wait()
        return value


async def test_callers_of_one_key_share_one_call_and_another_key_gets_its_own() -> None:
    flight = SingleFlight[str, int]()
    call = Gated()
    waiters = [asyncio.ensure_future(flight.run("a", lambda: call(1))) for _ in range(3)]
    other = asyncio.ensure_future(flight.run("b", lambda: call(2)))
    await asyncio.sleep(0)  # let every waiter ask
    call.gate.set()
    assert await asyncio.gather(*waiters, other) == [1, 1, 1, 2]
    assert call.starts == 2
    assert await flight.run("a", lambda: call(3)) == 3  # the key is free once its call ended


async def test_a_failure_reaches_every_waiter_and_frees_the_key() -> None:
    flight = SingleFlight[str, int]()
    gate = asyncio.Event()

    async def failing() -> int:
        await gate.wait()
        raise TopicNotExist("gone")

    waiters = [asyncio.ensure_future(flight.run("a", failing)) for _ in range(2)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert [type(r) for r in results] == [TopicNotExist, TopicNotExist]

    async def ok() -> int:
        return 7

    assert await flight.run("a", ok) == 7


async def test_a_cancelled_waiter_leaves_the_call_running_for_the_others() -> None:
    flight = SingleFlight[str, int]()
    call = Gated()
    first = asyncio.ensure_future(flight.run("a", lambda: call(1)))
    second = asyncio.ensure_future(flight.run("a", lambda: call(2)))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    call.gate.set()
    assert await second == 1
    assert call.starts == 1


async def test_settled_runs_when_the_call_ends_before_any_waiter_resumes() -> None:
    seen: list[tuple[str, int, bool]] = []
    waiter: asyncio.Future[int]

    def settled(key: str, fut: asyncio.Future[int]) -> None:
        seen.append((key, fut.result(), waiter.done()))

    flight = SingleFlight[str, int](settled)
    call = Gated()
    waiter = asyncio.ensure_future(flight.run("a", lambda: call(5)))
    await asyncio.sleep(0)
    call.gate.set()
    assert await waiter == 5
    assert seen == [("a", 5, False)]  # the routes keep a fetched route before its callers see it


async def test_cancel_all_cancels_the_running_calls_and_their_waiters() -> None:
    settled: list[bool] = []
    flight = SingleFlight[str, int](lambda _key, fut: settled.append(fut.cancelled()))
    call = Gated()
    waiter = asyncio.ensure_future(flight.run("a", lambda: call(1)))
    await asyncio.sleep(0)
    flight.cancel_all()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert settled == [True]


class GatedRoutes:
    """A route source whose answers wait for the test; counts the requests per topic."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.gate = asyncio.Event()

    async def get_route(self, topic: str) -> TopicRouteData:
        self.asked.append(topic)
        await self.gate.wait()
        return route({"broker-a": 4})


async def test_concurrent_route_refreshes_of_a_topic_make_one_request_and_keep_its_answer() -> None:
    source = GatedRoutes()
    routes = TopicRoutes(source)
    callers = [asyncio.ensure_future(routes.refresh("t")) for _ in range(3)]
    await asyncio.sleep(0)
    source.gate.set()
    infos = await asyncio.gather(*callers)
    assert source.asked == ["t"]
    assert infos[0] is infos[1] is infos[2] is routes.cached("t")
    await routes.close()

"""The client instance asks the name server for a topic's route once however many of its producers and
consumers ask at the same time, and its table never goes back to an older answer. Before, each caller
asked on its own, and the answer that came back last was kept: a lookup asked first but answered last
(a producer's refresh racing a consumer's, or an on-demand lookup) put back a route older than the one
the name server had given since, e.g. without a broker that had joined, until the next refresh."""

from __future__ import annotations

import asyncio

import pytest

from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.route import TopicRouteData
from tests.fakes import FakeClock, ScriptedInvoker, route


class HeldNamesrv:
    """A name server whose every route request waits until the test answers it, in whatever order the
    test chooses; ``asked`` is set at each request."""

    def __init__(self) -> None:
        self.requests: list[asyncio.Future[RemotingCommand]] = []
        self.cmds: list[RemotingCommand] = []
        self.given: dict[int, TopicRouteData] = {}  # request number -> the route it was answered with
        self.asked = asyncio.Event()

    async def __call__(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        assert cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
        answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.requests.append(answer)
        self.cmds.append(cmd)
        self.asked.set()
        return await answer

    def answer(self, n: int, data: TopicRouteData) -> None:
        self.given[n] = data
        self.requests[n].set_result(self.cmds[n].response(ResponseCode.SUCCESS, body=data.to_json()))

    def fail(self, n: int) -> None:
        self.requests[n].set_result(self.cmds[n].response(ResponseCode.SYSTEM_ERROR, "busy"))


def instance_of(ns: HeldNamesrv) -> ClientInstance:
    return ClientInstance(NameServerClient(ScriptedInvoker(ns), "ns:9876"), clock=FakeClock())


OLD = route({"broker-a": 4})
NEW = route({"broker-a": 4, "broker-b": 4})  # broker-b joined


async def test_concurrent_lookups_of_one_topic_make_one_name_server_request() -> None:
    ns = HeldNamesrv()
    instance = instance_of(ns)
    callers = [asyncio.ensure_future(instance.get_route("T")) for _ in range(5)]
    # Each caller runs up to the name server (or to the lookup it joins) before the test resumes.
    await ns.asked.wait()
    for n in range(len(ns.requests)):  # today: one request per caller, answered with the same route
        ns.answer(n, NEW)
    assert await asyncio.gather(*callers) == [NEW] * 5
    assert len(ns.requests) == 1, f"{len(ns.requests)} name-server requests for 5 concurrent lookups"
    assert sorted(instance.broker_addrs()) == ["broker-a", "broker-b"]


async def test_an_answer_to_an_earlier_lookup_never_replaces_a_later_ones() -> None:
    """The producer's refresh asks first, a consumer's lookup second; the name server, by then aware of
    broker-b, answers the second first. The table must hold the newest answer the name server gave."""
    ns = HeldNamesrv()
    instance = instance_of(ns)
    refresh = asyncio.ensure_future(instance.get_route("T"))
    lookup = asyncio.ensure_future(instance.get_route("T"))
    await ns.asked.wait()
    if len(ns.requests) == 2:  # today: both asked; the later one is answered first, with the newer route
        ns.answer(1, NEW)
        await lookup
        ns.answer(0, OLD)
    else:
        ns.answer(0, OLD)  # one request, whose answer both share
    await asyncio.gather(refresh, lookup)
    newest = ns.given[max(ns.given)]  # the answer to the request asked last
    assert instance._routes["T"] == newest, "the table went back to an older answer of the name server"
    ns.asked.clear()
    again = asyncio.ensure_future(instance.get_route("T"))  # the lookup ended: the next one asks anew
    await ns.asked.wait()
    ns.answer(len(ns.requests) - 1, NEW)
    assert await again == NEW
    assert instance._routes["T"] == NEW


async def test_a_failed_lookup_reaches_every_caller_and_the_next_one_asks_again() -> None:
    ns = HeldNamesrv()
    instance = instance_of(ns)
    callers = [asyncio.ensure_future(instance.get_route("T")) for _ in range(3)]
    await ns.asked.wait()
    assert len(ns.requests) == 1
    ns.fail(0)
    for caller in callers:
        with pytest.raises(RocketMQError):
            await caller
    ns.asked.clear()
    again = asyncio.ensure_future(instance.get_route("T"))
    await ns.asked.wait()
    ns.answer(1, OLD)
    assert await again == OLD


async def test_a_caller_that_goes_away_leaves_the_lookup_to_the_others_and_close_ends_it() -> None:
    ns = HeldNamesrv()
    instance = instance_of(ns)
    leaving = asyncio.ensure_future(instance.get_route("T"))
    staying = asyncio.ensure_future(instance.get_route("T"))
    await ns.asked.wait()
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    ns.answer(0, NEW)
    assert await staying == NEW
    assert instance._routes["T"] == NEW
    ns.asked.clear()
    hung = asyncio.ensure_future(instance.get_route("U"))
    await ns.asked.wait()
    await instance.close()  # a lookup the name server never answers does not outlive the instance
    await asyncio.wait([hung], timeout=5.0)  # a bound on failure, not a synchronisation
    assert hung.cancelled()

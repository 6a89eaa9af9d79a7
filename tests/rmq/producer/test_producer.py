"""Producer routing with an injected clock: round robin, back-off, retries on another broker, the send
budget, retryable vs final codes, unknown topics (P1-P6)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pytest

from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.errors import (
    FrameError,
    InvalidMessageError,
    MessageIllegal,
    RequestTimeout,
    RouteNotFound,
    SendFailed,
    TopicNotExist,
)
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.result import SendStatus
from rocksidecar.rmq.route import BrokerData, QueueData, TopicRouteData
from tests.fakes import route, send_ok
from tests.rmq.producer.harness import Harness

MSG = Message("T", b"hello")


async def test_round_robin_visits_every_queue_once_per_cycle() -> None:
    h = Harness()
    p = h.producer()
    for _ in range(16):
        await p.send(MSG)
    sent = h.sent_to()
    assert sorted(sent[:8]) == sorted({(b, q) for b in ("broker-a", "broker-b") for q in range(4)})
    assert sent[8:] == sent[:8]  # the per-topic index keeps turning


async def test_slow_broker_is_skipped_for_30_s_then_tried_again() -> None:
    h = Harness()
    h.slow("broker-a", 0.6)  # answers, but in 600 ms: back off 30 s
    p = h.producer()
    while not h.sent_to() or h.sent_to()[-1][0] != "broker-a":
        await p.send(MSG)
    h.invoker.calls.clear()
    for _ in range(10):
        await p.send(MSG)
    assert {b for b, _ in h.sent_to()} == {"broker-b"}
    h.clock.advance(30)
    h.behaviour.clear()
    for _ in range(8):
        await p.send(MSG)
    assert "broker-a" in {b for b, _ in h.sent_to()[10:]}


async def test_failed_broker_is_isolated_and_the_caller_never_sees_it() -> None:
    h = Harness()
    h.fail("broker-a")
    p = h.producer()
    results = [await p.send(MSG) for _ in range(20)]
    assert all(r.status is SendStatus.SEND_OK and r.queue.broker_name == "broker-b" for r in results)
    assert [b for b, _ in h.sent_to()].count("broker-a") == 1  # isolated after its first failure
    (row,) = [r for r in p.fault_table() if r.broker == "broker-a"]
    assert row.state == "isolated" and row.not_available_for_s == pytest.approx(600)
    assert results[0].attempts in (1, 2)


async def test_retry_goes_to_another_broker_even_without_fault_tolerance() -> None:
    h = Harness()
    h.fail("broker-a")
    p = h.producer(fault_tolerance=False)
    for _ in range(10):
        result = await p.send(MSG)
        assert result.queue.broker_name == "broker-b"
    sent = h.sent_to()
    for prev, nxt in itertools.pairwise(sent):
        if prev[0] == "broker-a":
            assert nxt[0] == "broker-b"


async def test_both_failing_lists_every_attempt() -> None:
    h = Harness()
    h.fail("broker-a")
    h.fail("broker-b")
    p = h.producer()
    with pytest.raises(SendFailed) as info:
        await p.send(MSG)
    brokers = [a.broker for a in info.value.attempts]
    assert len(brokers) == 3 and brokers[0] != brokers[1] and brokers[1] != brokers[2]
    assert all(a.code == ResponseCode.SYSTEM_ERROR for a in info.value.attempts)
    assert info.value.retriable  # the retry store may try again later


async def test_budget_is_never_exceeded() -> None:
    h = Harness()
    h.fail("broker-a", ResponseCode.SYSTEM_ERROR, slow_s=1.6)
    h.fail("broker-b", ResponseCode.SYSTEM_ERROR, slow_s=1.6)
    p = h.producer(send_timeout_s=3.0)
    with pytest.raises(SendFailed) as info:
        await p.send(MSG)
    assert len(info.value.attempts) == 2  # 3.2 s spent after two: no third attempt
    timeouts = [t for _, _, t in h.invoker.sends()]
    assert timeouts == [pytest.approx(3.0), pytest.approx(1.4)]


async def test_final_error_stops_at_once() -> None:
    h = Harness()
    h.fail("broker-a", ResponseCode.MESSAGE_ILLEGAL)
    h.fail("broker-b", ResponseCode.MESSAGE_ILLEGAL)
    p = h.producer()
    with pytest.raises(SendFailed) as info:
        await p.send(MSG)
    assert len(info.value.attempts) == 1 and isinstance(info.value.last, MessageIllegal)
    assert not info.value.retriable and "MESSAGE_ILLEGAL" in str(info.value)


@pytest.mark.parametrize(
    ("code", "attempts"),
    [
        (ResponseCode.SYSTEM_BUSY, 3),
        (ResponseCode.SERVICE_NOT_AVAILABLE, 3),
        (ResponseCode.NO_PERMISSION, 3),  # Java's retryResponseCodes (issue 12)
        (ResponseCode.NO_BUYER_ID, 3),
        (ResponseCode.NOT_IN_CURRENT_UNIT, 3),
        (ResponseCode.MESSAGE_ILLEGAL, 1),
        (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 1),  # neither: stop, spool
        (999, 1),  # an unknown code: stop, spool
    ],
)
async def test_retryable_and_final_codes(code: int, attempts: int) -> None:
    h = Harness()
    h.fail("broker-a", code)
    h.fail("broker-b", code)
    with pytest.raises(SendFailed) as info:
        await h.producer().send(MSG)
    assert len(info.value.attempts) == attempts
    # only what can never succeed is final; the rest is spooled, since it may heal
    assert info.value.final is (code == ResponseCode.MESSAGE_ILLEGAL)
    assert info.value.retriable is not info.value.final


async def test_extra_retry_codes_opt_in() -> None:
    h = Harness()
    h.fail("broker-a", ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
    p = h.producer(extra_retry_codes=frozenset({ResponseCode.REQUEST_CODE_NOT_SUPPORTED}))
    results = [await p.send(MSG) for _ in range(4)]
    assert all(r.queue.broker_name == "broker-b" for r in results)


async def test_topic_not_exist_from_broker_refreshes_the_route_once() -> None:
    h = Harness()
    h.fail("broker-a", ResponseCode.TOPIC_NOT_EXIST)
    h.fail("broker-b", ResponseCode.TOPIC_NOT_EXIST)
    p = h.producer()
    with pytest.raises(SendFailed) as info:
        await p.send(MSG)
    assert h.route_requests == ["T", "T"]
    assert len(info.value.attempts) == 3  # a fresh route once, then other brokers (Java retries it)
    assert info.value.last is not None and info.value.last.code == ResponseCode.TOPIC_NOT_EXIST
    # Not retried now, but worth spooling: the only broker hosting a topic may be down.
    assert info.value.retriable


async def test_unknown_topic_uses_the_default_topic_route_to_auto_create() -> None:
    h = Harness(routes={"TBW102": route({"broker-a": 8, "broker-b": 8}, perm=7)})
    p = h.producer()
    result = await p.send(Message("NewTopic", b"x"))
    _, cmd, _ = h.invoker.sends()[0]
    assert cmd.ext_fields["b"] == "NewTopic" and cmd.ext_fields["c"] == "TBW102"
    assert int(cmd.ext_fields["e"]) < 4  # clamped to the default queue count
    assert result.status is SendStatus.SEND_OK and p.routes.cached("NewTopic").auto_create  # type: ignore[union-attr]


async def test_unknown_topic_without_auto_create_names_the_topic() -> None:
    h = Harness(routes={})
    with pytest.raises(SendFailed) as info:
        await h.producer().send(Message("Nope", b"x"))
    assert isinstance(info.value.last, TopicNotExist) and "Nope" in str(info.value)
    assert not info.value.attempts


async def test_a_known_topic_without_a_writable_queue_is_not_sent_with_the_default_route() -> None:
    # Before: sent with TBW102's route, which auto-created the topic on broker-b, where it does not live
    # (Java: "No route info of this topic", as the route exists).
    tbw102 = route({"broker-a": 8, "broker-b": 8}, perm=7)
    read_only = route({"broker-a": 4}, perm=4)  # updateTopicPerm -p 4
    masterless = TopicRouteData((QueueData("broker-a", 4, 4, 6),), (BrokerData("c", "broker-a", {1: "s:1"}),))
    for topic_route, why in (
        (read_only, "broker-a not writable (perm 4)"),
        (masterless, "broker-a has no master"),
    ):
        h = Harness(routes={"T": topic_route, "TBW102": tbw102})
        p = h.producer()
        with pytest.raises(SendFailed) as info:
            await p.send(MSG)
        assert isinstance(info.value.last, RouteNotFound) and why in str(info.value)
        assert info.value.retriable and not info.value.final  # spooled, replayed once it is writable
        assert h.invoker.sends() == [] and h.route_requests == ["T"]  # TBW102 never asked
        assert p.routes.cached("T") is None


async def test_a_route_with_a_port_of_non_ascii_digits_fails_the_send_as_send_failed() -> None:
    # Before: ValueError out of the route's check ('²' is a digit to str.isdigit only): a 500, not spooled.
    bad = TopicRouteData((QueueData("broker-a", 4, 4, 6),), (BrokerData("c", "broker-a", {0: "a:\u00b2"}),))
    h = Harness(routes={"T": bad})
    with pytest.raises(SendFailed) as info:
        await h.producer().send(MSG)
    assert isinstance(info.value.last, FrameError) and "not host:port" in str(info.value)
    assert info.value.retriable and h.invoker.sends() == []


async def test_a_route_lookup_that_outlasts_the_budget_is_a_send_failure_not_a_timeout() -> None:
    """A name server that never answers: the budget's TimeoutError escaped as a non-RocketMQ error and
    the sidecar answered 500 instead of spooling (seen under load in tests/app/test_e2e.py)."""
    h = Harness(routes={})
    p = h.producer(send_timeout_s=0.02)
    never = asyncio.Event()

    async def hang(topic: str) -> object:
        await never.wait()
        raise AssertionError("unreachable")

    p.routes.get = hang  # type: ignore[method-assign, assignment]
    with pytest.raises(SendFailed) as info:
        await p.send(Message("Slow", b"x"))
    assert isinstance(info.value.last, RequestTimeout) and "no route" in str(info.value)


async def test_invalid_message_is_refused_before_any_request() -> None:
    h = Harness()
    with pytest.raises(InvalidMessageError):
        await h.producer().send(Message("T", b"x", properties={"a": "b\x01"}))
    assert h.invoker.calls == []


async def test_degraded_success_is_a_status_unless_configured() -> None:
    h = Harness()

    def flush_timeout(cmd):  # type: ignore[no-untyped-def]
        resp = send_ok(cmd)
        resp.code = ResponseCode.FLUSH_DISK_TIMEOUT
        return resp

    h.behaviour["broker-a"] = flush_timeout
    h.behaviour["broker-b"] = flush_timeout
    assert (await h.producer().send(MSG)).status is SendStatus.FLUSH_DISK_TIMEOUT
    h.behaviour.pop("broker-b")
    p = h.producer(retry_another_broker_when_not_store_ok=True)
    results = [await p.send(MSG) for _ in range(4)]
    assert all(r.status is SendStatus.SEND_OK for r in results)


async def test_message_id_is_kept_across_retries() -> None:
    h = Harness()
    h.fail("broker-a")
    p = h.producer()
    await p.send(Message("T", b"x", id="FIXEDID"))
    await p.send(Message("T", b"x", id="FIXEDID"))
    ids = {cmd.ext_fields["i"].split("UNIQ_KEY\x01")[1].split("\x02")[0] for _, cmd, _ in h.invoker.sends()}
    assert ids == {"FIXEDID"}


async def test_recovery_probe_brings_an_unreachable_broker_back() -> None:
    h = Harness()
    h.down.add("broker-a")
    p = h.producer(recovery_probe_s=5.0)
    for _ in range(8):  # a full round-robin cycle reaches broker-a once
        await p.send(MSG)
    assert not p.fault.is_available("broker-a")
    await p._probe()
    assert not p.fault.is_available("broker-a")  # still down: stays isolated
    h.down.clear()
    await p._probe()
    assert p.fault.is_available("broker-a")


async def test_async_with_starts_the_background_work_and_unregisters_on_exit() -> None:
    h = Harness()
    parked: list[float] = []

    async def park(seconds: float) -> None:  # background rounds wait here until closed
        parked.append(seconds)
        await asyncio.Event().wait()

    async with h.producer(sleep=park, recovery_probe_s=5.0) as p:
        await p.send(MSG)
        await asyncio.sleep(0)  # let the started loops reach their first sleep
        assert 5.0 in parked  # the recovery probe runs, supervised
    codes = [cmd.code for _, cmd, _ in h.invoker.calls]
    assert codes[-1] == RequestCode.UNREGISTER_CLIENT  # close() ran: the group forgets this producer
    assert all(t.done() for t in asyncio.all_tasks() if t.get_name().startswith("producer-"))


async def test_send_raises_nothing_before_it_is_awaited_as_an_async_def() -> None:
    # send is a plain function returning the send's coroutine (issue 32): callers that gather or wrap
    # it must see its errors where they await it, as from an async def.
    h = Harness()
    p = h.producer()
    bad = p.send(Message("T", b""))  # an empty body: refused on await, not here
    unrouted = p.send(Message("NoSuchTopic", b"x"), validated=True)
    good = p.send(MSG, sharding_key="k", validated=True)
    assert h.sent_to() == []  # nothing went out yet
    results = await asyncio.gather(bad, unrouted, good, return_exceptions=True)
    assert isinstance(results[0], InvalidMessageError) and isinstance(results[1], SendFailed)
    assert not isinstance(results[2], BaseException) and results[2].status is SendStatus.SEND_OK
    assert len(h.sent_to()) == 1


async def test_a_final_refusal_of_the_message_does_not_isolate_the_broker() -> None:
    # MESSAGE_ILLEGAL is a verdict on the message from a broker that answered: before, each one isolated
    # its broker for 600 s, so a few refusable messages took every broker out of the selection (and
    # /readyz to 503) for every other message.
    h = Harness()
    h.fail("broker-a", ResponseCode.MESSAGE_ILLEGAL)
    p = h.producer()
    for _ in range(4):
        with contextlib.suppress(SendFailed):
            await p.send(MSG)
    assert {s.broker: s.state for s in p.fault_table()}.get("broker-a", "available") == "available"
    # an unreachable broker still is isolated
    h.down.add("broker-b")
    h.behaviour.clear()
    for _ in range(8):  # round robin reaches broker-b (each send then retried on broker-a)
        await p.send(MSG)
    assert {s.broker: s.state for s in p.fault_table()}["broker-b"] == "isolated"

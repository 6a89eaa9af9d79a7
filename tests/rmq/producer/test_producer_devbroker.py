"""The producer against devbroker with fault injection (issue 3): a slow broker is avoided for its
back-off window (injected clock), a failing broker never surfaces to the caller, and when both fail the
error comes within the budget with every attempt listed."""

from __future__ import annotations

import time

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, Message, NameServerClient, RemotingClient, SendFailed
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.fakes import FakeClock

TOPIC = "RoutingTest"


async def make_producer(
    cluster: DevCluster, client: RemotingClient, clock: FakeClock, **cfg: object
) -> Producer:
    ns = NameServerClient(client, cluster.namesrv_addr)
    api = BrokerApi(client, producer_group="routing")
    for broker in cluster.brokers.values():
        await api.create_topic(broker.addr, TOPIC)
    return Producer(ns, api, ProducerConfig(group="routing", **cfg), clock=clock)  # type: ignore[arg-type]


async def test_600ms_broker_is_avoided_until_its_30s_back_off_ends(
    cluster: DevCluster, client: RemotingClient
) -> None:
    clock = FakeClock()
    producer = await make_producer(cluster, client, clock)
    cluster.brokers["broker-a"].faults.latency_s = 0.6
    first = await producer.send(Message(TOPIC, b"x"))
    while first.queue.broker_name != "broker-a":  # round robin reaches broker-a within one cycle
        first = await producer.send(Message(TOPIC, b"x"))
    later = [await producer.send(Message(TOPIC, b"x")) for _ in range(16)]
    assert {r.queue.broker_name for r in later} == {"broker-b"}
    cluster.brokers["broker-a"].faults.latency_s = 0.0
    clock.advance(29.0)
    assert {(await producer.send(Message(TOPIC, b"x"))).queue.broker_name for _ in range(8)} == {"broker-b"}
    clock.advance(1.0)
    again = [await producer.send(Message(TOPIC, b"x")) for _ in range(8)]
    assert "broker-a" in {r.queue.broker_name for r in again}


async def test_failing_broker_never_surfaces_while_the_other_is_healthy(
    cluster: DevCluster, client: RemotingClient
) -> None:
    producer = await make_producer(cluster, client, FakeClock())
    cluster.brokers["broker-a"].faults.fail_all_sends(ResponseCode.SYSTEM_ERROR, "disk on fire")
    results = [await producer.send(Message(TOPIC, f"m{i}".encode())) for i in range(50)]
    assert all(r.queue.broker_name == "broker-b" for r in results)
    stored = cluster.brokers["broker-b"].messages(TOPIC)
    assert len(stored) == 50 and not cluster.brokers["broker-a"].messages(TOPIC)


async def test_stopped_broker_is_routed_around_and_comes_back(
    cluster: DevCluster, client: RemotingClient
) -> None:
    producer = await make_producer(cluster, client, FakeClock())
    await cluster.brokers["broker-a"].stop()
    results = [await producer.send(Message(TOPIC, b"x")) for _ in range(20)]
    assert {r.queue.broker_name for r in results} == {"broker-b"}
    await cluster.brokers["broker-a"].start()
    await producer._probe()  # the recovery probe's tick, without waiting for its timer
    await producer.routes.refresh(TOPIC)
    back = [await producer.send(Message(TOPIC, b"x")) for _ in range(8)]
    assert "broker-a" in {r.queue.broker_name for r in back}


async def test_both_failing_gives_every_attempt_within_the_budget(
    cluster: DevCluster, client: RemotingClient
) -> None:
    producer = await make_producer(cluster, client, FakeClock(), send_timeout_s=3.0)
    for broker in cluster.brokers.values():
        broker.faults.fail_all_sends(ResponseCode.SYSTEM_BUSY, "overloaded")
    with pytest.raises(SendFailed) as busy:
        await producer.send(Message(TOPIC, b"x"))
    assert [a.code for a in busy.value.attempts] == [ResponseCode.SYSTEM_BUSY] * 3
    brokers = [a.broker for a in busy.value.attempts]
    assert brokers[0] != brokers[1] != brokers[2]

    for broker in cluster.brokers.values():
        broker.faults.latency_s = 1.2  # and still failing: the third attempt has only 0.6 s left
    started = time.monotonic()
    with pytest.raises(SendFailed) as slow:
        await producer.send(Message(TOPIC, b"x"))
    elapsed = time.monotonic() - started
    assert elapsed < 3.3, elapsed
    first, second, third = slow.value.attempts
    assert first.code == second.code == ResponseCode.SYSTEM_BUSY
    assert third.code is None and "no response" in third.error  # cut off by what was left of the budget
    assert third.latency_s < 0.7

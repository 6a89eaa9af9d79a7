"""bench.floor's relay, the HTTP paths' floor: it must really send what each request stands for, match
answers to requests when many are in flight, and say when the broker refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from bench.floor import master_of, relay_frames, start
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi
from rocksidecar.rmq.pool import RemotingClient


@asynccontextmanager
async def relay(
    cluster: DevCluster, client: RemotingClient, topic: str, body: bytes, batch: int = 0
) -> AsyncIterator[httpx.AsyncClient]:
    """The relay to broker-a's one queue of ``topic``, and an HTTP client of it (32 connections)."""
    broker = cluster.brokers["broker-a"]
    await BrokerApi(client).create_topic(broker.addr, topic, read_queue_nums=1, write_queue_nums=1)
    addr, name = await master_of(cluster.namesrv_addr, topic)
    assert (addr, name) == (broker.addr, "broker-a")
    server = await start(addr, relay_frames(topic, name, body, batch))
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=32)) as http:
            yield http
    finally:
        server.close()


async def test_relay_sends_one_message_per_request_and_reports_refusals(
    cluster: DevCluster, client: RemotingClient
) -> None:
    broker = cluster.brokers["broker-a"]
    async with relay(cluster, client, "Floor", b"x" * 256) as http:
        answers = [await http.post("/v1/messages", content=b'{"topic":"Floor"}') for _ in range(3)]
        broker.faults.fail_next_sends(1)
        refused = await http.post("/v1/messages", content=b"{}")
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert refused.status_code == 502
    stored = broker.messages("Floor", 0)
    assert [m.body for m in stored] == [b"x" * 256] * 3


async def test_relay_with_many_requests_in_flight_answers_each_after_its_own_send(
    cluster: DevCluster, client: RemotingClient
) -> None:
    async with relay(cluster, client, "FloorMany", b"y" * 64) as http:
        answers = await asyncio.gather(*(http.post("/v1/messages", content=b"{}") for _ in range(64)))
    assert [a.status_code for a in answers] == [200] * 64
    assert len(cluster.brokers["broker-a"].messages("FloorMany", 0)) == 64


async def test_batch_relay_stores_the_whole_batch_per_request(
    cluster: DevCluster, client: RemotingClient
) -> None:
    async with relay(cluster, client, "FloorBatch", b"z" * 32, batch=10) as http:
        answers = [await http.post("/v1/messages:batch", content=b"{}") for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200]
    assert [m.body for m in cluster.brokers["broker-a"].messages("FloorBatch", 0)] == [b"z" * 32] * 20

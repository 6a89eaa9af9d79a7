"""bench.floor's relay: the anchor of the 1-connection path must really send, and say when it did not."""

from __future__ import annotations

import httpx

from bench.floor import master_of, send_frame, start
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi
from rocksidecar.rmq.pool import RemotingClient


async def test_relay_sends_one_message_per_request_and_reports_refusals(
    cluster: DevCluster, client: RemotingClient
) -> None:
    broker = cluster.brokers["broker-a"]
    await BrokerApi(client).create_topic(broker.addr, "Floor", read_queue_nums=1, write_queue_nums=1)
    addr, name = await master_of(cluster.namesrv_addr, "Floor")
    assert (addr, name) == (broker.addr, "broker-a")
    server = await start(addr, send_frame("Floor", name, b"x" * 256))
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            answers = [await http.post("/v1/messages", content=b'{"topic":"Floor"}') for _ in range(3)]
            broker.faults.fail_next_sends(1)
            refused = await http.post("/v1/messages", content=b"{}")
    finally:
        server.close()
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert refused.status_code == 502
    stored = broker.messages("Floor", 0)
    assert [m.body for m in stored] == [b"x" * 256] * 3

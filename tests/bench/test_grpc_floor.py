"""bench.grpc_floor, the gRPC paths' anchor: each kind of server answers the sidecar's own messages as the
sidecar would (a SENT answer, one acknowledgement per streamed message), and bench.compare's h2load
bodies are the framed messages the sidecar is sent."""

from __future__ import annotations

import asyncio
import importlib.util

import grpc
import pytest

from bench.common import free_port
from bench.compare import grpc_loads
from bench.floor import master_of, relay_frames
from bench.grpc_floor import KINDS, grpc_floor, start_relay
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.api.proto import rocksidecar_pb2_grpc as pb_grpc
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi
from rocksidecar.rmq.pool import RemotingClient


def _available(kind: str) -> bool:
    if kind == "relay":
        return False  # needs a broker: test_relay_floor_sends_each_call_to_the_broker
    return kind != "grpclib" or importlib.util.find_spec("grpclib") is not None


@pytest.mark.parametrize("kind", [k for k in KINDS if _available(k)])
def test_floor_answers_send_and_every_published_message(kind: str) -> None:
    port = free_port()
    with grpc_floor(port, kind, threads=4), grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.SidecarStub(channel)
        message = pb.Message(topic="Floor", body="x" * 256)
        sent = stub.Send(pb.SendRequest(message=message), timeout=10)
        acks = list(
            stub.Publish(
                iter([pb.PublishRequest(sequence=i, message=message) for i in (7, 8, 9)]), timeout=10
            )
        )
    assert sent.status == pb.SENT and sent.id
    assert [a.sequence for a in acks] == [7, 8, 9]
    assert all(a.HasField("result") and a.result.status == pb.SENT for a in acks)


def test_h2load_bodies_are_framed_sidecar_messages() -> None:
    unary, stream = grpc_loads("Floor")
    assert (unary.method, unary.per_call, stream.method, stream.per_call) == ("Send", 1, "Publish", 100)
    frames = []
    body = stream.body
    while body:
        assert body[0] == 0  # not compressed
        size = int.from_bytes(body[1:5], "big")
        frames.append(pb.PublishRequest.FromString(body[5 : 5 + size]))
        body = body[5 + size :]
    assert [f.sequence for f in frames] == list(range(100))
    assert {f.message.topic for f in frames} == {"Floor"}
    single = pb.SendRequest.FromString(unary.body[5:])
    assert int.from_bytes(unary.body[1:5], "big") == len(unary.body) - 5
    assert single.message.topic == "Floor" and len(single.message.body) == 256


async def test_relay_floor_sends_each_call_to_the_broker(cluster: DevCluster, client: RemotingClient) -> None:
    broker = cluster.brokers["broker-a"]
    await BrokerApi(client).create_topic(broker.addr, "Floor", read_queue_nums=1, write_queue_nums=1)
    addr, name = await master_of(cluster.namesrv_addr, "Floor")
    port = free_port()
    server = await start_relay(port, addr, relay_frames("Floor", name, b"x" * 256))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.SidecarStub(channel)
            request = pb.SendRequest(message=pb.Message(topic="Floor", body="ignored"))
            # concurrent calls: each answer is matched to its own call by the frame's opaque
            answers = await asyncio.gather(*(stub.Send(request, timeout=10) for _ in range(20)))
            broker.faults.fail_next_sends(1)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Send(request, timeout=10)
    finally:
        await server.stop(None)
    assert [a.status for a in answers] == [pb.SENT] * 20
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert [m.body for m in broker.messages("Floor", 0)] == [b"x" * 256] * 20


def test_strace_summary_is_read_per_system_call() -> None:
    from bench.grpc_syscalls import table

    text = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 41.20    0.120000          12     10000           write
 20.00    0.060000           6     10000      2000 epoll_wait
  0.10    0.000300           3       100           getpid
------ ----------- ----------- --------- --------- ----------------
100.00    0.180300                 20100      2000 total
"""
    assert table(text) == {"write": 10000, "epoll_wait": 10000, "getpid": 100}

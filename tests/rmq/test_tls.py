"""TLS to name servers and brokers (rmq.tls; devbroker's TLS-only ports stand in for a RocketMQ server with
tls.server.mode=enforcing): routes, sends and pulls go over it; a certificate is verified when a CA is
given, not otherwise (Java's default); a server that requires a client certificate gets one."""

from __future__ import annotations

import ssl

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, Message, MessageQueue, NameServerClient
from rocksidecar.rmq.errors import ConnectError, RocketMQError
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.tls import client_context
from tests.tls_certs import Certs

TOPIC = "TlsT"


async def round_trip(cluster: DevCluster, tls: ssl.SSLContext | None) -> bytes:
    """A route from the name server, a send and a pull of what was sent, over ``tls``."""
    client = RemotingClient(tls=tls, connect_timeout_s=2.0)
    try:
        ns, api = NameServerClient(client, cluster.namesrv_addr), BrokerApi(client)
        broker = cluster.brokers["broker-a"]
        await api.create_topic(broker.addr, TOPIC)
        route = await ns.get_route(TOPIC)
        mq = MessageQueue(TOPIC, "broker-a", 0)
        await api.send(route.master_addr("broker-a") or "", mq, Message(TOPIC, b"sealed"), "K1", 3.0)
        pulled = await api.pull(broker.addr, "G-tls", mq, 0, max_nums=1, suspend_s=0.0, timeout_s=3.0)
        return pulled.messages[0].body
    finally:
        await client.close()


async def test_routes_sends_and_pulls_go_over_tls_verified_against_the_ca(certs: Certs) -> None:
    async with DevCluster(brokers=1, queues=1, tls=certs.server_context()) as cluster:
        assert await round_trip(cluster, client_context(str(certs.ca))) == b"sealed"
        # without a CA nothing is verified (Java's default: a server makes itself a self-signed certificate)
        assert await round_trip(cluster, client_context()) == b"sealed"


async def test_a_certificate_that_does_not_verify_is_a_connect_error(certs: Certs) -> None:
    async with DevCluster(brokers=1, queues=1, tls=certs.server_context()) as cluster:
        with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await round_trip(cluster, client_context(str(certs.other_ca)))


async def test_plain_and_tls_do_not_mix(certs: Certs) -> None:
    async with DevCluster(brokers=1, queues=1, tls=certs.server_context()) as cluster:
        with pytest.raises(RocketMQError):  # a plain client on a TLS-only port gets no RocketMQ answer
            await round_trip(cluster, None)
    async with DevCluster(brokers=1, queues=1) as cluster:
        with pytest.raises(ConnectError):  # a TLS client on a plain port: the handshake fails
            await round_trip(cluster, client_context())


async def test_a_server_that_requires_a_client_certificate_gets_ours(certs: Certs) -> None:
    async with DevCluster(brokers=1, queues=1, tls=certs.server_context(client_auth=True)) as cluster:
        with_cert = client_context(str(certs.ca), str(certs.client_cert), str(certs.client_key))
        assert await round_trip(cluster, with_cert) == b"sealed"
        with pytest.raises(RocketMQError):
            await round_trip(cluster, client_context(str(certs.ca)))


def test_files_that_do_not_load_raise(certs: Certs) -> None:
    with pytest.raises(OSError):
        client_context("/nonexistent/ca.pem")
    with pytest.raises(ssl.SSLError):
        client_context(str(certs.ca), str(certs.client_cert), str(certs.server_key))  # a key not the cert's

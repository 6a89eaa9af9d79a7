"""TLS to name servers and brokers (rmq.tls; devbroker's TLS-only ports stand in for a RocketMQ server with
tls.server.mode=enforcing): routes, sends and pulls go over it; a certificate is verified when a CA is
given, not otherwise (Java's default); a server that requires a client certificate gets one."""

from __future__ import annotations

import logging
import os
import shutil
import ssl
from pathlib import Path

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq import BrokerApi, Message, MessageQueue, NameServerClient
from rocksidecar.rmq.errors import ConnectError, RocketMQError
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.tls import ReloadingContext, client_context
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


def test_a_rotated_certificate_is_loaded_for_new_connections_and_a_broken_one_is_not(
    certs: Certs, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(certs.client_cert, cert)
    shutil.copy(certs.client_key, key)
    now = [0.0]
    tls = ReloadingContext(str(certs.ca), str(cert), str(key), check_every_s=30, clock=lambda: now[0])
    first = tls()
    rotated = os.stat(cert).st_mtime_ns + 10**9
    os.utime(cert, ns=(rotated, rotated))  # cert-manager wrote the Secret again
    now[0] = 29.0
    assert tls() is first and tls.reloads == 0  # not looked at before check_every_s
    now[0] = 30.0
    second = tls()
    assert second is not first and tls.reloads == 1
    cert.write_text("half-written")
    now[0] = 60.0
    with caplog.at_level(logging.WARNING, "rocksidecar.rmq.tls"):
        assert tls() is second and tls.reloads == 1
    assert "do not load" in caplog.text
    shutil.copy(certs.client_cert, cert)  # the rest arrives
    now[0] = 90.0
    assert tls() is not second and tls.reloads == 2


async def test_new_connections_after_a_rotation_use_the_files_on_disk(certs: Certs, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(certs.client_cert, cert)
    shutil.copy(certs.client_key, key)
    tls = ReloadingContext(str(certs.ca), str(cert), str(key), check_every_s=0)
    async with DevCluster(brokers=1, queues=1, tls=certs.server_context(client_auth=True)) as cluster:
        client = RemotingClient(tls=tls, connect_timeout_s=2.0)
        try:
            ns = NameServerClient(client, cluster.namesrv_addr)
            assert "broker-a" in (await ns.get_cluster_info())["brokerAddrTable"]
            rotated = os.stat(cert).st_mtime_ns + 10**9
            os.utime(cert, ns=(rotated, rotated))
            old = await client.connection(cluster.namesrv_addr)
            cluster.namesrv.listener.drop_connections()  # the next request connects again
            await old.closed_event.wait()
            assert "broker-a" in (await ns.get_cluster_info())["brokerAddrTable"]
            assert tls.reloads == 1
        finally:
            await client.close()

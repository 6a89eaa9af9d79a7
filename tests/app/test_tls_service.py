"""The sidecar with ROCKSIDECAR_TLS on (the servers' certificates verified, a client certificate given),
against name servers and brokers that take TLS only and require a client certificate: a send is stored
and a subscription delivers it to the app."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx

from rocksidecar.app.service import COLUMN_FAMILIES, Service
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.devbroker import DevCluster
from rocksidecar.storage.rocks import RocksKV
from tests.app.conftest import settings_for
from tests.app.push_app import push_app
from tests.tls_certs import Certs


async def test_sends_and_deliveries_go_over_tls(certs: Certs, tmp_path: Path) -> None:
    async with DevCluster(brokers=2, queues=2, tls=certs.server_context(client_auth=True)) as cluster:
        for broker in cluster.brokers.values():
            broker.topics.ensure("TlsApp", 2)
        with push_app() as app:
            sub = SubscriptionSpec("orders", "TlsApp", "g-tls", app.url, consume_from="first")
            tls = {"tls_ca_file": str(certs.ca), "tls_cert_file": str(certs.client_cert)}
            settings = settings_for(
                tmp_path, namesrv=(cluster.namesrv_addr,), subscriptions=(sub,), tls=True,
                tls_key_file=str(certs.client_key), **tls,
            )  # fmt: skip
            (tmp_path / "data").mkdir()
            service = Service(settings, kv=RocksKV.open(tmp_path / "data" / "store", COLUMN_FAMILIES))
            await service.start()
            try:
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http.port}") as api:
                    body = {"topic": "TlsApp", "bodyBase64": base64.b64encode(b"over tls").decode()}
                    resp = await api.post("/v1/messages", json=body)
                    assert resp.status_code == 200, resp.text  # sent, not spooled: the broker took it
                    await app.until(lambda got: len(got) >= 1)
            finally:
                await service.stop()
    assert [g.body for g in app.got] == [b"over tls"]
    assert [m.body for b in cluster.brokers.values() for m in b.messages("TlsApp")] == [b"over tls"]

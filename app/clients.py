"""The process's RocketMQ client instance: one client id, route table, set of broker connections and
heartbeat for the producer and every consumer of the process (the sidecar's, a ``dmq`` replica's), as
one MQClientInstance serves every producer and consumer of a Java process."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rocksidecar.rmq import BrokerApi, Credentials, NameServerClient, RemotingClient
from rocksidecar.rmq.client_id import build_client_id, default_instance_name, default_ip
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.tls import ReloadingContext

from .config import Settings

log = logging.getLogger(__name__)


def client_instance(
    s: Settings, namesrv: Sequence[str], *, heartbeat_s: float, instance_name: str | None = None
) -> tuple[RemotingClient, ClientInstance]:
    """The connections (the caller closes them after the instance) and the instance over them; the
    brokers' requests on those connections go to the instance. ``instance_name``: None is pid-based, as
    Java's DEFAULT; a replica sets its own (the pod name) so its client id survives restarts."""
    credentials = Credentials(s.access_key, s.secret_key) if s.access_key else None
    tls = ReloadingContext(s.tls_ca_file, s.tls_cert_file, s.tls_key_file) if s.tls else None
    if s.tls and not s.tls_ca_file:
        log.warning("TLS to the name servers and brokers: their certificates are not verified "
                    "(set ROCKSIDECAR_TLS_CA_FILE to verify them)")  # fmt: skip
    client: ClientInstance | None = None

    async def on_request(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        assert client is not None  # connections open only once the instance below exists
        return await client.on_broker_request(conn, cmd)

    remoting = RemotingClient(credentials=credentials, on_request=on_request, tls=tls)
    client = ClientInstance(
        NameServerClient(remoting, tuple(namesrv)),
        api=BrokerApi(remoting, producer_group=s.producer_group),
        client_id=build_client_id(default_ip(), instance_name or default_instance_name()),
        heartbeat_s=heartbeat_s,
    )
    return remoting, client

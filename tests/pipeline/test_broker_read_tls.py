"""The Spark source's reads over TLS (options tls, tlsCaFile, tlsCertFile, tlsKeyFile), on devbroker
listening TLS-only and requiring a client certificate; bad combinations fail on the driver naming the
option, a file that does not load fails on the executor naming the options."""

from __future__ import annotations

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.pipeline.broker_read import Cluster
from rocksidecar.pipeline.options import OptionError
from rocksidecar.pipeline.queue_ranges import QueueRef
from rocksidecar.pipeline.read_options import parse
from rocksidecar.rmq import BrokerApi, Message, MessageQueue, RemotingClient, tls_context
from tests.tls_certs import Certs

TOPIC = "SparkTls"


async def test_a_read_goes_over_tls_with_a_client_certificate(certs: Certs) -> None:
    async with DevCluster(brokers=1, queues=1, tls=certs.server_context(client_auth=True)) as cluster:
        options = {"namesrv": cluster.namesrv_addr, "topic": TOPIC, "tls": "true", "tlsCaFile": str(certs.ca),
                   "tlsCertFile": str(certs.client_cert), "tlsKeyFile": str(certs.client_key)}  # fmt: skip
        opts = parse(options, streaming=False)
        assert (opts.tls, opts.tls_ca_file) == (True, str(certs.ca))
        sender = RemotingClient(tls=tls_context(str(certs.ca), str(certs.client_cert), str(certs.client_key)))
        reader = Cluster(opts)
        try:
            addr = cluster.brokers["broker-a"].addr
            await BrokerApi(sender).send(
                addr, MessageQueue(TOPIC, "broker-a", 0), Message(TOPIC, b"sealed"), "K", 3.0
            )
            pages = [p async for p in reader.read(QueueRef(TOPIC, "broker-a", 0), 0, 1)]
        finally:
            await reader.close()
            await sender.close()
    assert [(r[0], r[1]) for page in pages for r in page] == [(0, b"sealed")]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"tlsCaFile": "/ca.pem"}, "option tlsCaFile needs option tls=true"),
        ({"tls": "true", "tlsKeyFile": "/k.pem"}, "option tlsKeyFile needs option tlsCertFile"),
        ({"tls": "perhaps"}, "option tls='perhaps' must be true or false"),
    ],
)
def test_bad_tls_options_fail_on_the_driver(options: dict[str, str], error: str) -> None:
    with pytest.raises(OptionError, match=error):
        parse({"namesrv": "h:1", "topic": "T", **options}, streaming=False)


def test_a_file_that_does_not_load_fails_naming_the_options() -> None:
    opts = parse(
        {"namesrv": "h:1", "topic": "T", "tls": "true", "tlsCaFile": "/nonexistent.pem"}, streaming=False
    )
    with pytest.raises(OptionError, match=r"tlsCaFile.*does not load on this executor"):
        Cluster(opts)

"""The Spark source's reads (pipeline.broker_read.Cluster.read) over a queue holding records no reader
can decode, on devbroker: each is skipped with a warning naming its queue and offset, and the read
delivers every other record of the range instead of failing every retry of the task at that offset."""

from __future__ import annotations

import logging
import zlib

import pytest

from rocksidecar.app.subscriptions import spec
from rocksidecar.devbroker import DevCluster
from rocksidecar.pipeline import read_options
from rocksidecar.pipeline.broker_read import Cluster
from rocksidecar.pipeline.options import OptionError
from rocksidecar.pipeline.queue_ranges import QueueRef
from rocksidecar.pipeline.read_options import ReadOptions, parse
from rocksidecar.rmq.codes import SYSFLAG_COMPRESSED, SYSFLAG_COMPRESSION_LZ4
from rocksidecar.rmq.message_codec import MAX_BODY_BYTES
from tests.rmq.consumer.test_push_undecodable import send_raw

TOPIC = "SparkBad"


async def test_undecodable_records_are_skipped_with_a_warning(
    cluster: DevCluster, caplog: pytest.LogCaptureFixture
) -> None:
    await send_raw(cluster, b"zero", topic=TOPIC)
    await send_raw(cluster, zlib.compress(b"\0" * 100_000, 9), SYSFLAG_COMPRESSED, topic=TOPIC)
    await send_raw(cluster, b"\x00bad", SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_LZ4, topic=TOPIC)
    await send_raw(cluster, zlib.compress(b"three" * 100), SYSFLAG_COMPRESSED, topic=TOPIC)
    reader = Cluster(ReadOptions(cluster.namesrv_addr, (TOPIC,), max_body_bytes=50_000, pull_batch_size=2))
    try:
        with caplog.at_level(logging.WARNING, "rocksidecar.pipeline.broker_read"):
            pages = [p async for p in reader.read(QueueRef(TOPIC, "broker-a", 0), 0, 4)]
    finally:
        await reader.close()
    assert [(r[0], r[1]) for page in pages for r in page] == [(0, b"zero"), (3, b"three" * 100)]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert "offset 1 skipped" in warned[0] and "50000-byte limit" in warned[0]
    assert "offset 2 skipped" in warned[1] and "lz4" in warned[1]


def test_the_limit_is_an_option() -> None:
    base = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    assert parse(base, streaming=False).max_body_bytes == MAX_BODY_BYTES == read_options.MAX_BODY_BYTES
    assert parse({**base, "maxBodyBytes": "1048576"}, streaming=False).max_body_bytes == 1 << 20


@pytest.mark.parametrize("value", ["1023", "1073741825", "2147483648"])
def test_the_limit_has_a_subscriptions_bounds(value: str) -> None:
    """1 KiB to 1 GiB, as a subscription's max_body_bytes: above that it bounds nothing."""
    with pytest.raises(OptionError, match=r"maxBodyBytes.*between 1024 and 1073741824"):
        parse({"namesrv": "127.0.0.1:9876", "topic": "T", "maxBodyBytes": value}, streaming=False)
    assert (read_options.MIN_BODY_LIMIT, read_options.MAX_BODY_LIMIT) == (1024, spec.MAX_BODY_LIMIT)

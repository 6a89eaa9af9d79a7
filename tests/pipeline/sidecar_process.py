"""The real sidecar as a subprocess (bench.sidecar_process) and a way to read a topic back from
devbroker with the RocketMQ client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.sidecar_process import sidecar_process as _sidecar_process
from rocksidecar.rmq import BrokerApi, MessageExt, NameServerClient, RemotingClient
from tests.realbroker.conftest import pull_all


@dataclass(frozen=True)
class Sidecar:
    url: str
    namesrv: str

    def pull(self, topic: str) -> list[MessageExt]:
        """Every message stored in ``topic`` on every broker (offset 0 to the end of each queue)."""
        return asyncio.run(_pull(self.namesrv, topic))


async def _pull(namesrv: str, topic: str) -> list[MessageExt]:
    client = RemotingClient()
    try:
        route = await NameServerClient(client, namesrv).get_route(topic)
        return await pull_all(BrokerApi(client, producer_group="spark_tests"), route, topic, "spark_tests")
    finally:
        await client.close()


@contextlib.contextmanager
def sidecar_process(namesrv: str, data_dir: Path) -> Iterator[Sidecar]:
    with _sidecar_process(namesrv, data_dir) as (url, _):
        yield Sidecar(url, namesrv)

"""Fixtures of the pipeline tests: the fake sidecar on a loopback port, a client whose back-off sleeps
are recorded instead of slept, and for the Spark tests one shared local SparkSession, a devbroker and
the real sidecar as subprocesses, and a fault proxy in front of the sidecar."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from bench.common import DevbrokerProcess, devbroker_process
from rocksidecar.pipeline.backoff import Backoff
from rocksidecar.pipeline.client import SidecarClient
from tests.pipeline.fake_sidecar import FakeSidecar
from tests.pipeline.fault_proxy import FaultProxy
from tests.pipeline.http_double import serve
from tests.pipeline.sidecar_process import Sidecar, sidecar_process
from tests.pipeline.spark_local import local_spark


@pytest.fixture
def fake() -> FakeSidecar:
    return FakeSidecar()


@pytest.fixture
def fake_url(fake: FakeSidecar) -> Iterator[str]:
    with serve(fake) as url:
        yield url


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(fake_url: str, sleeps: list[float]) -> Iterator[SidecarClient]:
    with SidecarClient(
        fake_url, max_retries=5, backoff=Backoff(initial_s=0.1, max_s=2.0), sleep=sleeps.append, timeout_s=5
    ) as c:
        yield c


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark for the whole run: 2 cores, a failed task is tried up to 3 times, no UI."""
    session = local_spark(
        "local[2,3]",
        "rocksidecar-tests",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        },
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def devbroker() -> Iterator[DevbrokerProcess]:
    with devbroker_process(brokers=2, queues=4, max_log_mb=512, property_filter=True) as d:  # sql option
        yield d


@pytest.fixture(scope="session")
def sidecar(devbroker: DevbrokerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    with sidecar_process(devbroker.namesrv, tmp_path_factory.mktemp("sidecar")) as s:
        yield s


@pytest.fixture
def proxy(sidecar: Sidecar) -> Iterator[tuple[FaultProxy, str]]:
    """(the proxy, its URL) in front of the real sidecar."""
    p = FaultProxy(sidecar.url)
    try:
        with serve(p) as url:
            yield p, url
    finally:
        p.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic of its own for each test (devbroker creates it on the first send)."""
    return f"Spark_{request.node.name[:60].replace('[', '_').replace(']', '')}_{os.getpid()}".replace(
        "-", "_"
    )

"""Fixtures of the pipeline tests: the fake sidecar on a loopback port and a client whose back-off
sleeps are recorded instead of slept."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.backoff import Backoff
from pipeline.client import SidecarClient
from tests.pipeline.fake_sidecar import FakeSidecar
from tests.pipeline.http_double import serve


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

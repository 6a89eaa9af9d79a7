"""A sidecar on a full disk keeps draining (issue 11 item 4), on a real tmpfs (root only; skipped with the
reason otherwise) with an in-process devbroker: the disk filled by other data with brokers down and a
backlog spooled, new work answers 503 with Retry-After, the brokers come back, and the backlog drains
without a restart while the disk is still full, with no duplicate storm; once the other data is gone new
work is accepted again and the reserve is back. Both without a restart and for a restart on a full disk.
Before the disk reserve, the backlog stayed put until space was freed: every ack is a write, and RocksDB
refuses all writes after one failed (its reopen needs 8 MiB free)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from rocksidecar.app.config import ConfigError, Settings, load
from rocksidecar.app.service import Service, StartupError, disk_reserve
from rocksidecar.devbroker import DevCluster
from rocksidecar.storage import reserve as reserve_module
from rocksidecar.storage import rocks
from tests.app.conftest import Stack, settings_for
from tests.tmpfs import SmallDisk, small_disk

TOPIC = "DiskReserve"
RESERVE_MB = 16  # the smallest allowed (reserve.MIN_RESERVE_MB); new work resumes with 32 MiB free
DRAIN_TIMEOUT_S = 60.0


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmallDisk]:
    monkeypatch.setattr(rocks, "RECOVER_EVERY_S", 0.0)  # rate limits are not under test here
    monkeypatch.setattr(reserve_module, "CHECK_EVERY_S", 0.0)
    with small_disk(tmp_path / "fs", 48) as d:
        yield d


@asynccontextmanager
async def sidecar(cluster: DevCluster, disk: SmallDisk) -> AsyncIterator[Stack]:
    settings = settings_for(disk.path, namesrv=(cluster.namesrv_addr,), disk_reserve_mb=RESERVE_MB)
    async with running(settings, cluster) as stack:
        yield stack


@asynccontextmanager
async def running(settings: Settings, cluster: DevCluster) -> AsyncIterator[Stack]:
    service = Service(settings)
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http.port}", timeout=30) as http:
            yield Stack(cluster, service, http, kv=None)  # type: ignore[arg-type]
    finally:
        await service.stop()


async def spool(stack: Stack, n: int) -> set[str]:
    acked: set[str] = set()
    for i in range(0, n, 50):
        doc = {"messages": [{"topic": TOPIC, "body": f"backlog {i + k}"} for k in range(50)]}
        r = await stack.http.post("/v1/messages:batch", params={"ack": "spool"}, json=doc)
        assert r.status_code == 200, r.text
        assert {item["status"] for item in r.json()["results"]} == {"SPOOLED"}
        acked |= {item["id"] for item in r.json()["results"]}
    return acked


async def new_work(stack: Stack, body: str) -> httpx.Response:
    return await stack.http.post("/v1/messages", params={"ack": "spool"}, json={"topic": TOPIC, "body": body})


async def assert_refused(stack: Stack, times: int = 3) -> None:
    for i in range(times):
        r = await new_work(stack, f"refused {i}")
        assert r.status_code == 503 and r.headers.get("retry-after"), r.text
    ready = await stack.http.get("/readyz")
    assert ready.status_code == 503 and "disk is full" in ready.json()["store"], ready.text


def reserve_of(disk: SmallDisk) -> Path:
    return disk.path / "data" / "reserve"


async def drain_while_full(stack: Stack, disk: SmallDisk, acked: set[str]) -> None:
    await stack.start_brokers()
    await stack.drain(timeout_s=DRAIN_TIMEOUT_S)
    assert stack.service.retry.stats().pending == 0
    assert disk.free_bytes() < 2 * RESERVE_MB * reserve_module.MIB  # still full of the other data
    await assert_refused(stack)  # new work refused throughout, the drain done
    stored = Counter(m.uniq_key for m in stack.stored(TOPIC))
    assert acked <= set(stored), f"{len(acked - set(stored))} acknowledged messages not delivered"
    assert max(stored.values()) <= 2, f"a duplicate storm: {stored.most_common(3)}"


async def recover(stack: Stack, disk: SmallDisk) -> None:
    disk.free()  # the other data goes: new work is accepted again, the reserve set aside again
    r = await new_work(stack, "after")
    assert r.status_code in (200, 202), r.text
    assert reserve_of(disk).stat().st_size == RESERVE_MB * reserve_module.MIB
    assert (await stack.http.get("/readyz")).json()["store"] == "ok"


@pytest.mark.parametrize("raw", ["-1", "lots", "1048577", "1", "8", "15"])
def test_a_bad_reserve_size_names_the_setting(raw: str) -> None:
    with pytest.raises(ConfigError, match="ROCKSIDECAR_DISK_RESERVE_MB"):
        load({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_DISK_RESERVE_MB": raw})


def test_the_reserve_defaults_to_64_mib_in_the_data_dir_and_0_disables_it(tmp_path: Path) -> None:
    settings = load({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_DATA_DIR": str(tmp_path)})
    reserve = disk_reserve(settings)
    assert reserve is not None
    assert reserve.reserve.size == 64 * reserve_module.MIB and reserve.reserve.path == tmp_path / "reserve"
    assert disk_reserve(load({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_DISK_RESERVE_MB": "0"})) is None


def test_a_reserve_too_small_to_drain_in_is_refused_with_its_minimum() -> None:
    with pytest.raises(
        ConfigError, match=r"^ROCKSIDECAR_DISK_RESERVE_MB: .*8 MiB is too small.*needs 16 MiB"
    ):
        load({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_DISK_RESERVE_MB": "8"})
    assert load({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_DISK_RESERVE_MB": "16"}).disk_reserve_mb == 16


def test_a_service_given_a_reserve_too_small_does_not_start(tmp_path: Path) -> None:
    """Settings built without load() (tests, embedders) are checked at start too, before the store opens."""
    with pytest.raises(StartupError, match=r"ROCKSIDECAR_DISK_RESERVE_MB: .* too small") as raised:
        Service(settings_for(tmp_path, namesrv=("127.0.0.1:1",), disk_reserve_mb=8))
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "data" / "store").exists()


async def test_a_full_disk_drains_the_backlog_without_a_restart(disk: SmallDisk) -> None:
    async with DevCluster(brokers=2, queues=4) as cluster, sidecar(cluster, disk) as stack:
        assert reserve_of(disk).stat().st_size == RESERVE_MB * reserve_module.MIB
        await stack.stop_brokers()
        acked = await spool(stack, 1000)
        disk.fill()
        for i in range(200):  # the WAL's last page may still take a few
            r = await new_work(stack, f"while filling {i}")
            if r.status_code != 202:
                break
            acked.add(r.json()["id"])
        assert r.status_code == 503, r.text
        assert not reserve_of(disk).exists()  # released for the drain
        await assert_refused(stack)
        await drain_while_full(stack, disk, acked)
        await recover(stack, disk)


async def test_restarted_on_a_full_disk_it_starts_and_drains(disk: SmallDisk) -> None:
    async with DevCluster(brokers=2, queues=4) as cluster:
        async with sidecar(cluster, disk) as stack:
            await stack.stop_brokers()
            acked = await spool(stack, 1000)
        disk.fill()
        async with sidecar(cluster, disk) as stack:
            assert not reserve_of(disk).exists()
            await assert_refused(stack)
            await drain_while_full(stack, disk, acked)
            await recover(stack, disk)


SMALL_DISK_MB = 64
SMALL_RESERVE_MB = reserve_module.MIN_RESERVE_MB
BIG_BODY = 256 * 1024  # characters; hex of random bytes, so the WAL grows by about this much per request


async def test_the_smallest_reserve_drains_a_disk_the_spool_itself_filled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 item 6: the spool itself fills the disk (brokers down), so the WAL is most of it. Before
    the memtables and WAL were capped to fit in the reserve, the reopen in the released reserve had to
    flush a WAL twice the reserve's size, failed with ENOSPC, and nothing was delivered, across restarts
    too."""
    monkeypatch.setattr(rocks, "RECOVER_EVERY_S", 0.0)
    monkeypatch.setattr(reserve_module, "CHECK_EVERY_S", 0.0)
    body = os.urandom(BIG_BODY // 2).hex()
    with small_disk(tmp_path / "fs", SMALL_DISK_MB) as d:
        async with DevCluster(brokers=2, queues=4) as cluster:
            settings = settings_for(
                d.path,
                namesrv=(cluster.namesrv_addr,),
                disk_reserve_mb=SMALL_RESERVE_MB,
                max_body_bytes=2 * BIG_BODY,
            )
            acked: set[str] = set()
            async with running(settings, cluster) as stack:
                await stack.stop_brokers()
                for i in range(2 * SMALL_DISK_MB * reserve_module.MIB // BIG_BODY):  # twice what fits
                    r = await new_work(stack, f"{i} {body}")
                    if r.status_code != 202:
                        break
                    acked.add(r.json()["id"])
                assert r.status_code == 503, r.text
                await stack.start_brokers()
            async with running(settings, cluster) as stack:  # restarted with the brokers back
                await stack.drain(timeout_s=DRAIN_TIMEOUT_S)
                assert stack.service.retry.stats().pending == 0
                stored = {m.uniq_key for m in stack.stored(TOPIC)}
                assert acked <= stored, (
                    f"{len(acked - stored)} of {len(acked)} acknowledged messages not delivered"
                )
                r = await new_work(stack, "after the drain")
                assert r.status_code in (200, 202), r.text

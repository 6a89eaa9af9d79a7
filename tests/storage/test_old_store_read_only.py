"""A store an earlier version left, lacking the column families added since (dmq_forwarded, 2571c1c;
transactions, 6a81c84), opened by today's code on a full disk: the read-write open fails for lack of
space and the read-only fallback (RocksKV.open, and recover()'s) must open the families the directory
has, the others read as empty, until a read-write reopen creates them.

The old bytes come from commit 85519f0 (the parent of 431331e, 2026-11-23), run from a worktree (moved
here from the session-31 review, tests/storage/test_zz_review_upgrade.py):

- its sidecar store had the column families retry_*, idem, idem_expiry and delay_* only (app/service.py
  COLUMN_FAMILIES);
- RetryStore(...).spool(RetryRecord(...), 1_764_000_005_000) wrote the pending, index and meta rows below.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocksidecar.app.assembly import COLUMN_FAMILIES as SIDECAR_CFS
from rocksidecar.app.transactions import records as tx_records
from rocksidecar.app.wiring import open_store
from rocksidecar.retry.record import decode_record
from rocksidecar.storage import rocks
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import Access, RocksKV
from tests.tmpfs import SmallDisk, small_disk

# --- what 85519f0's sidecar store held -----------------------------------------------------------------
OLD_CFS = (
    "retry_pending", "retry_index", "retry_dead", "retry_meta",
    "idem", "idem_expiry",
    "delay_due", "delay_index", "delay_done", "delay_done_expiry", "delay_meta",
)  # fmt: skip
OLD_PENDING_KEY = b"1764000005000:0:orders:0A0000010000000000000000000000AB"
OLD_PENDING_VALUE = bytes.fromhex(
    "01000000fc7b226964223a223041303030303031303030303030303030303030303030303030303030304142222c2274"
    "6f706963223a226f7264657273222c2274616773223a6e756c6c2c226b657973223a5b226b31225d2c2270726f7073"
    "223a7b2270223a2276227d2c22736b223a6e756c6c2c2274797065223a226f7264657273222c226372656174656422"
    "3a313736343030303030303030302c2266697273745f6661696c757265223a313736343030303030303030302c2272"
    "657472696573223a302c226572726f72223a226e6f20726f757465222c22686973746f7279223a5b5b313736343030"
    "303030303030302c226e6f20726f757465225d5d7d68656c6c6f"
)
OLD_INDEX_KEY = b"0A0000010000000000000000000000AB\x00p" + OLD_PENDING_KEY
OLD_ROWS = (
    Put("retry_pending", OLD_PENDING_KEY, OLD_PENDING_VALUE),
    Put("retry_index", OLD_INDEX_KEY, b""),
    Put("retry_meta", b"clock_high_water_ms", b"1764000000000"),
)


def _old_store(path: Path) -> None:
    """A store as 85519f0 left it: its column families only, a message waiting in the retry store."""
    kv = RocksKV.open(path, OLD_CFS)
    try:
        kv.write(list(OLD_ROWS), sync=True)
    finally:
        kv.close()


_real_open_db = rocks._open_db  # RocksDB's own, for "room again" after _no_space_for_read_write


def _no_space_for_read_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-write open fails as RocksDB's does on a full disk (the read-only open is RocksDB's own)."""
    real_open = rocks._open_db

    def open_db(path: Any, names: Any, access: Access, *args: Any, **kwargs: Any) -> Any:
        if access is Access.READ_WRITE:
            raise StorageError(f"cannot open store {path}: IO error: No space left on device")
        return real_open(path, names, access, *args, **kwargs)

    monkeypatch.setattr(rocks, "_open_db", open_db)


# --- an earlier version's store on a full disk does not open at all ---------------------------------------
def test_an_old_store_on_a_full_disk_opens_read_only_with_its_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker down for weeks fills the disk with retries; the user upgrades and restarts. Today's
    store opens read-only on a full disk (503 for new work, status answered, reopened read-write by
    recover() once there is room, the disk reserve released for it). An earlier version's store lacks the
    column families added since (dmq_forwarded, transactions): the read-write open would create them,
    but the read-only fallback asked RocksDB for every one of them and RocksDB refused
    ("Column family not found"): StartupError, the sidecar did not start at all."""
    data_dir = tmp_path / "data"
    _old_store(data_dir / "store")
    _no_space_for_read_write(monkeypatch)
    kv = open_store(data_dir, held_hint="test", column_families=SIDECAR_CFS, read_only_when_full=True)
    try:
        assert kv.read_only_reason is not None and "No space left" in kv.read_only_reason
        raw = kv.get("retry_pending", OLD_PENDING_KEY)
        assert raw == OLD_PENDING_VALUE
        assert decode_record(raw).body == b"hello"
    finally:
        kv.close()


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmallDisk]:
    monkeypatch.setattr(rocks, "RECOVER_EVERY_S", 0.0)
    with small_disk(tmp_path / "fs", 24) as d:
        yield d


def test_an_old_store_on_a_really_full_disk_opens_read_only(disk: SmallDisk) -> None:
    """The same on a real full tmpfs (needs root, as tests/storage/test_disk_full.py): RocksDB's own
    refusal of the read-write open, then of the read-only open for the missing column families."""
    data_dir = disk.path / "data"
    _old_store(data_dir / "store")
    disk.fill()
    kv = open_store(data_dir, held_hint="test", column_families=SIDECAR_CFS, read_only_when_full=True)
    try:
        assert kv.read_only_reason is not None and "No space left" in kv.read_only_reason
        assert kv.get("retry_pending", OLD_PENDING_KEY) == OLD_PENDING_VALUE
    finally:
        kv.close()


# --- the missing column families read as empty until recover() creates them -----------------------------
MISSING = tuple(cf for cf in SIDECAR_CFS if cf not in OLD_CFS)


def test_the_missing_column_families_read_as_empty_and_refuse_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listed (the transaction records check that their family is), empty, and written as any read-only
    store is: refused with a StorageError naming the store, not a KeyError."""
    assert MISSING  # dmq_forwarded, transactions
    _old_store(tmp_path / "store")
    _no_space_for_read_write(monkeypatch)
    kv = RocksKV.open(tmp_path / "store", SIDECAR_CFS, read_only_when_full=True)
    try:
        assert tx_records.CF in kv.column_families and set(SIDECAR_CFS) <= set(kv.column_families)
        for cf in MISSING:
            assert kv.get(cf, b"k") is None
            assert kv.get_many(cf, [b"a", b"b"]) == [None, None]
            assert kv.scan(cf) == [] and list(kv.iterate(cf, lower=b"a", upper=b"z")) == []
            assert kv.count(cf) == 0 and kv.approximate_count(cf) == 0 and kv.sst_files(cf) == 0
            kv.flush(cf)  # the disk reserve's relief flushes every listed family: nothing to flush
            kv.compact(cf)
            with pytest.raises(StorageError, match="read-only"):
                kv.write([Put(cf, b"k", b"v")], sync=True)
        with pytest.raises(StorageError, match="unknown column family"):
            kv.get("no_such_family", b"k")  # a family nobody listed is still an error
        assert kv.get("retry_pending", OLD_PENDING_KEY) == OLD_PENDING_VALUE
    finally:
        kv.close()


def test_recover_keeps_an_old_store_readable_then_creates_the_missing_families(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recover() on a still-full disk falls back to read-only as the open does (it asked for every
    family too: the reopen failed and left the store closed); once there is room its read-write reopen
    creates the missing families, which then take writes."""
    monkeypatch.setattr(rocks, "RECOVER_EVERY_S", 0.0)
    _old_store(tmp_path / "store")
    _no_space_for_read_write(monkeypatch)
    kv = RocksKV.open(tmp_path / "store", SIDECAR_CFS, read_only_when_full=True)
    try:
        with pytest.raises(StorageError, match="No space left"):
            kv.recover()
        assert kv.read_only_reason is not None and "No space left" in kv.read_only_reason
        assert kv.get("retry_pending", OLD_PENDING_KEY) == OLD_PENDING_VALUE
        assert kv.get(tx_records.CF, b"k") is None
        monkeypatch.setattr(rocks, "_open_db", _real_open_db)  # room again
        kv.recover()
        assert kv.read_only_reason is None
        kv.write([Put(cf, b"k", cf.encode()) for cf in MISSING], sync=True)
        assert [kv.get(cf, b"k") for cf in MISSING] == [cf.encode() for cf in MISSING]
        assert kv.get("retry_pending", OLD_PENDING_KEY) == OLD_PENDING_VALUE
    finally:
        kv.close()
    reopened = RocksKV.open(tmp_path / "store", OLD_CFS)  # the directory now has them all
    try:
        assert set(SIDECAR_CFS) <= set(reopened.column_families)
        assert reopened.get(tx_records.CF, b"k") == tx_records.CF.encode()
    finally:
        reopened.close()

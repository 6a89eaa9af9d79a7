"""One contract for every KV: RocksKV on tmp_path and MemoryKV must behave the same."""

from __future__ import annotations

import pytest

from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.kv import KV, Delete, DeleteRange, Put


def fill(kv: KV, cf: str, keys: list[bytes]) -> None:
    kv.write([Put(cf, k, b"v:" + k) for k in keys], sync=False)


def test_put_get_and_missing(kv: KV) -> None:
    kv.write([Put("alpha", b"k", b"\x00\xffbinary")], sync=True)
    assert kv.get("alpha", b"k") == b"\x00\xffbinary"
    assert kv.get("alpha", b"nope") is None
    assert kv.get("beta", b"k") is None  # column families are separate keyspaces


def test_get_many_answers_each_key_in_order(kv: KV) -> None:
    kv.write([Put("alpha", b"k1", b""), Put("alpha", b"k2", b"two"), Put("beta", b"k3", b"3")], sync=True)
    got = kv.get_many("alpha", [b"k2", b"nope", b"k1", b"k3", b"k2"])
    assert got == [b"two", None, b"", None, b"two"]  # an empty value is not a miss
    assert kv.get_many("alpha", []) == []
    with pytest.raises(StorageError):
        kv.get_many("gamma", [b"k1"])


def test_scan_is_bytewise_ordered(kv: KV) -> None:
    keys = [b"\xff", b"a", b"ab", b"\x00", b"b", b"aa", b"\x7f\x80"]
    fill(kv, "alpha", keys)
    assert [k for k, _ in kv.scan("alpha")] == sorted(keys)
    assert kv.scan("alpha", limit=1) == [(b"\x00", b"v:\x00")]


def test_scan_bounds_lower_inclusive_upper_exclusive(kv: KV) -> None:
    fill(kv, "alpha", [b"k%d" % i for i in range(10)])
    got = [k for k, _ in kv.scan("alpha", lower=b"k3", upper=b"k7")]
    assert got == [b"k3", b"k4", b"k5", b"k6"]
    # a lower bound alone must not act as an upper bound (rocksdict 0.3.29's lower-bound setter does)
    assert [k for k, _ in kv.scan("alpha", lower=b"k8")] == [b"k8", b"k9"]
    assert [k for k, _ in kv.scan("alpha", upper=b"k2")] == [b"k0", b"k1"]
    assert [k for k, _ in kv.scan("alpha", lower=b"k25", upper=b"k5", limit=2)] == [b"k3", b"k4"]
    assert kv.scan("alpha", lower=b"k7", upper=b"k3") == []


def test_iterate_streams_the_same_items(kv: KV) -> None:
    fill(kv, "beta", [b"x%03d" % i for i in range(50)])
    assert list(kv.iterate("beta", lower=b"x010", upper=b"x020")) == kv.scan(
        "beta", lower=b"x010", upper=b"x020"
    )


def test_write_applies_ops_in_order_across_column_families(kv: KV) -> None:
    kv.write(
        [
            Put("alpha", b"a", b"1"),
            Delete("alpha", b"a"),
            Delete("beta", b"b"),
            Put("beta", b"b", b"2"),
            Put("beta", b"c", b"3"),
        ],
        sync=True,
    )
    assert kv.get("alpha", b"a") is None
    assert kv.scan("beta") == [(b"b", b"2"), (b"c", b"3")]


def test_delete_range_removes_half_open_interval(kv: KV) -> None:
    fill(kv, "alpha", [b"k%d" % i for i in range(6)])
    kv.write([DeleteRange("alpha", b"k1", b"k4")], sync=True)
    assert [k for k, _ in kv.scan("alpha")] == [b"k0", b"k4", b"k5"]


def test_counts(kv: KV) -> None:
    fill(kv, "alpha", [b"k%d" % i for i in range(25)])
    kv.write([Delete("alpha", b"k0")], sync=False)
    assert kv.count("alpha") == 24
    assert kv.count("beta") == 0
    assert kv.approximate_count("alpha") >= 0


def test_compact_and_sync_keep_data(kv: KV) -> None:
    fill(kv, "alpha", [b"k%d" % i for i in range(20)])
    kv.write([Delete("alpha", b"k%d" % i) for i in range(10)], sync=False)
    kv.sync_wal()
    kv.compact("alpha")
    kv.compact("alpha", None, b"k15")
    assert [k for k, _ in kv.scan("alpha")] == sorted(b"k%d" % i for i in range(10, 20))


def test_unknown_column_family_is_a_storage_error(kv: KV) -> None:
    with pytest.raises(StorageError):
        kv.get("gamma", b"k")
    with pytest.raises(StorageError):
        kv.write([Put("gamma", b"k", b"v")], sync=True)
    assert kv.get("alpha", b"k") is None  # the failed batch wrote nothing


def test_closed_store_raises_storage_error(kv: KV) -> None:
    kv.close()
    with pytest.raises(StorageError):
        kv.get("alpha", b"k")
    with pytest.raises(StorageError):
        kv.write([Put("alpha", b"k", b"v")], sync=True)

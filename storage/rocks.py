"""RocksKV: the KV protocol on RocksDB through rocksdict, the only module that imports rocksdict.

One DB directory, raw mode (plain bytewise comparator), one column family per keyspace. Every
rocksdict exception is translated into storage.errors at this seam.
"""

from __future__ import annotations

import enum
import gc
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast, overload

from rocksdict import (
    AccessType,
    BlockBasedIndexType,
    BlockBasedOptions,
    BottommostLevelCompaction,
    Cache,
    ColumnFamily,
    CompactOptions,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from .errors import StorageError, StoreLockedError, WriteStalledError
from .kv import Delete, DeleteRange, Op, Put
from .limits import DB_WRITE_BUFFER_BYTES, MIN_FREE_BYTES

log = logging.getLogger(__name__)

# Tombstones of delivered keys must not pile up in SST files: an SST in which 5 000 of any 10 000
# consecutive entries are deletions is marked for compaction by RocksDB's own background threads
# (which, unlike a compact_range called from Python, never hold the GIL).
DELETION_WINDOW = 10_000
DELETION_TRIGGER = 5_000
DELETION_RATIO = 0.5
COUNT_CHUNK = 256  # keys a background count reads (~0.1 ms) between two pauses
COUNT_PAUSE_S = 0.001
# Memory bounds (bench/RESULTS.md, peak RSS with 1M pending): all column families' memtables
# together, and one block cache shared by every column family (RocksDB gives each its own 32 MiB).
BLOCK_CACHE_BYTES = 32 * 1024 * 1024
BLOOM_BITS_PER_KEY = 10  # ~1% false positives


RECOVER_EVERY_S = 1.0
# SST files per column family above which an open compacts it (see RocksKV.merge_small_files).
MAX_FILES_PER_CF = 8
SMALL_CF_BYTES = 8 * 1024 * 1024  # a column family this small is merged whenever it has two files or more
TARGET_FILE_BYTES = 64 * 1024 * 1024  # SST file size compactions aim at (RocksDB's default, set explicitly)


# How RocksDB's Status::Incomplete reads: a write with no_slowdown that met a write stall.
STALLED = "Result incomplete"


class Access(enum.Enum):
    READ_WRITE = "read_write"
    READ_ONLY = "read_only"  # a point-in-time view of a directory no process is writing
    SECONDARY = "secondary"  # a view of a directory a running process holds; needs a scratch dir


@contextmanager
def _translate(what: str) -> Iterator[None]:
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        text = str(exc) or type(exc).__name__
        if "/LOCK" in text or "lock hold" in text:
            raise StoreLockedError(f"{what}: {text}") from exc
        if text.startswith(STALLED):
            raise WriteStalledError(f"{what}: {text}") from exc
        raise StorageError(f"{what}: {text}") from exc


def _existing_column_families(path: str | Path) -> list[str]:
    """RocksDB opens a directory only with all its column families: the retry store's CLI must also
    open those of the idempotency store that share the directory."""
    if not (Path(path) / "CURRENT").exists():
        return []
    with _translate(f"cannot list the column families of {path}"):
        return [name for name in Rdict.list_cf(str(path), Options(raw_mode=True)) if name != "default"]


def _present(path: str | Path, names: tuple[str, ...]) -> tuple[str, ...]:
    """The column families of ``names`` the directory has: all a read-only or secondary open may ask for.
    RocksDB creates missing ones only in a read-write open; a view asking for one is refused ("Column
    family not found"), and a store written before a family existed (dmq_forwarded, transactions) then
    could not open at all on a full disk. The others read as empty (_ABSENT) until a read-write open."""
    existing = set(_existing_column_families(path))
    return tuple(name for name in names if name in existing)


class _AbsentFamily:
    """A listed column family a read-only or secondary view opened without (see _present): empty, with
    nothing to flush or compact. Writes to it are refused by RocksKV.write, as a view refuses any."""

    @overload
    def get(self, key: bytes) -> None: ...
    @overload
    def get(self, key: list[bytes]) -> list[None]: ...
    def get(self, key: bytes | list[bytes]) -> list[None] | None:
        return [None] * len(key) if isinstance(key, list) else None  # a list: get_many's MultiGet

    def items(self, from_key: bytes | None = None, read_opt: ReadOptions | None = None) -> Iterator[Any]:
        return iter(())

    def keys(self, read_opt: ReadOptions | None = None) -> Iterator[Any]:
        return iter(())

    def property_value(self, name: str) -> str | None:
        return None

    def compact_range(self, begin: bytes | None, end: bytes | None, compact_opt: CompactOptions) -> None:
        pass

    def flush(self, wait: bool = True) -> None:
        pass


_ABSENT = _AbsentFamily()


def _cf_options(cache: Cache, write_buffer_bytes: int) -> Options:
    opts = Options(raw_mode=True)
    # Also bounds the WAL's preallocation (RocksDB's default 64 MiB would take the released reserve).
    opts.set_write_buffer_size(write_buffer_bytes)
    opts.add_compact_on_deletion_collector_factory(DELETION_WINDOW, DELETION_TRIGGER, DELETION_RATIO)
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    # Memory that does not grow with the data (issue 18, bench/scale.py): by default every open SST
    # keeps its whole index block on the heap, outside the block cache: ~4 bytes of RSS per stored
    # key-value. Index and filter blocks go into the one bounded cache instead, partitioned so that
    # only the small top level of each file stays pinned; the partitions a seek or get needs are
    # cached like data blocks.
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_top_level_index_and_filter(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    # A get of an absent key (the delay store's overwrite check, idempotency, index lookups) reads no
    # data block of the files the filter rules out.
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    opts.set_block_based_table_factory(table)
    # LZ4 over Snappy: as cheap, slightly smaller on the JSON metadata and keys (bodies are the
    # application's bytes, often incompressible).
    opts.set_compression_type(DBCompressionType.lz4())
    opts.set_target_file_size_base(TARGET_FILE_BYTES)
    return opts


def _write_options(sync: bool, no_slowdown: bool) -> WriteOptions:
    opts = WriteOptions()
    opts.sync = sync
    opts.no_slowdown = no_slowdown
    return opts


def _no_space(exc: StorageError) -> bool:
    return "No space left" in str(exc)


def _open_db(
    path: str | Path,
    names: tuple[str, ...],
    access: Access,
    secondary_dir: str | Path | None,
    write_buffer_bytes: int = DB_WRITE_BUFFER_BYTES,
) -> Rdict:
    opts = Options(raw_mode=True)
    opts.create_if_missing(access is Access.READ_WRITE)
    opts.create_missing_column_families(access is Access.READ_WRITE)
    opts.set_max_total_wal_size(write_buffer_bytes)
    opts.set_db_write_buffer_size(write_buffer_bytes)
    # The default column family's memtable, too: RocksDB's recovery from a failed flush waits for
    # twice the largest one free, which a 64 MiB default would keep above the reserve forever.
    opts.set_write_buffer_size(write_buffer_bytes)
    opts.set_keep_log_file_num(5)
    if access is Access.READ_WRITE:
        with _translate(f"cannot create {path}"):
            Path(path).mkdir(parents=True, exist_ok=True)
        access_type = AccessType.read_write()
    elif access is Access.READ_ONLY:
        access_type = AccessType.read_only(False)
    else:
        if secondary_dir is None:
            raise ValueError("a secondary instance needs secondary_dir")
        access_type = AccessType.secondary(str(secondary_dir))
    cache = Cache(BLOCK_CACHE_BYTES)
    with _translate(f"cannot open store {path}"):
        db = Rdict(
            str(path),
            opts,
            column_families={name: _cf_options(cache, write_buffer_bytes) for name in names},
            access_type=access_type,
        )
        if access is Access.SECONDARY:
            db.try_catch_up_with_primary()
        return db


# Waits for a handle of this process to let go of the directory's LOCK at a reopen (see _open_released)
RELEASE_WAITS_S = (0.0, 0.05, 0.2, 0.5)
_HELD_HERE = "lock hold by current process"  # RocksDB's words when this process still holds the LOCK


def _open_released(open_db: Callable[[], Rdict]) -> Rdict:
    """``open_db()`` (an ``_open_db``), waiting a little for this process's previous handle to go. rocksdict
    keeps a closed DB and its LOCK alive while any object of it is referenced; column families are closed
    with it (RocksKV._close_db), but an executor thread finishing a read, or an iterator in a reference
    cycle, may still hold it: a reopen in the same process (a restart of the service, the disk reserve's
    recovery) then failed with "lock hold by current process ... No locks available". Collected and tried
    again a few times (~0.75 s at most); another process's lock, or ours still held after that, is raised
    as before."""
    for wait_s in RELEASE_WAITS_S:
        if wait_s:
            time.sleep(wait_s)  # an executor thread's read still holding the handle: milliseconds
        try:
            return open_db()
        except StoreLockedError as exc:
            if _HELD_HERE not in str(exc):
                raise
            gc.collect()  # a reference cycle holding the old handle: freed now, not at the next collection
    return open_db()


class RocksKV:
    """A RocksDB directory opened with named column families (missing ones are created)."""

    def __init__(
        self,
        db: Rdict,
        column_families: tuple[str, ...],
        path: str,
        *,
        opened: tuple[str, ...] | None = None,
        read_only_reason: str | None = None,
        write_buffer_bytes: int = DB_WRITE_BUFFER_BYTES,
    ) -> None:
        """``opened``: the column families ``db`` was opened with, when not all of ``column_families``
        (a read-only or secondary view of a store that lacks some: see _present)."""
        self.column_families = column_families
        self.path = path
        self.write_buffer_bytes = write_buffer_bytes
        self._db: Rdict | None = None
        self._attach(db, column_families if opened is None else opened)
        # Set while a read-write store is open read-only (the disk was full at open) or its writes
        # failed: recover() reopens it read-write once there is space again.
        self.read_only_reason = read_only_reason
        self._write_failed = read_only_reason is not None
        self._recovered_at = -RECOVER_EVERY_S
        self._write_options = {
            (sync, no_slowdown): _write_options(sync, no_slowdown)
            for sync in (False, True)
            for no_slowdown in (False, True)
        }

    def _attach(self, db: Rdict, opened: tuple[str, ...]) -> None:
        self._db = db
        self._cfs = {name: db.get_column_family(name) for name in opened}
        self._handles: dict[str, ColumnFamily] = {name: db.get_column_family_handle(name) for name in opened}

    @classmethod
    def open(
        cls,
        path: str | Path,
        column_families: Iterable[str],
        *,
        access: Access = Access.READ_WRITE,
        secondary_dir: str | Path | None = None,
        read_only_when_full: bool = False,
        write_buffer_bytes: int = DB_WRITE_BUFFER_BYTES,
    ) -> RocksKV:
        """Open (creating if needed, when read-write) the DB at ``path`` with ``column_families``
        and any others it already has. With ``read_only_when_full``, a read-write open that fails for
        lack of space opens the existing store read-only instead (writes fail until recover()).
        ``write_buffer_bytes`` bounds the memtables and the WAL: what a reopen must have room to flush.

        Raises:
            StoreLockedError: another process has the directory open read-write.
            StorageError: any other failure to open.
        """
        names = tuple(dict.fromkeys([*column_families, *_existing_column_families(path)]))
        opened = names if access is Access.READ_WRITE else _present(path, names)
        try:
            db = _open_released(lambda: _open_db(path, opened, access, secondary_dir, write_buffer_bytes))
        except StorageError as exc:
            if not (read_only_when_full and access is Access.READ_WRITE and _no_space(exc)):
                raise
            present = _present(path, names)
            db = _open_db(path, present, Access.READ_ONLY, None)
            return cls(
                db,
                names,
                str(path),
                opened=present,
                read_only_reason=str(exc),
                write_buffer_bytes=write_buffer_bytes,
            )
        kv = cls(db, names, str(path), opened=opened, write_buffer_bytes=write_buffer_bytes)
        if access is Access.READ_WRITE:
            kv.merge_small_files()
        return kv

    def _int_property(self, cf: str, name: str) -> int:
        """A numeric RocksDB property of ``cf`` (0 when RocksDB has none)."""
        handle = self._cf(cf)
        with _translate(name):
            return int(handle.property_value(name) or 0)

    def sst_files(self, cf: str) -> int:
        return sum(self._int_property(cf, f"rocksdb.num-files-at-level{n}") for n in range(7))

    def merge_small_files(self) -> None:
        """Every open flushes what the WAL held into one new SST per written column family, and
        RocksDB moves such small, disjoint files down the levels without merging them: they pile up
        across restarts, each an open file descriptor (issue 11: 47 -> 96 fds over 20 restarts).
        Column families past MAX_FILES_PER_CF files, or small ones (meta, idempotency, done markers)
        with more than one, are compacted into one here: milliseconds for the small ones, ~2.5 s for a
        column family of 1M pending messages (bench/RESULTS.md), once per MAX_FILES_PER_CF restarts.
        The bound counts only files beyond those the data needs at TARGET_FILE_BYTES each: a column
        family of 10 M pending (~50 full-size files after any compaction) would otherwise be rewritten,
        3 GB, at every open (issue 18)."""
        for cf in self.column_families:
            files = self.sst_files(cf)
            if files <= 1:
                continue
            size = self._sst_bytes(cf)
            if files > MAX_FILES_PER_CF + size // TARGET_FILE_BYTES or size < SMALL_CF_BYTES:
                self.compact(cf)

    def _sst_bytes(self, cf: str) -> int:
        return self._int_property(cf, "rocksdb.total-sst-files-size")

    def recover(self) -> None:
        """After failed writes (or a read-only open on a full disk), reopen the store read-write if
        there is space again: RocksDB refuses every write after a failed WAL append until reopened.
        A no-op while writes have not failed; tried at most once per RECOVER_EVERY_S.

        Raises:
            StorageError: still no space, or the reopen failed (the store stays readable).
        """
        if not self._write_failed or self._db is None:
            return
        now = time.monotonic()
        if now - self._recovered_at < RECOVER_EVERY_S:
            raise StorageError(f"store {self.path} is not writable: {self.read_only_reason}")
        self._recovered_at = now
        stat = os.statvfs(self.path)
        free = stat.f_bavail * stat.f_frsize
        if free < MIN_FREE_BYTES:
            raise StorageError(f"no space left for store {self.path}: {free} bytes free")
        self._close_db()
        names = self.column_families
        try:
            self._attach(_open_db(self.path, names, Access.READ_WRITE, None, self.write_buffer_bytes), names)
        except StorageError as exc:
            present = _present(self.path, names)  # the read-write open creates the missing families
            self._attach(_open_db(self.path, present, Access.READ_ONLY, None), present)
            self.read_only_reason = str(exc)
            raise
        self._write_failed, self.read_only_reason = False, None

    def _close_db(self) -> str | None:
        """Drop the DB; what its close raised, if anything (a failed flush of the memtables: what was
        written is in the WAL, which the next open replays).

        rocksdict keeps the DB, and so its LOCK, open while any of its column-family objects lives, and
        a failed call's exception keeps one alive wherever it is kept (its traceback's frames hold the
        handle the call used; a log capture, a loop's ``failure``): a reopen in this process then failed
        with "lock hold by current process". Each column family's object is closed first, so an object
        kept elsewhere no longer holds the DB (closing one flushes its memtable, as the DB's close does)."""
        db, self._db = self._db, None
        cfs = list(self._cfs.values())
        self._cfs.clear()
        self._handles.clear()
        if db is None:
            return None
        failed: str | None = None
        for handle in (*cfs, db):
            try:
                handle.close()
            except Exception as exc:  # closed regardless: rocksdict drops its reference before it raises
                failed = failed or str(exc) or type(exc).__name__
        return failed

    def _cf(self, cf: str) -> Rdict | _AbsentFamily:
        if self._db is None:
            raise StorageError(f"store {self.path} is closed")
        try:
            return self._cfs[cf]
        except KeyError:
            # Off the hot path: only a listed family a read-only view opened without (see _present).
            if cf in self.column_families:
                return _ABSENT
            raise StorageError(f"unknown column family {cf!r}") from None

    def _no_family(self, cf: str) -> StorageError:
        """Why a write names ``cf`` with no handle: unknown, or absent from a read-only view (_present)."""
        if cf in self.column_families:
            return StorageError(
                f"store {self.path} is read-only: column family {cf!r} is not created yet (a read-write "
                f"open creates it; {self.read_only_reason or 'a view'})"
            )
        return StorageError(f"unknown column family {cf!r}")

    def get(self, cf: str, key: bytes) -> bytes | None:
        handle = self._cf(cf)
        with _translate("get"):
            value = handle.get(key)
        return value

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        handle = self._cf(cf)
        with _translate("get"):
            # rocksdict's get of a list is RocksDB's MultiGet (absent keys: None).
            values = handle.get(list(keys))
        return cast(list[bytes | None], values)

    def scan(
        self, cf: str, *, lower: bytes | None = None, upper: bytes | None = None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        return list(itertools.islice(self.iterate(cf, lower=lower, upper=upper), limit))

    def iterate(
        self, cf: str, *, lower: bytes | None = None, upper: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        handle = self._cf(cf)
        read = ReadOptions()
        if upper is not None:
            # The upper bound stops the iterator at the first key >= upper without visiting the
            # tombstones beyond it. The lower bound is a Seek instead of set_iterate_lower_bound:
            # rocksdict 0.3.29's set_iterate_lower_bound sets the *upper* bound (checked by the
            # contract suite), and a Seek skips everything before the target anyway.
            read.set_iterate_upper_bound(upper)
        with _translate("scan"):
            items = cast(Iterator[tuple[bytes, bytes]], handle.items(from_key=lower, read_opt=read))
        return _translated(items)

    def write(self, ops: Sequence[Op], *, sync: bool, no_slowdown: bool = False) -> None:
        if self._db is None:
            raise StorageError(f"store {self.path} is closed")
        handles = self._handles
        # _failing outside _translate: it tells a stall (WriteStalledError) from a failure.
        with self._failing(), _translate("write"):
            batch = WriteBatch(raw_mode=True)
            try:
                for op in ops:
                    if type(op) is Put:
                        batch.put(op.key, op.value, handles[op.cf])
                    elif type(op) is Delete:
                        batch.delete(op.key, handles[op.cf])
                    elif type(op) is DeleteRange:
                        batch.delete_range(op.begin, op.end, handles[op.cf])
                    else:
                        raise StorageError(f"not a write operation: {op!r}")
            except KeyError as exc:  # no handle: costs nothing until raised
                raise self._no_family(exc.args[0]) from None
            self._db.write(batch, self._write_options[sync, no_slowdown])

    def sync_wal(self) -> None:
        if self._db is None:
            raise StorageError(f"store {self.path} is closed")
        with _translate("sync"), self._failing():
            self._db.flush_wal(True)

    @contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except WriteStalledError:
            raise  # refused before the WAL: the store is intact and needs no reopen
        except Exception:
            self._write_failed = True
            raise

    def compact(self, cf: str, begin: bytes | None = None, end: bytes | None = None) -> None:
        handle = self._cf(cf)
        opts = CompactOptions()
        opts.set_bottommost_level_compaction(BottommostLevelCompaction.force_optimized())
        with _translate("compact"):
            handle.compact_range(begin, end, opts)

    def flush(self, cf: str) -> None:
        """Write the column family's memtable to an SST (lets the deletion collector see it)."""
        handle = self._cf(cf)
        with _translate("flush"):
            handle.flush(True)

    def count(self, cf: str, *, stop: threading.Event | None = None) -> int:
        handle = self._cf(cf)
        read = ReadOptions()
        read.fill_cache(False)  # type: ignore[call-arg]  # the stub omits the argument; a full scan would evict what the seeks need
        with _translate("count"):
            keys = handle.keys(read_opt=read)
            if stop is None:
                return sum(1 for _ in keys)
            counted = 0
            while chunk := sum(1 for _ in itertools.islice(keys, COUNT_CHUNK)):
                counted += chunk
                # A count with a stop event runs beside the event loop (storage.key_count): the
                # iteration holds the GIL, so it pauses between chunks or every spool waits for the
                # interpreter's 5 ms switch interval (spool p99 140 ms during a 1 M-key count).
                if stop.wait(COUNT_PAUSE_S):
                    raise StorageError(f"count of {cf} stopped")
            return counted

    def approximate_count(self, cf: str) -> int:
        return self._int_property(cf, "rocksdb.estimate-num-keys")

    def catch_up(self) -> None:
        """Secondary instances only: replay the primary's newest writes."""
        if self._db is not None:
            with _translate("catch up"):
                self._db.try_catch_up_with_primary()

    def close(self) -> None:
        """Close the store; never raises for a flush that fails (a stop on a full disk: the synced WAL
        has every write, and the next open replays it), but says so."""
        failed = self._close_db()
        if failed is not None:
            log.warning(
                "store %s closed without flushing its memtables (%s): the next open replays its WAL",
                self.path,
                failed,
                extra={"event": "store_close_unflushed", "error": failed},
            )


def _translated(items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    with _translate("scan"):
        yield from items

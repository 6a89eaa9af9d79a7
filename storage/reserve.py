"""The disk reserve: a ballast file in the data dir that lets a store on a full disk keep draining.

RocksDB refuses every write after one failed for lack of space, and a store that cannot write cannot
record an ack (a delete), so without room it can neither take new work nor drain what it holds. The
reserve is that room, set aside while there is space. When a write fails for lack of space (or the store
opened read-only on a full disk) DiskReserve enters *drain mode*: it deletes the reserve, the writer
reopens the store read-write in the space freed, and only batches that drain are admitted (acks,
reschedules, dead-lettering: anything that deletes; and small bookkeeping in the column families named
at construction). New work (a batch that only adds) is refused with DiskFullError, a StorageError (the
APIs answer 503 with Retry-After), so it cannot eat the freed reserve. Once the disk has room for the
reserve and as much again (space freed by the drain's compactions or by the operator), the reserve is
re-created and new work is accepted again. Each transition is logged once. A reserve needs twice its
size free to be created (at start, or later once there is room); without one, a full disk behaves as
it would without this class (writes fail until space is freed).

The reopen in the released reserve replays the WAL and flushes what it holds to SST files before it
deletes it, so the reserve must hold everything not yet flushed: store_write_buffer_bytes() caps the
store's memtables and WAL at the reserve less what the reopen's own files need (issue 27: a 54 MB WAL
could not be flushed in an 8 MiB reserve, and nothing drained, across restarts too).

A full disk does not always fail a write: when RocksDB's background flush fails for lack of space, the
memtables it could not flush fill up and RocksDB *stops* writes ("Stopping writes because we have 2
immutable memtables"), and a write already waiting in that stall waits until there is room, which on a
full disk is never, as nothing released the reserve; the writer waits on the event loop, so the whole
sidecar froze (issue 27). So while the disk is low on space (less than resume_bytes free), the writer
asks RocksDB not to wait (no_slowdown: a stalled write fails at once with WriteStalledError, nothing
written), and a stalled write with less free than the reserve (enough for any flush: the write buffer is
smaller) counts as the disk being full. With more free space a stall is RocksDB pacing its flushes and
compactions, and writes wait it out as they always did: failing them then would answer 503 under mere
load.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import StorageError, WriteStalledError
from .kv import Op, Put
from .limits import DB_WRITE_BUFFER_BYTES, MIN_FREE_BYTES

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0  # free space is looked at most this often (on writes and readiness checks)
# Whether writes may wait out a stall is looked at most this often (statvfs costs ~2 µs, a batch's WAL
# sync far more): filling the resume_bytes - reserve (a whole reserve) left when writes last waited takes
# longer than this.
LOW_SPACE_CHECK_S = 0.01
MIB = 1024 * 1024
# The smallest write buffer (memtables, WAL) the store runs with: smaller ones flush tiny SST files.
MIN_WRITE_BUFFER_BYTES = 8 * MIB
# The smallest reserve: a reopen's own files (MANIFEST, OPTIONS, new WAL: limits.MIN_FREE_BYTES) and the
# flush of the smallest write buffer.
MIN_RESERVE_MB = (MIN_FREE_BYTES + MIN_WRITE_BUFFER_BYTES) // MIB


class ReserveTooSmallError(ValueError):
    """A reserve in which a reopen of the store could not flush what it holds."""


def store_write_buffer_bytes(reserve_mb: int) -> int:
    """The bound on the store's memtables and WAL (storage.rocks) with a ``reserve_mb`` reserve (0: none),
    so that a reopen in the released reserve has room to flush them.

    Raises:
        ReserveTooSmallError: a reserve below MIN_RESERVE_MB.
    """
    if reserve_mb == 0:
        return DB_WRITE_BUFFER_BYTES
    if reserve_mb < MIN_RESERVE_MB:
        raise ReserveTooSmallError(
            f"a disk reserve of {reserve_mb} MiB is too small to drain a full disk: reopening the store "
            f"needs {MIN_RESERVE_MB} MiB (0 disables the reserve)"
        )
    return min(DB_WRITE_BUFFER_BYTES, reserve_mb * MIB - MIN_FREE_BYTES)


class DiskFullError(StorageError):
    """New work refused: the disk is full and the store only drains what it holds."""


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def no_space(error: BaseException) -> bool:
    text = str(error).lower()
    return "no space left" in text or "enospc" in text


@dataclass(eq=False, slots=True)
class ReserveFile:
    """A file of ``size`` bytes that takes real blocks (fallocate), deleted to make room."""

    path: Path
    size: int

    def exists(self) -> bool:
        try:
            return self.path.stat().st_size >= self.size
        except OSError:
            return False

    def create(self) -> bool:
        """Allocate the file; False (and nothing left behind) when the disk has no room for it."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("cannot create the disk reserve %s: %s", self.path, exc)
            self.release()
            return False
        return True

    def release(self) -> bool:
        """Delete the file; whether there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.error("cannot delete the disk reserve %s: %s", self.path, exc)
            return False
        return True


class DiskReserve:
    """Drain mode around a ReserveFile (see the module docstring). ``drain_cfs``: column families a
    draining batch may put into without deleting anything (the stores' meta and done markers)."""

    def __init__(
        self,
        reserve: ReserveFile,
        drain_cfs: Collection[str],
        *,
        free: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        check_every_s: float | None = None,
        relieve: Callable[[], None] | None = None,
    ) -> None:
        self.reserve = reserve
        self._drain_cfs = frozenset(drain_cfs)
        self._free = free or (lambda: free_bytes(reserve.path.parent))
        self._clock = clock
        self._check_every_s = CHECK_EVERY_S if check_every_s is None else check_every_s
        # Called while draining once less than half the reserve is left: the store's acks are tombstones
        # in the WAL and memtables until a flush, and only then do WAL files go and compactions free space.
        self._relieve = relieve
        self._checked_at: float | None = None
        self._low_checked_at: float | None = None
        self._low = False
        self.draining = False
        self.reason: str | None = None
        self._warned_no_room = False
        self._said_no_reserve = False

    @property
    def resume_bytes(self) -> int:
        """Free space needed to leave drain mode: the reserve, and as much again once it is re-created."""
        return 2 * self.reserve.size

    def start(self, read_only_reason: str | None) -> None:
        """At open: a store opened read-only on a full disk drains; otherwise make sure of the reserve."""
        if read_only_reason is not None and no_space(Exception(read_only_reason)):
            self.enter(read_only_reason)
        else:
            self._ensure_reserve()

    def admits(self, ops: Sequence[Op]) -> bool:
        """Whether a caller's batch may be written now: anything outside drain mode; in it, only a
        batch that deletes something or puts only into the drain column families."""
        if not self.draining:
            return True
        return any(type(op) is not Put for op in ops) or all(op.cf in self._drain_cfs for op in ops)

    def refusal(self) -> DiskFullError:
        return DiskFullError(
            f"the disk is full ({self.reason}); new work is refused while the store drains what it holds"
        )

    def low_on_space(self) -> bool:
        """Whether writes must not wait out a RocksDB write stall (see the module docstring): while
        draining, or with less than resume_bytes free (unknown counts as low); looked at most every
        LOW_SPACE_CHECK_S."""
        now = self._clock()
        if self._low_checked_at is None or now - self._low_checked_at >= LOW_SPACE_CHECK_S:
            self._low_checked_at = now
            free = self._free_or_none()
            self._low = self.draining or free is None or free < self.resume_bytes
        return self._low

    def on_write_failed(self, error: BaseException) -> None:
        if self.draining:
            return
        if no_space(error):
            self.enter(str(error))
        elif isinstance(error, WriteStalledError):
            # Less free than the reserve: the stall may be a flush that found no room, which only
            # releasing the reserve ends; with more, a flush had room and the stall passes by itself.
            free = self._free_or_none()
            if free is not None and free < self.reserve.size:
                self.enter(
                    f"no room to flush the store: a write stalled with {free // MIB} MiB free ({error})"
                )

    def _free_or_none(self) -> int | None:
        try:
            return self._free()
        except OSError:
            return None

    def enter(self, reason: str) -> None:
        """Refuse new work and give the store the reserve's room to record acks in. Without a reserve
        (no room for one at start) there is no room to drain in: the store writes again, new work
        included, once space is freed (storage.limits.MIN_FREE_BYTES), as without this class."""
        if not self.reserve.release():
            if not self._said_no_reserve:
                self._said_no_reserve = True
                log.error(
                    "disk full and no disk reserve to release: the store writes again once space is freed",
                    extra={"event": "disk_full", "error": reason, "reserve_released": False},
                )
            return
        self.draining, self.reason = True, reason
        self._checked_at = self._clock()
        log.error(
            "disk full: refusing new work (503) and draining the store in the %d MiB released from %s",
            self.reserve.size // MIB,
            self.reserve.path,
            extra={"event": "disk_full", "error": reason, "reserve_released": True},
        )

    def check(self) -> None:
        """At most every ``check_every_s``: leave drain mode once there is room (re-creating the
        reserve first), or outside it create a missing reserve when there is room for it."""
        now = self._clock()
        if self._checked_at is not None and now - self._checked_at < self._check_every_s:
            return
        self._checked_at = now
        if not self.draining:
            self._ensure_reserve()
            return
        free = self._free()
        if free < self.reserve.size // 2 and self._relieve is not None:
            try:
                self._relieve()
            except StorageError as exc:
                log.warning("could not flush the store while draining a full disk: %s", exc)
        if free < self.resume_bytes or not self.reserve.create():
            return
        self.draining, self.reason = False, None
        log.warning(
            "disk space is back (%d MiB free): re-created the %d MiB reserve, accepting new work again",
            free // MIB,
            self.reserve.size // MIB,
            extra={"event": "disk_space_back", "free_bytes": free},
        )

    def _ensure_reserve(self) -> None:
        if self.reserve.exists():
            return
        with contextlib.suppress(OSError):
            if self._free() >= self.resume_bytes and self.reserve.create():
                log.info("created the %d MiB disk reserve %s", self.reserve.size // MIB, self.reserve.path)
                self._warned_no_room = self._said_no_reserve = False
                return
        if not self._warned_no_room:
            self._warned_no_room = True
            log.warning(
                "no room for the %d MiB disk reserve %s: on a full disk the store could not drain",
                self.reserve.size // MIB,
                self.reserve.path,
            )

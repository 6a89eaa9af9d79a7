"""A Rock-DMQ replica's drops of the copies another replica published (issue 28), in process: one mark
message's 500 ids dropped by DelayStore.drop_published_many on a RocksDB store of `--pending` copies,
as a mark without due times makes it (an index scan per id: marks of the previous version) and as a
mark with them makes it (one multi-get of the ids' index entries at their dues). Results: bench/RESULTS.md,
"h-dmqmarks".

    .venv/bin/python -m bench.dmq_drops [--pending 1000000] [--batch 500] [--rounds 20] [--dir DIR]

The store is filled once (due keys and index entries as schedule_many writes them, 100-byte bodies,
32-hex-character ids as UNIQ_KEYs are, due across a day), then reopened as a replica opens it. Each
round drops one batch of ids taken at random from those still stored, alternating the ways (ABBA), so
both see the same store. Figures per id, medians over the rounds:

lookup   main-thread CPU of finding the batch's copies (the scans, or the multi-get): the part of a drop
         that runs on the event loop before its write, and what the two ways differ in;
drop     CPU of the whole drop_published_many call (this process, every thread: the lookup, the batch of
         deletes and markers, its WAL sync); RocksDB's background threads count too.

"miss" rows drop ids whose marked due is not their stored one (a copy stored under another due): the
multi-get finds nothing and each id goes the scan way, the fallback's worst case.

Then app.dmq.replicas.ReplicaSet.holders (3 names, 2 copies; run at intake, at each mark and at each
pick on every replica): CPU per call against the previous implementation's ranking (a blake2b of
``name NUL id`` built whole for each name, then a sort by a lambda), same ids, same run.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.bulk import bulk_write
from bench.common import bench_parser, environment, scratch_dir
from rocksidecar.app.dmq.replicas import ReplicaSet
from rocksidecar.delay import CancelOutcome, DelayedMessage, DelayStore
from rocksidecar.delay.keys import COLUMN_FAMILIES
from rocksidecar.delay.store import stored_ops
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Put
from rocksidecar.storage.rocks import RocksKV

BASE_MS = 1_800_000_000_000
DAY_MS = 86_400_000
BODY_BYTES = 100
WAYS = ("scan", "points", "miss")


def id_of(i: int) -> str:
    return hashlib.blake2b(i.to_bytes(8, "big"), digest_size=16).hexdigest().upper()


def due_of(i: int, n: int) -> int:
    return BASE_MS + i * DAY_MS // n


def fill(path: Path, n: int) -> None:
    body = os.urandom(BODY_BYTES)

    def puts(i: int) -> list[Put]:
        msg = DelayedMessage(id=id_of(i), topic="DropsBench", body=body, due_ms=due_of(i, n))
        return list(stored_ops(msg)[1])

    bulk_write(path, COLUMN_FAMILIES, n, puts)


def timed_lookup(store: DelayStore, seconds: list[float]) -> Callable[[], None]:
    """Wrap the store's lookups (per-id scan, batch multi-get) to add their main-thread CPU time to
    ``seconds[0]``; returns the function that undoes it."""
    scan, found_at = store._scheduled_dues, store._found_at

    def scanned(id_: str) -> list[int]:
        t = time.thread_time()
        try:
            return scan(id_)
        finally:
            seconds[0] += time.thread_time() - t

    def found(ids: Sequence[str], dues: Sequence[int | None]) -> dict[str, bytes]:
        t = time.thread_time()
        try:
            return found_at(ids, dues)
        finally:
            seconds[0] += time.thread_time() - t

    store._scheduled_dues = scanned  # type: ignore[method-assign]
    store._found_at = found  # type: ignore[method-assign]

    def undo() -> None:
        del store._scheduled_dues, store._found_at

    return undo


async def run(path: Path, n: int, batch: int, rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    kv = RocksKV.open(path, COLUMN_FAMILIES)
    writer = GroupCommitWriter(kv)
    store = DelayStore(kv, writer, now_ms=lambda: BASE_MS - DAY_MS)
    left = list(range(n))
    random.Random(28).shuffle(left)
    got: dict[str, tuple[list[float], list[float]]] = {way: ([], []) for way in WAYS}
    lookup = [0.0]
    undo = timed_lookup(store, lookup)
    try:
        order = [way for r in range(rounds) for way in (WAYS if r % 2 == 0 else WAYS[::-1])]
        for way in order:
            picked = [left.pop() for _ in range(batch)]
            ids = [id_of(i) for i in picked]
            dues: list[int | None] | None = {
                "scan": None,
                "points": [due_of(i, n) for i in picked],
                "miss": [due_of(i, n) + 1 for i in picked],
            }[way]
            lookup[0] = 0.0
            cpu = time.process_time()
            outcomes = await store.drop_published_many(ids, dues)
            cpu = time.process_time() - cpu
            if len(outcomes) != batch or any(o is not CancelOutcome.CANCELLED for o in outcomes):
                raise SystemExit(f"{way}: not every copy was dropped: {set(outcomes)}")
            got[way][0].append(lookup[0] / batch)
            got[way][1].append(cpu / batch)
    finally:
        undo()
        await store.close()
        await writer.close()
        kv.close()
    return got


def _score(id_: str, name: str) -> bytes:
    return hashlib.blake2b(f"{name}\x00{id_}".encode(), digest_size=8).digest()


def previous_holders(names: tuple[str, ...], copies: int, id_: str) -> list[str]:
    """ReplicaSet.holders before h-dmqmarks, as it was: one blake2b of the whole ``name NUL id`` per name."""
    ranked = sorted(names, key=lambda n: _score(id_, n), reverse=True)
    return ranked[:copies]


def holders_us(calls: int = 20_000, rounds: int = 10) -> tuple[float, float]:
    """CPU per call (us) of the previous ranking and of ReplicaSet.holders over the same ids, in
    alternating rounds (the shared machine's speed drifts within seconds)."""
    names = ("rocksidecar-dmq-0", "rocksidecar-dmq-1", "rocksidecar-dmq-2")
    replicas = ReplicaSet(names, names[0], 2)
    ids = [id_of(i) for i in range(calls)]
    if any(previous_holders(names, 2, i) != list(replicas.holders(i)) for i in ids):
        raise SystemExit("ReplicaSet.holders ranks differently from the previous implementation")
    spent = [0.0, 0.0]
    for r in range(rounds):
        for way in (0, 1) if r % 2 == 0 else (1, 0):
            t = time.thread_time()
            if way == 0:
                for id_ in ids:
                    previous_holders(names, 2, id_)
            else:
                for id_ in ids:
                    replicas.holders(id_)
            spent[way] += time.thread_time() - t
    return spent[0] / calls / rounds * 1e6, spent[1] / calls / rounds * 1e6


def main() -> None:
    args = bench_parser(__doc__, pending=1_000_000, batch=500, rounds=20, dir=None).parse_args()
    print(environment())
    with scratch_dir(Path(args.dir) if args.dir else None, "dmq-drops-") as root:
        started = time.perf_counter()
        fill(root / "store", args.pending)
        print(f"filled {args.pending} pending copies in {time.perf_counter() - started:.1f} s")
        got = asyncio.run(run(root / "store", args.pending, args.batch, args.rounds))
    print(f"{args.rounds} rounds of {args.batch} ids a way (medians, CPU per id)")
    print(f"{'way':<8} {'lookup us/id':>13} {'drop us/id':>11}")
    med = {way: (statistics.median(lk) * 1e6, statistics.median(dr) * 1e6) for way, (lk, dr) in got.items()}
    for way in WAYS:
        print(f"{way:<8} {med[way][0]:>13.1f} {med[way][1]:>11.1f}")
    scan, points, miss = med["scan"], med["points"], med["miss"]
    print(f"points / scan: lookup {points[0] / scan[0]:.2f}x, drop {points[1] / scan[1]:.2f}x")
    print(f"miss / scan:   lookup {miss[0] / scan[0]:.2f}x, drop {miss[1] / scan[1]:.2f}x")
    before, after = holders_us()
    print(f"holders: previous {before:.2f} us/call, now {after:.2f} us/call ({after / before:.2f}x)")


if __name__ == "__main__":
    main()

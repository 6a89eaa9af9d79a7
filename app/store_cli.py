"""``rocksidecar store``: look into the store (retries, dead letters and scheduled messages), export and
re-drive dead letters.

The store lives at ``<data dir>/store``. RocksDB lets one process open it for writing: while the
sidecar runs, the commands go through its admin API (``--url``, default: the sidecar's
ROCKSIDECAR_HTTP_ADDR, token from ROCKSIDECAR_AUTH_TOKEN), after checking that the sidecar answering
there is the one holding this store. If it cannot be reached, read-only commands read the store as a
secondary instance (a view as of the moment they start) and re-drives refuse with a clear message.
``dead export`` always reads the store itself. With the sidecar stopped, everything works offline.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import orjson

from rocksidecar.delay import DelayStore
from rocksidecar.retry.keys import COLUMN_FAMILIES
from rocksidecar.retry.record import CorruptRecordError, decode_record, record_to_json
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.errors import StorageError, StoreLockedError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import KV

from .http_client import PostError
from .store_remote import TOKEN_ENV, RefusedError, Remote, RemoteError, default_url

DATA_DIR_ENV = "ROCKSIDECAR_DATA_DIR"


DESCRIPTION = (
    "Look into the sidecar's store (<data-dir>/store): retries, dead letters and scheduled messages. "
    "While a sidecar runs on that store, the commands go through its admin API (--url), with the bearer "
    f"token from ${TOKEN_ENV} when the sidecar requires one; on a stopped store they open it directly."
)

MAX_LIMIT = 1_000_000_000  # dead letters a listing may ask for
HELP = "inspect the retry store; list, export, re-drive dead letters"


class CliError(Exception):
    """Printed as ``rocksidecar store: <message>``; exit code 1."""


def _add_common(parser: argparse.ArgumentParser) -> None:
    """--data-dir and --url: accepted before the subcommand and after it (SUPPRESS: an absent one does
    not overwrite the other)."""
    parser.add_argument(
        "--data-dir",
        default=argparse.SUPPRESS,
        help=f"sidecar data directory; the store is <data-dir>/store (default: ${DATA_DIR_ENV} or ./data)",
    )
    parser.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help="a running sidecar's HTTP API to go through (default when the store is in use: "
        "http://$ROCKSIDECAR_HTTP_ADDR, else 127.0.0.1:9880)",
    )


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_LIMIT):
        raise argparse.ArgumentTypeError(f"expected a number from 1 to {MAX_LIMIT}, got {text!r}")
    return int(text)


def _utf8(text: str) -> str:
    try:
        text.encode()
    except UnicodeEncodeError:  # argv bytes that are not UTF-8 arrive as lone surrogates
        raise argparse.ArgumentTypeError(f"not UTF-8 text: {text!r}") from None
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common)
    cmds = p.add_subparsers(dest="store_command", metavar="COMMAND", required=True)
    cmds.add_parser("stats", parents=[common], help="pending and dead counts, oldest due message, health")
    inspect = cmds.add_parser("inspect", parents=[common], help="show one message by id or by store key")
    inspect.add_argument(
        "key_or_id",
        type=_utf8,
        metavar="ID_OR_KEY",
        help="a message id (UNIQ_KEY) or a store key from 'dead list'",
    )
    dead = cmds.add_parser("dead", parents=[common], help="dead letters").add_subparsers(
        dest="dead_command", metavar="COMMAND", required=True
    )
    listing = dead.add_parser("list", parents=[common], help="one line per dead letter, oldest first")
    listing.add_argument(
        "--limit", type=_count, default=100, metavar="N", help="list at most N dead letters (default 100)"
    )
    listing.add_argument("--json", action="store_true", help="JSON lines instead of text")
    export = dead.add_parser("export", parents=[common], help="every dead letter as JSON lines")
    export.add_argument("--out", help="file to write (default: stdout)")
    redrive = dead.add_parser("redrive", parents=[common], help="move dead letters back to pending")
    which = redrive.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", help="the message id (UNIQ_KEY) to re-drive")
    which.add_argument("--all", action="store_true", help="re-drive every dead letter")
    replay = cmds.add_parser(
        "replay", parents=[common], help="a running sidecar replays pending messages now, not at their rung"
    )
    replay.add_argument("--topic", help="only this topic's messages")


def run(args: argparse.Namespace) -> int:
    data_dir = getattr(args, "data_dir", None) or os.environ.get(DATA_DIR_ENV) or "./data"
    try:
        return asyncio.run(_dispatch(args, Path(data_dir) / "store"))
    except (CliError, StorageError, RemoteError) as exc:
        print(f"rocksidecar store: {exc}", file=sys.stderr)
        return 1


async def _remote(args: argparse.Namespace, command: str, remote: Remote) -> int:
    if command == "stats":
        print("\n".join(await remote.stats()))
    elif command == "inspect":
        _print_json(await remote.inspect(args.key_or_id))
    elif command == "dead list":
        _print_lines(await remote.dead_list(args.limit, args.json), args.json)
    elif command == "dead redrive":
        print(await remote.redrive(args.id, args.all))
    elif command == "replay":
        print(await remote.replay(args.topic))
    else:
        raise CliError(f"{command} cannot go through the API")
    return 0


async def _through_api(args: argparse.Namespace, command: str, path: Path) -> int | None:
    """Run ``command`` through the sidecar that holds ``path``; None when none answers."""
    explicit = getattr(args, "url", None)
    remote = Remote(explicit or default_url())
    try:
        if not explicit:
            try:
                if not await remote.serves(path):
                    return None  # another sidecar (or something else) on that port: not ours to steer
            except RefusedError:
                raise  # a sidecar answered (its token, say, is missing): say so, not "no API answers"
            except (PostError, RemoteError):
                if command == "replay":
                    raise
                return None
        return await _remote(args, command, remote)
    except PostError as exc:
        raise CliError(f"no sidecar answers at {remote.url}: {exc}") from None
    finally:
        await remote.close()


async def _dispatch(args: argparse.Namespace, path: Path) -> int:
    command = args.store_command if args.store_command != "dead" else f"dead {args.dead_command}"
    if getattr(args, "url", None) or command == "replay":
        if command == "dead export":
            raise CliError("dead export reads the store itself; leave out --url")
        done = await _through_api(args, command, path)
        if done is None:  # replay without --url: the sidecar answering there holds another store
            raise CliError(
                f"the sidecar at {default_url()} does not hold the store at {path}: give the address "
                "of the one that does with --url"
            )
        return done
    if not (path / "CURRENT").exists():
        raise CliError(f"no store at {path} (set --data-dir or ${DATA_DIR_ENV})")
    if _locked(path) and command != "dead export":
        done = await _through_api(args, command, path)
        if done is not None:
            return done
    with _opened(path, write=command == "dead redrive") as store:
        try:
            if command == "stats":
                _stats(store)
                _scheduled_stats(store)
            elif command == "inspect":
                _inspect(store, args.key_or_id)
            elif command == "dead list":
                _list(store, args.limit, args.json)
            elif command == "dead export":
                _export(store, args.out)
            else:
                await _redrive(store, args.id, args.all)
        finally:
            await store.close()
    return 0


def _locked(path: Path) -> bool:
    """Whether a running sidecar holds the store (RocksDB's lock file says so)."""
    from rocksidecar.storage.rocks import RocksKV

    try:
        RocksKV.open(path, COLUMN_FAMILIES).close()
    except StoreLockedError:
        return True
    return False


def _scheduled_stats(store: RetryStore) -> None:
    view = scheduled(store.kv)
    if view is not None:
        for line in view[0]:
            print(line)


@contextmanager
def _opened(path: Path, *, write: bool) -> Iterator[RetryStore]:
    from rocksidecar.storage.rocks import Access, RocksKV

    if not (path / "CURRENT").exists():
        raise CliError(f"no store at {path} (set --data-dir or ${DATA_DIR_ENV})")
    try:
        yield RetryStore(RocksKV.open(path, COLUMN_FAMILIES), owns_kv=True)
        return
    except StoreLockedError:
        if write:
            raise CliError(
                f"the store at {path} is open in a running sidecar (RocksDB allows one writer) and its "
                f"API does not answer at {default_url()}: give its address with --url, or stop it first"
            ) from None
    with tempfile.TemporaryDirectory(prefix="rocksidecar-secondary-") as scratch:
        kv = RocksKV.open(path, COLUMN_FAMILIES, access=Access.SECONDARY, secondary_dir=scratch)
        print(
            f"(the store is in use by a running sidecar; reading a view as of {_iso(None)})", file=sys.stderr
        )
        yield RetryStore(kv, owns_kv=True)


def _iso(ms: int | None) -> str:
    moment = datetime.now(UTC) if ms is None else datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds")


def _stats(store: RetryStore) -> None:
    stats = store.stats()
    now = store.now_ms()
    print(f"pending: {stats.pending}")
    print(f"dead: {stats.dead}")
    if stats.oldest_due_ms is not None:
        late_s = (now - stats.oldest_due_ms) / 1000
        when = f"{late_s:.1f} s ago" if late_s >= 0 else f"in {-late_s:.1f} s"
        print(f"oldest due: {_iso(stats.oldest_due_ms)} ({when})")
    if stats.oldest_first_failure_ms:
        print(f"oldest first failure: {_iso(stats.oldest_first_failure_ms)}")


def _inspect(store: RetryStore, key_or_id: str) -> None:
    key = key_or_id.encode()
    spooled = store.spooled(key)  # pending, or waiting behind its lane's head
    if spooled is not None:
        raw, next_attempt = spooled
        doc: dict[str, object] = {"state": "SPOOLED", "key": key_or_id, "next_attempt_at_ms": next_attempt}
        try:
            doc["record"] = record_to_json(decode_record(raw))
        except CorruptRecordError as exc:
            doc["corrupt"] = str(exc)
        _print_json(doc)
        return
    letter = store.dead.get(key)
    if letter is not None:
        _print_json({"state": "DEAD", **letter.to_json()})
        return
    status = store.get(key_or_id)
    if status is None:
        view = scheduled(store.kv)
        found = view[1](key_or_id) if view is not None else None
        if found is None:
            raise CliError(f"no message or key {key_or_id!r} in the store")
        _print_json(found)
        return
    doc = {
        "id": status.id,
        "state": status.state.value,
        "key": status.key.decode(errors="replace"),
        "attempts": status.attempts,
        "last_error": status.last_error,
        "next_attempt_at_ms": status.next_attempt_at_ms,
        "reason": status.reason,
        "dead_at_ms": status.dead_at_ms,
    }
    if status.key and store.spooled(status.key) is not None:
        try:
            record = store.pending_record(status.key)
            doc["record"] = record_to_json(record) if record else None
        except CorruptRecordError as exc:
            doc["corrupt"] = str(exc)
    elif (letter := store.dead.get(status.key)) is not None:
        doc["record"] = letter.to_json()
    _print_json(doc)


def _list(store: RetryStore, limit: int, as_json: bool) -> None:
    _print_lines(_dead_lines(store, limit, as_json), as_json)


def _dead_lines(store: RetryStore, limit: int, as_json: bool) -> Iterator[str]:
    # One letter at a time, as export does: a page would hold every listed body at once.
    for letter in itertools.islice(store.dead, limit):
        if as_json:
            yield orjson.dumps(letter.to_json()).decode()
            continue
        rec = letter.record
        what = f"{rec.topic} type={rec.type} attempts={rec.retry_count}" if rec else "(corrupt value)"
        yield f"{_iso(letter.dead_at_ms)}  {letter.id}  {what}  {letter.reason}"


def _print_lines(lines: Iterable[str], as_json: bool) -> None:
    """One line per dead letter, or "none": an empty list must not look like a failure or a hang. JSON
    lines stay empty, since whoever reads them wants no other line."""
    printed = False
    for line in lines:
        print(line)
        printed = True
    if not printed and not as_json:
        print("none")


def _export(store: RetryStore, out_path: str | None) -> None:
    if out_path is None:
        count = store.dead.export(sys.stdout)
    else:
        try:
            with open(out_path, "w", encoding="utf-8") as out:
                count = store.dead.export(out)
        except OSError as exc:  # a missing directory, a directory, no permission, a full disk
            raise CliError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    print(f"exported {count} dead letters", file=sys.stderr)


async def _redrive(store: RetryStore, id_: str | None, every: bool) -> None:
    if every:
        moved, skipped = await store.dead.redrive_all()
        print(f"re-drove {moved} dead letters" + (f"; skipped {skipped} corrupt" if skipped else ""))
        return
    assert id_ is not None
    moved, skipped = await store.dead.redrive_message(id_)
    if not moved and not skipped:  # a corrupt one is there: said as the other forms say it, not "none"
        raise CliError(f"no dead letter for message {id_!r}")
    print(f"re-drove {moved} dead letter(s) of {id_}" + (f"; skipped {skipped} corrupt" if skipped else ""))


def _print_json(doc: dict[str, object], *, indent: bool = True, out: TextIO | None = None) -> None:
    option = orjson.OPT_INDENT_2 if indent else 0
    print(orjson.dumps(doc, option=option).decode(), file=out or sys.stdout)


# Scheduled (delayed) messages live in the same store, in the delay package: retry and delay do not
# import each other, so this command joins them.
def scheduled(kv: KV) -> tuple[list[str], Callable[[str], dict[str, object] | None]] | None:
    """Stats lines and a lookup by id of the scheduled messages in ``kv``; None if it has no delay store
    (a store written by the retry store alone)."""
    try:
        store = DelayStore(kv, GroupCommitWriter(kv))
        stats = store.stats()
    except (StorageError, KeyError, ValueError):
        return None
    lines = [f"scheduled: {stats.pending}"]
    if stats.next_due_ms is not None:
        lines.append(f"next scheduled due: {_iso(stats.next_due_ms)}")

    def lookup(id_: str) -> dict[str, object] | None:
        found = store.get(id_)
        if found is None:
            return None
        return {
            "id": id_,
            "state": found.state.value,
            "due_ms": found.due_ms,
            "at_ms": found.at_ms,
            "topic": found.topic,
        }

    return lines, lookup

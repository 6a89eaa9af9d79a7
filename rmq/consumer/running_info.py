"""ConsumerRunningInfo: what a consumer answers to GET_CONSUMER_RUNNING_INFO (307), in the JSON shape
rocketmq-client 4.9.4 writes with fastjson, so ``mqadmin consumerStatus -g GROUP -i CLIENT`` prints it;
and reading the owned queues back out of such an answer (the sticky allocation's holdings).

fastjson writes fields in alphabetical order, leaves out nulls, and writes the keys of ``mqTable`` (a
TreeMap keyed by MessageQueue) as JSON objects, which is not JSON (queue_tables reads and writes them).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

import orjson

from ..errors import FrameError
from ..message import MessageQueue
from .process_queue import ProcessQueue
from .queue_tables import loads, queue_from_key, table_json

CLIENT_VERSION_NAME = "V4_9_4"  # PROP_CLIENT_VERSION: the protocol version we speak
MAX_STACKS_CHARS = 256 * 1024  # the "jstack" text: a process of thousands of tasks stays one small answer
STACK_DEPTH = 24  # frames shown of each thread and task, innermost last


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """ProcessQueueInfo of one owned queue (timestamps in wall-clock milliseconds)."""

    commit_offset: int
    cached_min_offset: int
    cached_max_offset: int
    cached_count: int
    cached_size_mib: int
    locked: bool
    last_lock_ms: int
    dropped: bool
    last_pull_ms: int
    last_consume_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "cachedMsgCount": self.cached_count,
            "cachedMsgMaxOffset": self.cached_max_offset,
            "cachedMsgMinOffset": self.cached_min_offset,
            "cachedMsgSizeInMiB": self.cached_size_mib,
            "commitOffset": self.commit_offset,
            "droped": self.dropped,  # sic: Java's field name
            "lastConsumeTimestamp": self.last_consume_ms,
            "lastLockTimestamp": self.last_lock_ms,
            "lastPullTimestamp": self.last_pull_ms,
            "locked": self.locked,
            "transactionMsgCount": 0,  # no transactional consumption here
            "transactionMsgMaxOffset": 0,
            "transactionMsgMinOffset": 0,
            "tryUnlockTimes": 0,
        }


def encode_running_info(
    properties: Mapping[str, str],
    subscriptions: Iterable[dict[str, Any]],
    queues: Mapping[MessageQueue, QueueInfo],
    status: Mapping[str, Mapping[str, Any]] | None = None,
    jstack: str | None = None,
) -> bytes:
    """The body of the answer; ``subscriptions`` are SubscriptionData documents, ``status`` each
    subscribed topic's ConsumeStatus (rmq.consumer.topic_stats: statusTable, pull and consume rates)."""
    table = table_json({mq: info.to_json() for mq, info in queues.items()})
    subs = sorted(subscriptions, key=lambda s: str(s.get("topic", "")))
    return b"".join(
        (
            b"{" if jstack is None else b'{"jstack":' + orjson.dumps(jstack) + b",",
            b'"mqTable":',
            table,
            b',"properties":',
            orjson.dumps(dict(sorted(properties.items()))),
            b',"statusTable":',
            orjson.dumps(dict(sorted((status or {}).items()))),
            b',"subscriptionSet":',
            orjson.dumps(subs),
            b"}",
        )
    )


def stacks(limit: int = MAX_STACKS_CHARS) -> str:
    """What ``jstackEnable`` asks for (``mqadmin consumerStatus -s``), as this process has it: each
    thread's stack, then each asyncio task of the running loop with the chain of awaits it is suspended
    in (a delivery waiting on the app shows there); at most ``limit`` characters, and no more work than
    that takes: it runs on the event loop, and a process may have thousands of tasks. Frames name files,
    functions and lines, never values."""
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    try:
        tasks = list(asyncio.all_tasks())
    except RuntimeError:  # no running loop
        tasks = []
    total = len(frames) + len(tasks)
    head = f"{len(frames)} threads, {len(tasks)} asyncio tasks\n"
    parts, size = [head], len(head)
    for shown, (title, summary) in enumerate(_sections(names, frames, tasks)):
        part = f"{title}\n{''.join(summary.format())}"
        if size + len(part) > limit:
            parts.append(f"... {total - shown} more not shown (over {limit} characters)\n")
            break
        parts.append(part)
        size += len(part) + 1
    return "\n".join(parts)


def _sections(
    names: Mapping[int | None, str], frames: Mapping[int, FrameType], tasks: list[asyncio.Task[Any]]
) -> Iterator[tuple[str, traceback.StackSummary]]:
    """Each thread's and task's title and frames, extracted only when asked for (stacks stops early)."""
    for ident, frame in frames.items():
        yield f'thread "{names.get(ident, ident)}"', traceback.extract_stack(frame, limit=STACK_DEPTH)
    for task in tasks:
        frames_of = ((f, f.f_lineno) for f in _awaits(task.get_coro()))
        yield f'task "{task.get_name()}"', traceback.StackSummary.extract(frames_of, lookup_lines=False)


def _awaits(coro: Any) -> list[FrameType]:
    """The frames of a suspended coroutine and of what it awaits, outermost first (STACK_DEPTH at most)."""
    frames: list[FrameType] = []
    while coro is not None and len(frames) < STACK_DEPTH:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return frames


def owned_queues(body: bytes, topic: str | None = None) -> set[MessageQueue]:
    """The queues in a ConsumerRunningInfo's mqTable (of ``topic`` only, if given), dropped ones left
    out. FrameError if the body is not such a document."""
    doc = loads(body, "ConsumerRunningInfo")
    try:
        table = doc.get("mqTable") or {}
        out = set()
        for key, info in table.items():
            mq = queue_from_key(key)
            if (topic is None or mq.topic == topic) and not (info or {}).get("droped", False):
                out.add(mq)
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise FrameError(f"undecodable ConsumerRunningInfo: {exc}") from exc
    return out


def queue_info(pq: ProcessQueue, now_mono: float, now_wall_ms: int) -> QueueInfo:
    """A process queue as ProcessQueue.fillProcessQueueInfo reports it (its times are monotonic)."""

    def wall(t: float) -> int:
        return now_wall_ms - int((now_mono - t) * 1000) if t else 0

    cached = pq.messages()
    return QueueInfo(
        commit_offset=pq.committed_offset(),
        cached_min_offset=cached[0].queue_offset if cached else 0,
        cached_max_offset=cached[-1].queue_offset if cached else 0,
        cached_count=len(cached),
        cached_size_mib=pq.size_bytes // (1024 * 1024),
        locked=pq.locked,
        last_lock_ms=wall(pq.last_lock_at),
        dropped=pq.dropped,
        last_pull_ms=wall(pq.last_pull_at),
        last_consume_ms=wall(pq.last_consume_at),
    )

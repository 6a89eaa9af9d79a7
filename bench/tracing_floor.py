"""The least a sampled request's spans can cost in this Python (issue 31's floor), beside what the
sidecar's tracing costs in the same process.

The floor does per message only what the two spans need: a span id each (``random.getrandbits``), a start
and an end time each (``time.time_ns``), and a tuple of what differs from message to message (the ids,
the times, the message id, the body's size, the queue and broker the send went to). Every 512 messages
the batch is written as an OTLP ``ExportTraceServiceRequest`` in protobuf's wire format, everything that
is the same for a topic (resource, scope, names, kinds, flags, the constant attributes) serialised once
beforehand, and handed to a sink that keeps its length. No span objects, no context, no processor, no
sampler, no network: what any implementation of these spans must do at the least.

Beside it, bench.tracing_cpu's row ``otel`` (the sidecar's receive and send spans through its processor,
encoded, no network) and ``off``; printed: the floor's and the sidecar's extra cost per message, and their
ratio. ``--instructions`` counts instructions instead of CPU time (cachegrind, two lengths subtracted,
``PYTHONHASHSEED=0``: the load does not move it).

    .venv/bin/python -m bench.tracing_floor [--messages 20000] [--rounds 3] [--instructions]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import time

from bench.tracing_cpu import cpu_s, per_message_us, sidecar_gc
from rocksidecar.app.tracing.otlp import _varint  # protobuf's varint, as the sidecar writes it

BATCH = 512
TOPIC = "BenchTrace"
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C  # the request's traceparent's
PARENT_ID = 0xB7AD6B7169203331
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def _field(tag: int, value: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(value)) + value


def _key_value(key: str, value: str) -> bytes:
    """KeyValue{key, AnyValue{string_value}}."""
    return _field(0x0A, key.encode()) + _field(0x12, _field(0x0A, value.encode()))


def _string_attribute(key: str, value: str) -> bytes:
    """A Span's ``attributes`` field (9) holding ``key = value``."""
    return _field(0x4A, _key_value(key, value))


def _int_attribute(key: str, value: int) -> bytes:
    return _field(0x4A, _field(0x0A, key.encode()) + _field(0x12, b"\x18" + _varint(value)))


def _named(operation: str) -> bytes:
    """The constant part of a span of ``operation``: name, kind, the semantic conventions' four."""
    kinds = {"receive": 2, "send": 4}  # SERVER, PRODUCER
    head = _field(0x2A, f"{operation} {TOPIC}".encode()) + b"\x30" + bytes((kinds[operation],))
    attrs = (("messaging.system", "rocketmq"), ("messaging.operation.type", operation),
             ("messaging.operation.name", operation), ("messaging.destination.name", TOPIC))  # fmt: skip
    return head + b"".join(_string_attribute(k, v) for k, v in attrs)


# Span.flags (16, fixed32): has-is-remote, and is-remote for the receive span (its parent is remote)
RECEIVE = _named("receive") + b"\x85\x01" + (0x300).to_bytes(4, "little")
SEND = _named("send") + b"\x85\x01" + (0x100).to_bytes(4, "little")
OUTCOME = _string_attribute("rocksidecar.outcome", "SEND_OK")
SCOPE_HEAD = _field(0x0A, _field(0x0A, b"rocksidecar"))  # ScopeSpans.scope
RESOURCE = _field(0x0A, _field(0x0A, _key_value("service.name", "rocksidecar")))  # ResourceSpans.resource
TRACE = b"\x0a\x10" + TRACE_ID.to_bytes(16, "big")
REMOTE_PARENT = b"\x22\x08" + PARENT_ID.to_bytes(8, "big")
MSG_ID = _field(0x0A, b"messaging.message.id")
PARTITION = {q: _string_attribute("messaging.destination.partition.id", str(q)) for q in range(8)}
BROKER = {b: _string_attribute("messaging.rocketmq.broker", b) for b in ("broker-a", "broker-b")}
ATTEMPTS = _int_attribute("rocksidecar.attempts", 1)
SIZES = {n: _int_attribute("messaging.message.body.size", n) for n in range(4096)}  # a table, as a cache


Record = tuple[int, int, int, int, int, int, str, int, int, str]


def record(message_id: str, body_size: int, queue_id: int, broker: str) -> Record:
    """One request's two spans, as the floor keeps them: receive's id and times, send's id and times,
    and what differs per message."""
    receive_id, receive_start = random.getrandbits(64), time.time_ns()
    send_id, send_start = random.getrandbits(64), time.time_ns()
    send_end = time.time_ns()  # the broker answered
    return (receive_id, receive_start, send_id, send_start, send_end, time.time_ns(), message_id,
            body_size, queue_id, broker)  # fmt: skip


def encode(records: list[Record]) -> bytes:
    """The OTLP request of ``records``' spans in wire format (the constants written once above)."""
    spans: list[bytes] = []
    one = _ONE_BYTE
    for receive_id, receive_start, send_id, send_start, send_end, end, msg_id, size, queue, broker in records:
        receive = b"".join(
            (TRACE, b"\x12\x08", receive_id.to_bytes(8, "big"), REMOTE_PARENT, b"\x39",
             receive_start.to_bytes(8, "little"), b"\x41", end.to_bytes(8, "little"), RECEIVE, OUTCOME)
        )  # fmt: skip
        value = msg_id.encode()  # a message id: 32 characters, every length below fits one byte
        n = len(value)
        send = b"".join(
            (TRACE, b"\x12\x08", send_id.to_bytes(8, "big"), b"\x22\x08", receive_id.to_bytes(8, "big"),
             b"\x39", send_start.to_bytes(8, "little"), b"\x41", send_end.to_bytes(8, "little"), SEND,
             b"\x4a", one[n + 26], MSG_ID, b"\x12", one[n + 2], b"\x0a", one[n], value,
             SIZES.get(size) or _int_attribute("messaging.message.body.size", size), PARTITION[queue],
             BROKER[broker], ATTEMPTS)
        )  # fmt: skip
        spans += (b"\x12", _varint(len(receive)), receive, b"\x12", _varint(len(send)), send)
    scope_spans = _field(0x12, SCOPE_HEAD + b"".join(spans))
    return _field(0x0A, RESOURCE + scope_spans)


def floor_us(n: int) -> float:
    """CPU microseconds per message of the floor over ``n`` messages."""
    sink = 0
    restore = sidecar_gc()  # as bench.tracing_cpu's rows run
    started = cpu_s()
    batch: list[Record] = []
    for i in range(n):
        batch.append(record(f"{i:032X}", 256, i & 7, "broker-a"))
        if len(batch) == BATCH // 2:  # two spans a message: a batch of 512 spans
            sink += len(encode(batch))
            batch = []
    if batch:
        sink += len(encode(batch))
    assert sink > 0
    spent = cpu_s() - started
    restore()
    return spent / n * 1e6


def _run(mode: str, n: int) -> None:
    if mode == "floor":
        floor_us(n)
    else:
        asyncio.run(per_message_us(mode, n))


def instructions(mode: str, low: int = 1024, high: int = 3072) -> float:
    """Instructions per message of ``mode`` (floor, otel, off): cachegrind at two lengths, subtracted."""

    def run(n: int) -> int:
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, "-m", "bench.tracing_floor", "--run", mode, "--messages", str(n)]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        out = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
        found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
        if found is None:
            raise SystemExit(f"cachegrind printed no count:\n{out.stderr[-2000:]}")
        return int(found.group(1).replace(",", ""))

    return (run(high) - run(low)) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="count instructions (needs valgrind)")
    parser.add_argument("--run", choices=("floor", "otel", "off"), help=argparse.SUPPRESS)  # cachegrind's
    args = parser.parse_args()
    if args.run:
        _run(args.run, args.messages)
        return
    if args.instructions:
        got = {mode: instructions(mode) for mode in ("off", "floor", "otel")}
        unit = "instructions"
    else:
        runs: dict[str, list[float]] = {"off": [], "floor": [], "otel": []}
        for _ in range(args.rounds):  # alternated, each its median
            runs["floor"].append(floor_us(args.messages))
            for mode in ("off", "otel"):
                runs[mode].append(asyncio.run(per_message_us(mode, args.messages)))
        got = {mode: statistics.median(v) for mode, v in runs.items()}
        unit = "us"
    sidecar = got["otel"] - got["off"]
    print(f"a sampled request's two spans, per message ({unit}):")
    print(f"  floor (ids, times, a tuple; OTLP wire format, constants once)  {got['floor']:12,.1f}")
    print(f"  the sidecar's (bench.tracing_cpu otel - off)                     {sidecar:12,.1f}")
    print(
        f"  sidecar / floor                                                  {sidecar / got['floor']:12.2f}x"
    )


if __name__ == "__main__":
    main()

"""Coverage-guided fuzzing (atheris, libFuzzer) of what the sidecar reads from others (`make fuzz`).

Targets (``FUZZ_TARGET``):
  frames   a broker's byte stream: FrameDecoder.feed in chunks; FrameError is the only way to refuse.
  headers  a frame's header: the JSON and RocketMQ (binary) codecs; FrameError only.
  stored   a pull body, any producer's messages as the commit log holds them: the walk never raises; each
           message goes through the app's delivery encoders (CloudEvents headers and header lines, the bulk
           event, the gRPC delivery), the DMQ's inner parse and its marks and beats (their own errors only).
  answers  the app's answers: Retry-After (always within the floor and ceiling), a bulk answer's statuses
           (one a message), a traceparent.
  tables   a broker's bodies keyed by MessageQueue (fastjson): a reset's offset table (Java's and the C++
           form), a member's running info and status; FrameError only, offsets within 0..2**63-1.

It needs atheris, which is not a project dependency: `make fuzz` runs it from a venv of its own that sees
.venv's packages. Found so far: a born timestamp past datetime's years failed every delivery of the message
(bench/RESULTS.md, session 24).
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace
from typing import Any

import atheris

with atheris.instrument_imports():
    from rocksidecar.app.api.grpc_subscribe import delivery_proto
    from rocksidecar.app.dmq import beats, inner, marks
    from rocksidecar.app.subscriptions import bulk, cloudevents, push
    from rocksidecar.app.tracing.context import parse_traceparent
    from rocksidecar.rmq import MessageQueue
    from rocksidecar.rmq.consumer import queue_tables
    from rocksidecar.rmq.consumer.running_info import owned_queues
    from rocksidecar.rmq.errors import FrameError
    from rocksidecar.rmq.message_codec import (
        StoredFields,
        decode_stored_all,
        encode_stored,
        pack_host,
        pull_messages,
        pull_records,
    )
    from rocksidecar.rmq.protocol.frame import FrameDecoder
    from rocksidecar.rmq.protocol.header_codec import decode_binary, decode_json

MQ = MessageQueue("T", "broker-a", 1)
RULES = inner.Rules(max_delay_ms=90 * 86_400_000)
NOW_MS = 1_800_000_000_000
SEED_PROPERTIES = (
    "UNIQ_KEY\x01ABC\x02DMQ_DELIVER_MS\x011800000060000\x02DMQ_REAL_TOPIC\x01T\x02",
    "UNIQ_KEY\x01X\x02TIMER_DELAY_SEC\x0110\x02traceparent\x01"
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x02content-type\x01application/json\x02",
    "DMQ_OP\x01CANCEL\x02DMQ_CANCEL_ID\x01Z\x02",
)


def seed_records() -> list[bytes]:
    """Well-formed records for the ``stored`` corpus (and the ``answers`` target's messages)."""
    born, stored_at = pack_host("127.0.0.1", 1), pack_host("127.0.0.1", 10911)
    return [
        encode_stored(
            StoredFields("T", b'{"a": 1}', 1, 0, 5 + i, 100, 0, NOW_MS, born, NOW_MS + 1, stored_at, 0, props)
        )
        for i, props in enumerate(SEED_PROPERTIES)
    ]


MESSAGES = decode_stored_all(b"".join(seed_records()))


def seed_tables() -> list[bytes]:
    """Well-formed bodies for the ``tables`` corpus: a reset (Java's form, the C++ form), a status."""
    table = queue_tables.table_json({MQ: 12, MessageQueue("%RETRY%G", "broker-b", 3): 0})
    cpp = b'{"offsetTable":[{"brokerName":"b","offset":5,"queueId":1,"topic":"T"}]}'
    return [
        b'{"offsetTable":' + table + b"}",
        cpp,
        b'{"consumerTable":{},"messageQueueTable":' + table + b"}",
    ]


def frames(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    decoder = FrameDecoder()
    while fdp.remaining_bytes():
        try:
            decoder.feed(fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 64)))
        except FrameError:
            return


def headers(data: bytes) -> None:
    for decode in (decode_json, decode_binary):
        try:
            decode(data)
        except FrameError:
            pass


def stored(data: bytes) -> None:
    body = pull_messages(data)
    pull_records(data)
    for msg in [*body.items, *(u.message for u in body.undecodable)]:
        try:
            inner.parse(msg, NOW_MS, RULES)
        except inner.InnerFormatError:
            pass
        cloudevents.encode_headers(cloudevents.headers_for(msg, MQ, "G"))
        cloudevents.HeaderLines("G")(msg, MQ)
        cloudevents.structured_event(msg, MQ, "G")
        delivery: Any = SimpleNamespace(msg=msg, mq=MQ, delivery_id="d1")
        delivery_proto(delivery).SerializeToString()
        for parse, error in ((marks.parse, marks.MarkFormatError), (beats.parse, beats.BeatFormatError)):
            try:
                parse(msg.body, msg.properties)
            except error:
                pass


def answers(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    text = fdp.ConsumeUnicodeNoSurrogates(64)
    later = push.retry_after_s(text, NOW_MS / 1000)
    assert push.MIN_LATER_S <= later <= push.MAX_LATER_S, (text, later)
    parse_traceparent(text)
    statuses = bulk.statuses_from(fdp.ConsumeBytes(fdp.remaining_bytes()), MESSAGES)
    assert len(statuses) == len(MESSAGES)


def tables(data: bytes) -> None:
    try:
        owned_queues(data)
    except FrameError:
        pass
    try:
        doc = queue_tables.loads(data, "fuzz")
        table = queue_tables.offsets(doc.get("offsetTable") if isinstance(doc, dict) else doc, "fuzz")
    except FrameError:
        return
    assert all(0 <= offset <= 2**63 - 1 for offset in table.values()), table


TARGETS = {"frames": frames, "headers": headers, "stored": stored, "answers": answers, "tables": tables}


def main() -> None:
    target = os.environ.get("FUZZ_TARGET", "")
    if target not in TARGETS:
        sys.exit(f"fuzz_inputs: FUZZ_TARGET must be one of {', '.join(TARGETS)}, not {target!r}")
    corpus = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    seeds = {"stored": seed_records, "tables": seed_tables}.get(target)
    if seeds is not None and corpus and not os.listdir(corpus):
        for i, record in enumerate(seeds()):
            with open(os.path.join(corpus, f"seed{i}"), "wb") as f:
                f.write(record)
    atheris.Setup(sys.argv, TARGETS[target])
    atheris.Fuzz()


if __name__ == "__main__":
    main()

"""Any record a broker hands over (every field a producer or the broker chose, as the commit log holds it)
goes through everything that turns a pulled message into something for the app, or for the DMQ, without
an exception those paths do not expect: a born timestamp past datetime's years failed every delivery
(found by fuzzing pull bodies with atheris; bench/RESULTS.md, session 24)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocksidecar.app.api.grpc_subscribe import delivery_proto
from rocksidecar.app.dmq import inner
from rocksidecar.app.subscriptions.cloudevents import (
    HeaderLines,
    encode_headers,
    headers_for,
    structured_event,
)
from rocksidecar.app.subscriptions.stream import Delivery
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.message_codec import StoredFields, encode_stored, pack_host, pull_messages

MQ = MessageQueue("T", "broker-a", 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# properties as the producer wrote them: names and values separated by \x01 and \x02, or anything at all
KNOWN = ["UNIQ_KEY", "TAGS", "KEYS", "content-type", "traceparent", "region"]
NAMES = st.sampled_from(
    [*KNOWN, inner.REAL_TOPIC, inner.DELIVER_MS, inner.TIMER_DELAY_SEC, inner.OP]
) | st.text(max_size=8)
PROPS = st.dictionaries(NAMES, st.text(max_size=40), max_size=6).map(
    lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items())
) | st.text(max_size=60)


@settings(max_examples=300, deadline=None)
@example("T", b"{}", "UNIQ_KEY\x01U1\x02content-type\x01application/json\x02", 2**62, 0, 0)
@example("T", b"x", "UNIQ_KEY\x01U1\x02region\x01eu\x02", -(2**63), -1, 2**31 - 1)
@given(
    st.text(min_size=1, max_size=20).filter(lambda t: len(t.encode()) <= 127),
    st.binary(max_size=64),
    PROPS,
    INT64,
    INT64,
    st.integers(-(2**31), 2**31 - 1),
)
def test_any_record_reaches_the_app_s_encoders_and_the_dmq_s_parser(
    topic: str, body: bytes, props: str, born: int, stored_at: int, reconsumes: int
) -> None:
    record = StoredFields(topic, body, 1, 0, 7, 100, 0, born, pack_host("10.0.0.1", 40000), stored_at,
                          pack_host("10.0.0.2", 10911), reconsumes, props)  # fmt: skip
    pulled = pull_messages(encode_stored(record))
    assert pulled.corrupt is None and not pulled.undecodable
    [msg] = pulled.items
    assert (msg.born_timestamp_ms, msg.store_timestamp_ms, msg.body) == (born, stored_at, body)
    encode_headers(headers_for(msg, MQ, "G"))
    lines = HeaderLines("G")(msg, MQ)
    assert lines.endswith(b"\r\n")
    event = orjson.loads(orjson.dumps(structured_event(msg, MQ, "G")))
    assert event["id"] == msg.msg_id
    delivery = cast(Delivery, SimpleNamespace(msg=msg, mq=MQ, delivery_id="d1"))
    assert delivery_proto(delivery).SerializeToString()
    try:
        inner.parse(msg, 1_800_000_000_000, inner.Rules(90 * 86_400_000))
    except inner.InnerFormatError:
        pass

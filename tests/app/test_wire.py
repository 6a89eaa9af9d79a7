"""Issue 26: one pair converts the stores' message and the wire's (app.wire), for every path that
stores a request or sends a stored record again: nothing is lost either way, and neither side shares a
mutable mapping with the other."""

from __future__ import annotations

import dataclasses

from rocksidecar.app.wire import to_stored, to_wire
from rocksidecar.delay import DelayedMessage
from rocksidecar.retry.record import RetryRecord
from rocksidecar.rmq import Message
from rocksidecar.storage.message import StoredMessage

PROPS = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1"}


def test_a_request_is_stored_with_every_field() -> None:
    msg = Message("Orders", b"\x00body", tags="paid", keys=("k1", "k2"), properties=dict(PROPS), id="id-1")
    stored = to_stored(msg, sharding_key="cust-3", type="orders", created_ms=1_000)
    assert stored == StoredMessage(
        "id-1", "Orders", b"\x00body", "paid", ("k1", "k2"), PROPS, "cust-3", "orders", 1_000
    )
    msg.properties["late"] = "x"  # the producer adds its own properties to the wire message
    assert stored.properties == PROPS


def test_a_stored_record_goes_out_as_it_came_in() -> None:
    base = StoredMessage("id-2", "Orders", b"b", "t", ("k",), dict(PROPS), "sk", "orders", 5)
    for record in (
        RetryRecord.of(base, error="busy", failed_at_ms=9),
        DelayedMessage(**base.message_fields(), due_ms=7),
    ):
        msg = to_wire(record)
        assert (msg.id, msg.topic, msg.body, msg.tags, msg.keys) == ("id-2", "Orders", b"b", "t", ("k",))
        assert msg.properties == PROPS and msg.properties is not record.properties
        back = to_stored(
            msg, sharding_key=record.sharding_key, type=record.type, created_ms=record.created_ms
        )
        assert dataclasses.astuple(back) == dataclasses.astuple(base)


def test_a_retry_record_of_a_message_keeps_every_field_and_counts_the_failure() -> None:
    base = StoredMessage("id-3", "Orders", b"b", "t", ("k",), dict(PROPS), "sk", "orders", 5)
    failed = RetryRecord.of(base, error="busy", failed_at_ms=9)
    assert failed.message_fields() == base.message_fields()
    assert (failed.first_failure_ms, failed.retry_count, failed.failed_attempts) == (9, 0, 1)
    assert (failed.last_error, failed.history) == ("busy", ((9, "busy"),))
    spooled = RetryRecord.of(base)  # spooled on purpose (ack=spool): no failure yet
    assert (spooled.first_failure_ms, spooled.failed_attempts, spooled.history) == (0, 0, ())

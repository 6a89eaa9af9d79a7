"""A batch record's properties length is a Java short (encode_batch packs it with 'h', as the broker's
stored message does): a message with more than 32 767 bytes of properties fails alone, final, before the
batch is encoded, and its neighbours are sent (review of session 29: struct.error escaped send_batch, no
item got an outcome, and the replay, which sends records validated, failed every neighbour with it)."""

from __future__ import annotations

from rocksidecar.rmq import Message, SendResult
from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.message import PROPERTIES_MAX_BYTES
from tests.rmq.producer.harness import Harness


async def test_a_batch_item_whose_properties_no_batch_record_can_hold_fails_alone() -> None:
    h = Harness()
    producer = h.producer()
    too_long = Message("T", b"bad", properties={"p": "v" * (PROPERTIES_MAX_BYTES + 1)})
    results = await producer.send_batch([Message("T", b"good"), too_long], ["q", "q"], validated=True)
    assert isinstance(results[0], SendResult), results
    assert isinstance(results[1], RocketMQError) and results[1].final, results


async def test_properties_measured_in_bytes_not_characters() -> None:
    """Fewer characters than the bound but more bytes (3 a character): refused; unvalidated too."""
    h = Harness()
    producer = h.producer()
    wide = Message("T", b"bad", properties={"p": "\u20ac" * (PROPERTIES_MAX_BYTES // 3 + 1)})
    results = await producer.send_batch([wide, Message("T", b"good")])
    assert isinstance(results[0], RocketMQError) and results[0].final, results
    assert isinstance(results[1], SendResult), results

"""The 2-byte properties length of a batch record and of a stored message: longer properties are a clear
error, not a struct.error (review of session 29)."""

from __future__ import annotations

import pytest

from rocksidecar.rmq.errors import InvalidMessageError
from rocksidecar.rmq.message import PROPERTIES_MAX_BYTES
from rocksidecar.rmq.message_codec import StoredFields, decode_batch, encode_batch, encode_stored, pack_host


def test_a_batch_record_takes_properties_up_to_a_short() -> None:
    props = "p\x01" + "v" * (PROPERTIES_MAX_BYTES - 2)
    assert decode_batch(encode_batch([(b"b", 0, props)]))[0].properties == props
    with pytest.raises(InvalidMessageError) as err:
        encode_batch([(b"b", 0, props + "v")])
    assert err.value.final and err.value.field == "properties"


def test_a_stored_message_refuses_properties_past_a_short() -> None:
    host = pack_host("127.0.0.1", 10911)
    fields = StoredFields("T", b"b", 0, 0, 0, 0, 0, 0, host, 0, host, 0, "v" * (PROPERTIES_MAX_BYTES + 1))
    with pytest.raises(ValueError, match="properties"):
        encode_stored(fields)

"""java_int: the one reader of a peer's numbers (header codec, routes, broker answers)."""

from __future__ import annotations

import pytest

from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.protocol.header_codec import decode_json
from rocksidecar.rmq.protocol.numbers import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, java_int
from rocksidecar.rmq.route import TopicRouteData


@pytest.mark.parametrize(
    ("value", "expected"),
    [(7, 7), ("7", 7), ("-7", -7), (-(1 << 31), -(1 << 31)), (str((1 << 31) - 1), (1 << 31) - 1)],
)
def test_integers_and_their_decimal_text_are_read(value: object, expected: int) -> None:
    assert java_int(value, INT32_MIN, INT32_MAX) == expected


@pytest.mark.parametrize(
    "value",
    ["--5", "-", "", "+5", " 5", "5_0", "\u00b2", "\u0661", "1e3", 1.0, True, None, [1], 1 << 31],
)
def test_anything_else_is_none(value: object) -> None:
    assert java_int(value, INT32_MIN, INT32_MAX) is None


def test_a_long_is_read_in_its_range() -> None:
    assert java_int(str((1 << 63) - 1), INT64_MIN, INT64_MAX) == (1 << 63) - 1
    assert java_int(str(1 << 63), INT64_MIN, INT64_MAX) is None


@pytest.mark.parametrize("text", ["--5", "\u00b2"])  # int() raises ValueError on both
def test_a_header_or_route_number_that_int_refuses_is_a_frame_error(text: str) -> None:
    with pytest.raises(FrameError):
        decode_json(b'{"code": "%s"}' % text.encode())
    route = b'{"queueDatas": [{"brokerName": "a", "writeQueueNums": "%s"}], "brokerDatas": []}'
    with pytest.raises(FrameError):
        TopicRouteData.from_json(route % text.encode())


def test_text_past_python_s_digit_limit_is_not_a_number() -> None:
    # Before: int() raised ValueError on text of more than 4300 digits, out of every caller's FrameError.
    assert java_int("1" * 5000, INT64_MIN, INT64_MAX) is None
    assert java_int("-" + "0" * 5000, INT32_MIN, INT32_MAX) is None

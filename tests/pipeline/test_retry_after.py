"""The one Retry-After parser (pipeline.backoff.parse_retry_after), used by the Spark sink and by the
sidecar's subscriptions: RFC 9110's two forms, and nothing else."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from rocksidecar.app.subscriptions.push import DEFAULT_LATER_S, MAX_LATER_S, retry_after_s
from rocksidecar.pipeline.backoff import MAX_DELTA_S, parse_retry_after

NOW = 1_800_000_000.0


def http_date(seconds: float) -> str:
    return format_datetime(datetime.fromtimestamp(seconds, UTC), usegmt=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 5 ", 5.0),
        ("0", 0.0),
        ("0000000000000000005", 5.0),  # leading zeros are not "endless digits"
        ("000", 0.0),
        (None, None),
        ("", None),
        ("1.5", None),  # delta-seconds are whole seconds
        ("-1", None),
        ("+3", None),
        ("\u0661\u0662", None),  # Arabic-Indic digits: str.isdigit() says yes, RFC 9110 says no
        ("soon", None),
        ("1e9", None),
        ("nan", None),
        (http_date(NOW + 30), 30.0),
        (http_date(NOW - 30), 0.0),  # a date in the past: now
        ("Wed, 99 Foo 2026 99:99:99 GMT", None),
    ],
)
def test_both_forms_and_nothing_else(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_a_date_needs_a_clock_and_endless_digits_are_bounded() -> None:
    assert parse_retry_after(http_date(NOW + 30)) is None
    assert parse_retry_after("9" * 10_000, NOW) == MAX_DELTA_S
    assert parse_retry_after("1" + "0" * 12, NOW) == MAX_DELTA_S  # 13 digits: past the bound, not truncated


def test_the_subscriptions_apply_their_default_and_cap_to_it() -> None:
    assert retry_after_s("1.5", NOW) == DEFAULT_LATER_S  # the old subscription rule; same parser now
    assert retry_after_s(http_date(NOW + 10_000), NOW) == MAX_LATER_S
    assert retry_after_s("7", NOW) == 7.0

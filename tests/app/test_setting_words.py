"""The one parser of integer, number and true/false setting values: the sidecar's settings and its
subscriptions' accept and reject the same words, each with its own error class."""

from __future__ import annotations

import pytest

from rocksidecar.app.config import ConfigError
from rocksidecar.app.setting_words import parse_bool, parse_float, parse_int
from rocksidecar.app.subscriptions.spec import SpecError


@pytest.mark.parametrize(
    ("raw", "want"), [(True, True), ("Yes", True), (" on ", True), ("0", False), (False, False)]
)
def test_bool_words(raw: object, want: bool) -> None:
    assert parse_bool(raw, "x", SpecError) is want


def test_empty_is_what_the_caller_says() -> None:
    assert parse_bool("", "x", ConfigError, empty=False) is False
    with pytest.raises(SpecError, match="x: expected true or false, got ''"):
        parse_bool("", "x", SpecError)


@pytest.mark.parametrize("raw", ["maybe", 2, None])
def test_other_words_name_the_setting(raw: object) -> None:
    with pytest.raises(ConfigError, match="flag: expected true or false"):
        parse_bool(raw, "flag", ConfigError)


def test_int_bounds_and_bools() -> None:
    assert parse_int(" 7 ", "n", SpecError, 1, 10) == 7
    with pytest.raises(SpecError, match=r"n: must be between 1 and 10, got 11"):
        parse_int("11", "n", SpecError, 1, 10)
    with pytest.raises(ConfigError, match=r"n: must be >= 1, got 0"):
        parse_int(0, "n", ConfigError, 1)
    with pytest.raises(ConfigError, match="n: expected an integer, got True"):
        parse_int(True, "n", ConfigError, 0)
    with pytest.raises(ConfigError, match=r"n: expected an integer, got '1\.5'"):
        parse_int("1.5", "n", ConfigError, 0)


def test_float_bounds_and_nan() -> None:
    assert parse_float(" 0.5 ", "t", SpecError, 0.001, 3600) == 0.5
    with pytest.raises(SpecError, match=r"t: must be between 0\.001 and 3600, got 3601\.0"):
        parse_float("3601", "t", SpecError, 0.001, 3600)
    with pytest.raises(ConfigError, match=r"t: must be between 0\.0 and 1\.0, got nan"):
        parse_float("nan", "t", ConfigError, 0.0, 1.0)
    with pytest.raises(ConfigError, match="t: expected a number, got 'soon'"):
        parse_float("soon", "t", ConfigError, 0.0, 1.0)

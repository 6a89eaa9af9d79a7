"""Numbers a peer sends, read as Java reads them into an int or long field: a JSON integer, or its decimal
text (fastjson takes both; ext fields are always text). One reader for the header codec, routes and the
broker's answers, so that none lets a ValueError (``int("--5")``, ``int("²")``) or an out-of-range value
through."""

from __future__ import annotations

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_MAX_TEXT = 40  # characters of a number's text read at all


def java_int(value: object, low: int, high: int) -> int | None:
    """``value`` as an integer in [low, high]: an int (not a bool) or decimal text (one optional '-', ASCII
    digits); None when it is anything else or out of range."""
    if type(value) is str:
        # The length first: int() refuses text past 4300 digits (ValueError), and no Java long needs
        # more than a sign and 19 digits (leading zeros past that: not a number Java sends).
        if len(value) > _MAX_TEXT or not (
            value.isascii() and (value.isdigit() or (value[:1] == "-" and value[1:].isdigit()))
        ):
            return None
        value = int(value)
    elif type(value) is not int:
        return None
    return value if low <= value <= high else None

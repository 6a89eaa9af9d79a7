"""Bound the number of values in a JSON document before parsing it.

Parsing builds every value: a 25 MB batch of a million tiny messages held the event loop for seconds and
took hundreds of MiB before its length could be checked. Counting here uses only bytes operations that
run in C and allocate a few copies of the document (no object per value): escapes are dropped, then
everything but quotes and ``[]{},``; empty strings vanish, and the few strings left (those holding
punctuation, such as a CSV body) are removed by one regular expression, after their number is bounded.
What remains is the punctuation outside strings: one comma or opening bracket per value, or fewer.
"""

from __future__ import annotations

import re

_QUOTED = re.compile(rb'"[^"]*"')
_NOT_SHAPE = bytes(b for b in range(256) if b not in b'"[]{},')


def values_at_most(body: bytes, limit: int) -> bool:
    """False when ``body`` (valid JSON) holds more than ``limit`` values (strings, numbers, literals,
    arrays, objects; object keys are not counted). Malformed JSON gets some answer and is left to the
    parser to refuse."""
    if len(body) <= limit:  # every value takes a byte at least: no need to count (a batch of 100: 23 us)
        return True
    if body.count(b",") + body.count(b"[") + body.count(b"{") < limit:  # the same, counting in strings too
        return True
    # In valid JSON backslashes occur only inside strings, as pairs read left to right: dropping the
    # escaped backslashes first leaves every other backslash escaping the character after it.
    shape = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_SHAPE)
    # Quotes now alternate open, close. Dropping two adjacent ones removes an empty string, or joins
    # two strings that had only a colon between them: either way no character changes sides.
    shape = shape.replace(b'""', b"")
    if shape.count(b'"') > 2 * limit:  # each string left is a value
        return False
    shape = _QUOTED.sub(b"", shape)
    return shape.count(b",") + shape.count(b"[") + shape.count(b"{") + 1 <= limit

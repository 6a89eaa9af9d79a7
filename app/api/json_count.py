"""Count the items of a JSON document's top-level arrays without parsing it.

Parsing builds every value: a 25 MB batch of a million tiny messages took seconds of the event loop and
hundreds of MiB before its length could be checked. These regular-expression passes run in C over bytes
and keep nothing but shrinking copies of the document's punctuation: strings are dropped, everything but
brackets and commas deleted, and innermost containers removed until only the top two levels remain.
"""

from __future__ import annotations

import re

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_INNERMOST = re.compile(rb"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")
_PUNCTUATION = bytes(b for b in range(256) if b not in b"[]{},")
MAX_DEPTH = 16  # a valid batch nests 4 deep; each level costs one pass over the punctuation


class TooDeep(ValueError):
    """The document nests deeper than any valid request."""


def widest_top_level(body: bytes) -> int:
    """The most items of the top-level value or of any array or object directly inside it (for a batch:
    the ``messages`` array). Malformed JSON gives some count and is left to the parser to refuse.

    Raises:
        TooDeep: nesting deeper than MAX_DEPTH.
    """
    levels = [_STRING.sub(b"", body).translate(None, _PUNCTUATION)]
    while levels[-1]:
        if len(levels) > MAX_DEPTH:
            raise TooDeep(f"the JSON nests deeper than {MAX_DEPTH} levels")
        levels.append(_INNERMOST.sub(b"", levels[-1]))
    # levels[-1] is empty, levels[-2] the top-level container alone, levels[-3] it with its children
    widest = _items(levels[-2]) if len(levels) >= 2 else 0
    for child in _INNERMOST.findall(levels[-3]) if len(levels) >= 3 else ():
        widest = max(widest, _items(child))
    return widest


def _items(container: bytes) -> int:
    """Items of an innermost container such as ``[,,]`` (3) or ``{}`` (0)."""
    return container.count(b",") + 1 if len(container) > 2 else 0

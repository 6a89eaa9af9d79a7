"""The real topics the dmq service may publish to (``ROCKSIDECAR_DMQ_TOPICS``).

Anyone who may write the inner topic could otherwise have the service publish, under the service's own
credentials, to a topic their ACL would not let them write. Patterns are topic names with ``*`` for any
run of characters (fnmatch-style, case-sensitive as topic names are); no pattern means every valid topic.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from rocksidecar.rmq.errors import InvalidMessageError
from rocksidecar.rmq.message import validate_topic

MAX_PATTERNS = 1000
_CACHE_MAX = 10_000  # most traffic goes to a few topics: match each once


class TopicAllowList:
    """``allows(topic)``: whether a real topic matches one of the patterns (any topic without patterns).

    Raises:
        ValueError: a pattern that no valid topic name could match the way it reads (a character outside
            the topic alphabet, too long, a system topic), or too many patterns.
    """

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        if len(patterns) > MAX_PATTERNS:
            raise ValueError(f"at most {MAX_PATTERNS} patterns, got {len(patterns)}")
        for pattern in patterns:
            try:
                # The send API's own rules, with "*" standing for one letter: so "?" and "[...]", which
                # fnmatch would read as wildcards, are refused as they are in a topic.
                validate_topic(pattern.replace("*", "x"), "pattern")
            except InvalidMessageError as exc:
                raise ValueError(f"pattern {pattern!r}: {exc}") from None
        self.patterns = tuple(patterns)
        regex = "|".join(fnmatch.translate(p) for p in self.patterns)
        self._match = re.compile(regex).match if self.patterns else None
        self._seen: dict[str, bool] = {}

    def allows(self, topic: str) -> bool:
        if self._match is None:
            return True
        allowed = self._seen.get(topic)
        if allowed is None:
            allowed = self._match(topic) is not None
            if len(self._seen) < _CACHE_MAX:
                self._seen[topic] = allowed
        return allowed

    def __repr__(self) -> str:
        return f"TopicAllowList({list(self.patterns)!r})"


ALL_TOPICS = TopicAllowList()

"""ROCKSIDECAR_TOPICS as an allow-list: on a broker that auto-creates topics, a mistyped topic would
otherwise be created silently. Entries are topic names or ``*`` patterns (``orders-*``), compiled once
at start so that the send path pays one set lookup, plus one regex match only for names not listed."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_ENTRIES = 1000  # a configuration, not a catalogue: bounds the compiled pattern
ENTRY = re.compile(r"^[%|a-zA-Z0-9_*-]{1,127}$")  # RocketMQ's topic charset, plus the wildcard


@dataclass(frozen=True, slots=True)
class TopicAllowList:
    names: frozenset[str]  # entries without a wildcard: the common case, one set lookup
    pattern: re.Pattern[str] | None  # every wildcard entry as one alternation, or None

    @classmethod
    def of(cls, entries: Sequence[str]) -> TopicAllowList:
        wild = sorted({e for e in entries if "*" in e})
        # Only * is special ("?" and "[...]" are not in the topic charset, so they cannot appear).
        alternation = "|".join(".*".join(map(re.escape, w.split("*"))) for w in wild)
        return cls(frozenset(literal_topics(entries)), re.compile(alternation) if wild else None)

    def allows(self, topic: str) -> bool:
        if topic in self.names:
            return True
        return self.pattern is not None and self.pattern.fullmatch(topic) is not None


def literal_topics(entries: Iterable[str]) -> tuple[str, ...]:
    """The entries that name one topic: the ones whose routes can be loaded at start."""
    return tuple(e for e in entries if "*" not in e)

"""Allow-lists of topics: ``ROCKSIDECAR_TOPICS`` (what an app may send to; on a broker that auto-creates
topics a mistyped one would otherwise be created silently) and ``ROCKSIDECAR_DMQ_TOPICS`` (what the dmq
service may publish inner messages to, so that a producer of the inner topic cannot publish where its
own ACL would not let it).

Entries are topic names or ``*`` patterns (``orders-*``), checked with the send API's topic rules and
compiled once at start: the send path pays one set lookup, plus one regex match only for names not listed.
An empty list allows every topic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rocksidecar.rmq.errors import InvalidMessageError
from rocksidecar.rmq.message import validate_topic

MAX_ENTRIES = 1000  # a configuration, not a catalogue: bounds the compiled pattern


def check_entries(entries: Sequence[str]) -> None:
    """Raises ValueError for too many entries, or one that no valid topic could match as it reads (a
    character outside the topic alphabet, too long, a system topic such as SCHEDULE_TOPIC_XXXX)."""
    if len(entries) > MAX_ENTRIES:
        raise ValueError(f"at most {MAX_ENTRIES} entries, got {len(entries)}")
    for entry in entries:
        try:
            # "*" stands for one letter: "?" and "[...]", which fnmatch would read as wildcards, are
            # refused here as they are in a topic.
            validate_topic(entry.replace("*", "x"), "pattern")
        except InvalidMessageError as exc:
            raise ValueError(f"{entry!r} is not a topic or a * pattern: {exc}") from None


@dataclass(frozen=True, slots=True)
class TopicAllowList:
    names: frozenset[str]  # entries without a wildcard: the common case, one set lookup
    pattern: re.Pattern[str] | None  # every wildcard entry as one alternation, or None
    entries: tuple[str, ...] = ()

    @classmethod
    def of(cls, entries: Sequence[str]) -> TopicAllowList:
        """Raises ValueError as ``check_entries`` does."""
        check_entries(entries)
        wild = sorted({e for e in entries if "*" in e})
        alternation = "|".join(".*".join(map(re.escape, w.split("*"))) for w in wild)
        return cls(
            frozenset(literal_topics(entries)), re.compile(alternation) if wild else None, tuple(entries)
        )

    def allows(self, topic: str) -> bool:
        if topic in self.names:
            return True
        if self.pattern is None:
            return not self.names  # an empty list allows every topic
        return self.pattern.fullmatch(topic) is not None


def literal_topics(entries: Iterable[str]) -> tuple[str, ...]:
    """The entries that name one topic: the ones whose routes can be loaded at start."""
    return tuple(e for e in entries if "*" not in e)


ALL_TOPICS = TopicAllowList.of(())

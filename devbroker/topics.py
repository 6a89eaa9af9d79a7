"""A broker's topic table: TBW102 as the auto-create template, topics created on send or by request,
retry topics for consumer groups, and topic-name validation as the Java broker does it."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rocksidecar.rmq.codes import DEFAULT_TOPIC, PERM_INHERIT, PERM_READ, PERM_WRITE
from rocksidecar.rmq.message import NOT_ALLOWED_SEND_TOPICS, SYSTEM_TOPIC_PREFIX, TOPIC_MAX_LEN, TOPIC_PATTERN

from .jsonfile import read_json, write_json

# TopicValidator: names that are system topics; those a client may not send to are the client's list.
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {DEFAULT_TOPIC, "BenchmarkTest", "RMQ_SYS_TRACE_TOPIC"}
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
RW = PERM_READ | PERM_WRITE


@functools.lru_cache(maxsize=4096)  # checked on every send; the same few names come again and again
def topic_name_error(topic: str) -> str | None:
    """Why the broker refuses this topic name (TopicValidator.validateTopic), or None."""
    if not topic.strip():
        return "The specified topic is blank."
    if not TOPIC_PATTERN.fullmatch(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LEN:
        return "The specified topic is longer than topic max length."
    return None


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = RW
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def queue_count(self) -> int:
        """Queue ids below this are legal (the broker checks against the larger of the two counts)."""
        return max(self.read_queue_nums, self.write_queue_nums)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class TopicTable:
    """Topics of one broker. With a path, every change is saved there (TBW102 is not: it follows
    the auto-create setting of the current run)."""

    def __init__(self, *, queues: int, auto_create: bool, path: Path | None = None) -> None:
        if queues < 1:
            raise ValueError(f"a topic needs at least one queue, not {queues}")
        self._path = path
        self._topics: dict[str, TopicConfig] = {}
        if path is not None:
            for doc in (read_json(path) or {}).get("topics", []):
                cfg = TopicConfig(**doc)
                self._topics[cfg.name] = cfg
        self._topics.pop(DEFAULT_TOPIC, None)
        if auto_create:
            self._topics[DEFAULT_TOPIC] = TopicConfig(DEFAULT_TOPIC, queues, queues, RW | PERM_INHERIT)

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def __contains__(self, topic: object) -> bool:
        return topic in self._topics

    def __iter__(self) -> Iterator[TopicConfig]:
        return iter(list(self._topics.values()))

    def names(self) -> list[str]:
        return sorted(self._topics)

    def put(self, cfg: TopicConfig) -> None:
        """Create or update a topic (UPDATE_AND_CREATE_TOPIC); the caller validated the name."""
        if cfg.read_queue_nums < 0 or cfg.write_queue_nums < 0 or cfg.queue_count < 1:
            raise ValueError(f"topic {cfg.name!r} needs at least one queue")
        self._topics[cfg.name] = cfg
        self._save()

    def auto_create(
        self, topic: str, default_topic: str, requested_queues: int, sys_flag: int
    ) -> TopicConfig | None:
        """createTopicInSendMessageMethod: inherit from an inheritable default topic, or None."""
        template = self._topics.get(default_topic)
        if template is None or not template.perm & PERM_INHERIT:
            return None
        queues = max(1, min(requested_queues, template.write_queue_nums))
        cfg = replace(
            template,
            name=topic,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=template.perm & ~PERM_INHERIT,
            topic_sys_flag=sys_flag,
        )
        self.put(cfg)
        return cfg

    def ensure(self, topic: str, queues: int = 1) -> TopicConfig:
        """The topic, created read-write with ``queues`` queues if missing (retry and DLQ topics)."""
        cfg = self._topics.get(topic)
        if cfg is None:
            cfg = TopicConfig(topic, queues, queues)
            self.put(cfg)
        return cfg

    def _save(self) -> None:
        if self._path is not None:
            docs = [c.to_json() for c in self._topics.values() if c.name != DEFAULT_TOPIC]
            write_json(self._path, {"topics": docs})

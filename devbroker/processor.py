"""The base of the request processors that read and write the message store by the topic table."""

from __future__ import annotations

from .store import MessageStore
from .topics import TopicTable


class StoreProcessor:
    def __init__(self, store: MessageStore, topics: TopicTable) -> None:
        self._store = store
        self._topics = topics

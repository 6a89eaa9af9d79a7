"""The parts of one broker that its request processors share."""

from __future__ import annotations

from dataclasses import dataclass

from .clients import ClientRegistry
from .filtering import PropertyFilter
from .offsets import ConsumerOffsets
from .store import MessageStore
from .topics import TopicTable


@dataclass(frozen=True, slots=True)
class BrokerState:
    store: MessageStore
    topics: TopicTable
    clients: ClientRegistry
    offsets: ConsumerOffsets
    # enablePropertyFilter: SQL92 subscriptions (its ``enabled`` flips at run time)
    property_filter: PropertyFilter

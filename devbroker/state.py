"""The parts of one broker that its request processors share."""

from __future__ import annotations

from dataclasses import dataclass

from devbroker.clients import ClientRegistry
from devbroker.filtering import PropertyFilter
from devbroker.offsets import ConsumerOffsets
from devbroker.store import MessageStore
from devbroker.topics import TopicTable


@dataclass(frozen=True, slots=True)
class BrokerState:
    store: MessageStore
    topics: TopicTable
    clients: ClientRegistry
    offsets: ConsumerOffsets
    # enablePropertyFilter: SQL92 subscriptions (its ``enabled`` flips at run time)
    property_filter: PropertyFilter

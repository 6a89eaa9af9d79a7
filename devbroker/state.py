"""The parts of one broker that its request processors share."""

from __future__ import annotations

from dataclasses import dataclass

from rocksidecar.devbroker.clients import ClientRegistry
from rocksidecar.devbroker.filtering import PropertyFilter
from rocksidecar.devbroker.offsets import ConsumerOffsets
from rocksidecar.devbroker.store import MessageStore
from rocksidecar.devbroker.topics import TopicTable


@dataclass(frozen=True, slots=True)
class BrokerState:
    store: MessageStore
    topics: TopicTable
    clients: ClientRegistry
    offsets: ConsumerOffsets
    # enablePropertyFilter: SQL92 subscriptions (its ``enabled`` flips at run time)
    property_filter: PropertyFilter

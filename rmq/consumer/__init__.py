"""The consume side of the RocketMQ client: allocation strategies, process queues, offset stores and a
push consumer built on long-polling pulls (concurrent and orderly)."""

from ..client_id import build_client_id
from .allocate import (
    AllocateStrategy,
    Averagely,
    AveragelyByCircle,
    ByConfig,
    ByMachineRoom,
    ConsistentHash,
    Environment,
    MachineRoomNearby,
    PrefixMachineRooms,
)
from .bounded_hash import BoundedHash
from .config import (
    ConsumeFrom,
    ConsumerConfig,
    ConsumeStatus,
    MessageListener,
    MessageModel,
)
from .offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from .process_queue import ProcessQueue
from .push_consumer import PushConsumer

__all__ = [
    "AllocateStrategy",
    "Averagely",
    "AveragelyByCircle",
    "BoundedHash",
    "ByConfig",
    "ByMachineRoom",
    "ConsistentHash",
    "ConsumeFrom",
    "ConsumeStatus",
    "ConsumerConfig",
    "Environment",
    "LocalFileOffsetStore",
    "MachineRoomNearby",
    "MessageListener",
    "MessageModel",
    "OffsetStore",
    "PrefixMachineRooms",
    "ProcessQueue",
    "PushConsumer",
    "RemoteOffsetStore",
    "build_client_id",
]

"""The consume side of the RocketMQ client: allocation strategies, process queues, offset stores and a
push consumer built on long-polling pulls (concurrent and orderly)."""

from rocksidecar.rmq.client_id import build_client_id
from rocksidecar.rmq.consumer.allocate import (
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
from rocksidecar.rmq.consumer.bounded_hash import BoundedHash
from rocksidecar.rmq.consumer.config import (
    ConsumeFrom,
    ConsumerConfig,
    ConsumeStatus,
    MessageListener,
    MessageModel,
)
from rocksidecar.rmq.consumer.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.consumer.push_consumer import PushConsumer

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

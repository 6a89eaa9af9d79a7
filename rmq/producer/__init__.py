"""The producer the sidecar sends through: routes, queue selection, fault tolerance, retries, batches."""

from rocksidecar.rmq.producer.config import ProducerConfig
from rocksidecar.rmq.producer.fault import BrokerState, LatencyFaultTolerance
from rocksidecar.rmq.producer.producer import Producer
from rocksidecar.rmq.producer.selector import (
    ByShardingKey,
    EnvironmentQueue,
    PreferZone,
    QueueSelector,
    RandomQueue,
    RoundRobin,
    SelectorName,
)

__all__ = [
    "BrokerState",
    "ByShardingKey",
    "EnvironmentQueue",
    "LatencyFaultTolerance",
    "PreferZone",
    "Producer",
    "ProducerConfig",
    "QueueSelector",
    "RandomQueue",
    "RoundRobin",
    "SelectorName",
]

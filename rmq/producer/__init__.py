"""The producer the sidecar sends through: routes, queue selection, fault tolerance, retries, batches."""

from rmq.producer.config import ProducerConfig
from rmq.producer.fault import BrokerState, LatencyFaultTolerance
from rmq.producer.producer import Producer
from rmq.producer.selector import (
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

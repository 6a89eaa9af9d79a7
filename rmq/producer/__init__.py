"""The producer the sidecar sends through: routes, queue selection, fault tolerance, retries, batches."""

from .config import ProducerConfig
from .fault import BrokerState, LatencyFaultTolerance
from .producer import Producer
from .selector import (
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

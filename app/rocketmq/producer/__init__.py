"""The producer the sidecar sends through: routes, queue selection, fault tolerance, retries, batches."""

from app.rocketmq.producer.config import ProducerConfig
from app.rocketmq.producer.fault import BrokerState, LatencyFaultTolerance
from app.rocketmq.producer.producer import Producer
from app.rocketmq.producer.selector import (
    ByShardingKey,
    EnvironmentQueue,
    PreferZone,
    QueueSelector,
    RandomQueue,
    RoundRobin,
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
]

"""devbroker: a small RocketMQ-protocol-compatible name server and brokers, for local runs and tests."""

from devbroker.broker import DevBroker
from devbroker.cluster import DevCluster
from devbroker.faults import Faults
from devbroker.namesrv import NameServer
from devbroker.topics import TopicConfig

__all__ = ["DevBroker", "DevCluster", "Faults", "NameServer", "TopicConfig"]

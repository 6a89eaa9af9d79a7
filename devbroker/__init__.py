"""devbroker: a small RocketMQ-protocol-compatible name server and brokers, for local runs and tests."""

from .broker import DevBroker
from .cluster import DevCluster
from .faults import Faults
from .namesrv import NameServer
from .topics import TopicConfig

__all__ = ["DevBroker", "DevCluster", "Faults", "NameServer", "TopicConfig"]

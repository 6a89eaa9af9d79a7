"""devbroker: a small RocketMQ-protocol-compatible name server and brokers, for local runs and tests."""

from rocksidecar.devbroker.broker import DevBroker
from rocksidecar.devbroker.cluster import DevCluster
from rocksidecar.devbroker.faults import Faults
from rocksidecar.devbroker.namesrv import NameServer
from rocksidecar.devbroker.topics import TopicConfig

__all__ = ["DevBroker", "DevCluster", "Faults", "NameServer", "TopicConfig"]

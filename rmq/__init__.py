"""An asyncio client for Apache RocketMQ's remoting protocol (4.x brokers; 5.x through the name server)."""

from rocksidecar.rmq.acl import Credentials
from rocksidecar.rmq.broker import BrokerApi, ConsumerData, Subscription
from rocksidecar.rmq.client_instance import ClientInstance
from rocksidecar.rmq.errors import (
    Attempt,
    BrokerError,
    ClientError,
    ConnectError,
    ConnectionClosed,
    FrameError,
    InvalidMessageError,
    RemotingError,
    RequestTimeout,
    RocketMQError,
    RouteNotFound,
    SendFailed,
    TopicNotExist,
)
from rocksidecar.rmq.message import Message, MessageExt, MessageQueue
from rocksidecar.rmq.msgid import new_uniq_id
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.pool import Invoker, RemotingClient
from rocksidecar.rmq.result import PullResult, PullStatus, SendResult, SendStatus
from rocksidecar.rmq.route import TopicRouteData
from rocksidecar.rmq.sender import Sender

__all__ = [
    "Attempt",
    "BrokerApi",
    "BrokerError",
    "ClientError",
    "ClientInstance",
    "ConnectError",
    "ConnectionClosed",
    "ConsumerData",
    "Credentials",
    "FrameError",
    "InvalidMessageError",
    "Invoker",
    "Message",
    "MessageExt",
    "MessageQueue",
    "NameServerClient",
    "PullResult",
    "PullStatus",
    "RemotingClient",
    "RemotingError",
    "RequestTimeout",
    "RocketMQError",
    "RouteNotFound",
    "SendFailed",
    "SendResult",
    "SendStatus",
    "Sender",
    "Subscription",
    "TopicNotExist",
    "TopicRouteData",
    "new_uniq_id",
]

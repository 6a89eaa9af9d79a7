"""An asyncio client for Apache RocketMQ's remoting protocol (4.x brokers; 5.x through the name server)."""

from rmq.acl import Credentials
from rmq.broker import BrokerApi, ConsumerData, Subscription
from rmq.client_instance import ClientInstance
from rmq.errors import (
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
from rmq.message import Message, MessageExt, MessageQueue
from rmq.msgid import new_uniq_id
from rmq.namesrv import NameServerClient
from rmq.pool import Invoker, RemotingClient
from rmq.result import PullResult, PullStatus, SendResult, SendStatus
from rmq.route import TopicRouteData
from rmq.sender import Sender

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

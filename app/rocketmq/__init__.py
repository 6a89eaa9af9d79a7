"""An asyncio client for Apache RocketMQ's remoting protocol (4.x brokers; 5.x through the name server)."""

from app.rocketmq.acl import Credentials
from app.rocketmq.broker import BrokerApi, ConsumerData, Subscription
from app.rocketmq.errors import (
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
from app.rocketmq.message import Message, MessageExt, MessageQueue
from app.rocketmq.msgid import new_uniq_id
from app.rocketmq.namesrv import NameServerClient
from app.rocketmq.pool import Invoker, RemotingClient
from app.rocketmq.result import PullResult, PullStatus, SendResult, SendStatus
from app.rocketmq.route import TopicRouteData

__all__ = [
    "Attempt",
    "BrokerApi",
    "BrokerError",
    "ClientError",
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
    "Subscription",
    "TopicNotExist",
    "TopicRouteData",
    "new_uniq_id",
]

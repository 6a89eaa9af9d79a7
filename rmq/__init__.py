"""An asyncio client for Apache RocketMQ's remoting protocol (4.x brokers; 5.x through the name server)."""

from .acl import Credentials
from .broker import BrokerApi, ConsumerData, Subscription
from .client_instance import ClientInstance
from .errors import (
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
from .message import Message, MessageExt, MessageQueue
from .message_codec import StoredRecord, offset_msg_id
from .msgid import new_uniq_id, new_uniq_ids
from .namesrv import NameServerClient
from .pool import Invoker, RemotingClient
from .result import PullResult, PullStatus, SendResult, SendStatus
from .route import TopicRouteData
from .sender import Sender
from .tls import client_context as tls_context

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
    "StoredRecord",
    "Subscription",
    "TopicNotExist",
    "TopicRouteData",
    "new_uniq_id",
    "new_uniq_ids",
    "offset_msg_id",
    "tls_context",
]

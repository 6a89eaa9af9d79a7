"""Exceptions of the RocketMQ client, with flags that tell callers what may help.

    RocketMQError                 .retriable, .refresh_route, .code, .remark, .addr
    ├── RemotingError             transport; retriable
    │   ├── ConnectError          could not connect
    │   ├── ConnectionClosed      the connection dropped while a request was outstanding
    │   ├── RequestTimeout        no response within the request's timeout
    │   └── FrameError            a corrupt frame; the connection is closed
    ├── BrokerError               a response code other than success; one subclass per known code
    ├── RouteNotFound             no route for a topic (refresh_route)
    ├── ClientError               misuse, closed client, bad arguments; never retriable
    │   └── InvalidMessageError   a message that can never be sent as it is (names .field)
    └── SendFailed                every attempt of a send failed; .attempts lists them

Callers branch on ``exc.retriable`` and ``exc.refresh_route``, never on long isinstance chains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rmq.codes import ResponseCode


class RocketMQError(Exception):
    retriable: ClassVar[bool] = False
    refresh_route: ClassVar[bool] = False

    def __init__(
        self, message: str, *, code: int | None = None, remark: str | None = None, addr: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.remark = remark
        self.addr = addr


class RemotingError(RocketMQError):
    retriable = True


class ConnectError(RemotingError):
    pass


class ConnectionClosed(RemotingError):
    pass


class RequestTimeout(RemotingError):
    pass


class FrameError(RemotingError):
    pass


class ClientError(RocketMQError):
    pass


class InvalidMessageError(ClientError):
    """The message itself is unacceptable; ``field`` names the offending part."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class RouteNotFound(RocketMQError):
    retriable = True
    refresh_route = True


class BrokerError(RocketMQError):
    """A broker or name server answered with a non-success code."""


class BrokerSystemError(BrokerError):
    retriable = True


class SystemBusy(BrokerError):
    # The Java client does not retry SYSTEM_BUSY; another broker usually is not busy, so we do (P6).
    retriable = True


class RequestCodeNotSupported(BrokerError):
    pass


class MessageIllegal(BrokerError):
    pass


class ServiceNotAvailable(BrokerError):
    retriable = True


class NoPermission(BrokerError):
    # Final by default (mission P6): a producer may still opt in through its retry-code set.
    pass


class TopicNotExist(BrokerError):
    refresh_route = True


class PullOffsetMoved(BrokerError):
    pass


class QueryNotFound(BrokerError):
    pass


class SubscriptionError(BrokerError):
    pass


_BY_CODE: dict[int, type[BrokerError]] = {
    ResponseCode.SYSTEM_ERROR: BrokerSystemError,
    ResponseCode.SYSTEM_BUSY: SystemBusy,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: RequestCodeNotSupported,
    ResponseCode.MESSAGE_ILLEGAL: MessageIllegal,
    ResponseCode.SERVICE_NOT_AVAILABLE: ServiceNotAvailable,
    ResponseCode.NO_PERMISSION: NoPermission,
    ResponseCode.TOPIC_NOT_EXIST: TopicNotExist,
    ResponseCode.PULL_OFFSET_MOVED: PullOffsetMoved,
    ResponseCode.QUERY_NOT_FOUND: QueryNotFound,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: SubscriptionError,
    ResponseCode.SUBSCRIPTION_NOT_EXIST: SubscriptionError,
    ResponseCode.SUBSCRIPTION_NOT_LATEST: SubscriptionError,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: SubscriptionError,
}


def code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"CODE_{code}"


def for_code(code: int, remark: str | None, addr: str | None = None) -> BrokerError:
    """The exception for a broker response ``code``; unknown codes are plain, final BrokerErrors."""
    cls = _BY_CODE.get(code, BrokerError)
    where = f" from {addr}" if addr else ""
    return cls(f"{code_name(code)}{where}: {remark or ''}".rstrip(": "), code=code, remark=remark, addr=addr)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of a send: where it went, how long it took, and why it failed."""

    broker: str
    queue_id: int
    latency_s: float
    error: str
    code: int | None = None


class SendFailed(RocketMQError):
    """Every attempt failed (or a final error stopped them); ``attempts`` is the history."""

    def __init__(self, message: str, attempts: list[Attempt], last: RocketMQError | None) -> None:
        super().__init__(
            message,
            code=last.code if last else None,
            remark=last.remark if last else None,
            addr=last.addr if last else None,
        )
        self.attempts = attempts
        self.last = last

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        # Whether a later try (e.g. from the retry store) could succeed.
        return self.last is None or self.last.retriable or self.last.refresh_route

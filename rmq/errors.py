"""Exceptions of the RocketMQ client, with flags that tell callers what may help.

    RocketMQError                 .retriable, .final, .refresh_route, .code, .remark, .addr
    ├── RemotingError             transport; retriable
    │   ├── ConnectError          could not connect
    │   ├── ConnectionClosed      the connection dropped while a request was outstanding
    │   ├── RequestTimeout        no response within the request's timeout
    │   └── FrameError            a corrupt frame; the connection is closed
    │       └── InflateError      a record's body or text that does not decode (not the transport's fault)
    ├── BrokerError               a response code other than success; one subclass per known code
    ├── RouteNotFound             no route for a topic (refresh_route)
    ├── ClientError               misuse, closed client, bad arguments; never retriable; our side's,
    │   │                         never a broker's (a send does not count it against the broker)
    │   └── InvalidMessageError   a message that can never be sent as it is (names .field); final
    │       └── RequestTooLarge   a request whose frame would pass the protocol's 16 MiB (encoder)
    └── SendFailed                every attempt of a send failed; .attempts lists them

The failure rule (the one place it is decided; README "Failure rule" has the same table):
- ``retriable``: try again at once on another broker within the same send. Java's retryResponseCodes
  (SYSTEM_ERROR, SERVICE_NOT_AVAILABLE, NO_PERMISSION, TOPIC_NOT_EXIST, NO_BUYER_ID,
  NOT_IN_CURRENT_UNIT), plus SYSTEM_BUSY and every transport error.
- ``final``: can never succeed as it is (MESSAGE_ILLEGAL, what validation catches): the sidecar answers
  422 at send time and the replay buries it in the dead letters at once.
- neither (NO_PERMISSION on every broker, unknown codes, the budget spent): stop this send; the message
  is spooled with the broker's code and remark, since the cause may heal.
Callers read :func:`is_final` and the flags, never long isinstance chains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .codes import ResponseCode


class RocketMQError(Exception):
    retriable: ClassVar[bool] = False  # worth another broker within the send
    final: ClassVar[bool] = False  # can never succeed: reject or dead-letter, never spool
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


class InflateError(FrameError):
    """A stored record whose frame is sound but whose content is not: a compressed body that is corrupt,
    truncated or inflates past the reader's limit (every codec's error becomes this one), or text that is
    not UTF-8. Retrying cannot help: the record is as the producer made it."""

    retriable = False


class ClientError(RocketMQError):
    pass


class InvalidMessageError(ClientError):
    """The message itself is unacceptable; ``field`` names the offending part."""

    final = True

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class RequestTooLarge(InvalidMessageError):
    """A request whose frame would be larger than any peer reads (MAX_FRAME_BYTES, as Java's NettyDecoder):
    raised by the encoder before a byte is written. For a send it is the message, as compressed, that is
    too large: the same request fails the same way on every broker and at every later try, so it is final
    (refused at send time, dead-lettered by the replay), and no broker's doing."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="body")


class RouteNotFound(RocketMQError):
    retriable = True
    refresh_route = True


class BrokerError(RocketMQError):
    """A broker or name server answered with a non-success code."""


_BY_CODE: dict[int, type[BrokerError]] = {}


def _code_error(
    name: str, *codes: int, retriable: bool = False, final: bool = False, refresh_route: bool = False
) -> type[BrokerError]:
    """A BrokerError subclass for ``codes`` with its flags; the one table the failure rule reads."""
    cls = type(
        name,
        (BrokerError,),
        {"retriable": retriable, "final": final, "refresh_route": refresh_route, "__module__": __name__},
    )
    for code in codes:
        _BY_CODE[code] = cls
    return cls


# One row per known response code (several codes may share a class).
BrokerSystemError = _code_error("BrokerSystemError", ResponseCode.SYSTEM_ERROR, retriable=True)
# The Java client does not retry SYSTEM_BUSY; another broker usually is not busy, so we do (P6).
SystemBusy = _code_error("SystemBusy", ResponseCode.SYSTEM_BUSY, retriable=True)
RequestCodeNotSupported = _code_error("RequestCodeNotSupported", ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
MessageIllegal = _code_error("MessageIllegal", ResponseCode.MESSAGE_ILLEGAL, final=True)
ServiceNotAvailable = _code_error("ServiceNotAvailable", ResponseCode.SERVICE_NOT_AVAILABLE, retriable=True)
# Java retries it on another broker: a broker made read-only for maintenance answers it.
NoPermission = _code_error("NoPermission", ResponseCode.NO_PERMISSION, retriable=True)
# After one route refresh, on another broker (Java's retryResponseCodes).
TopicNotExist = _code_error("TopicNotExist", ResponseCode.TOPIC_NOT_EXIST, retriable=True, refresh_route=True)
NoBuyerId = _code_error("NoBuyerId", ResponseCode.NO_BUYER_ID, retriable=True)
NotInCurrentUnit = _code_error("NotInCurrentUnit", ResponseCode.NOT_IN_CURRENT_UNIT, retriable=True)
PullOffsetMoved = _code_error("PullOffsetMoved", ResponseCode.PULL_OFFSET_MOVED)
QueryNotFound = _code_error("QueryNotFound", ResponseCode.QUERY_NOT_FOUND)
SubscriptionError = _code_error(
    "SubscriptionError",
    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    ResponseCode.SUBSCRIPTION_NOT_EXIST,
    ResponseCode.SUBSCRIPTION_NOT_LATEST,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
)


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
    def final(self) -> bool:  # type: ignore[override]
        return self.last is not None and self.last.final

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        # Whether a later try (the retry store's) could succeed: anything but a final error may heal.
        return not self.final


def failure_cause(exc: RocketMQError) -> str:
    """A short label for metrics: the response code's name, or TRANSPORT when no broker answered."""
    if exc.code is not None:
        return code_name(exc.code)
    return "TRANSPORT" if isinstance(exc, RemotingError) else type(exc).__name__


def is_final(exc: BaseException) -> bool:
    """The failure rule's one question above the send: can this message never succeed as it is?"""
    return bool(getattr(exc, "final", False))

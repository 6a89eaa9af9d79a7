"""enablePropertyFilter and SQL92 subscriptions: the broker's side of the filter (ClientManageProcessor's
checkClientConfig, PullMessageProcessor's refusal, ExpressionMessageFilter's match on properties)."""

from __future__ import annotations

from collections.abc import Callable

from rocksidecar.rmq.broker import EXPRESSION_SQL92, EXPRESSION_TAG
from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.message_codec import decode_stored

from .headers import Reject
from .sql92 import FilterParseError, SqlFilter, compile_sql92

_CACHE_LIMIT = 256  # distinct expressions kept compiled; a group's expression rarely changes

Accept = Callable[[bytes], bool]  # a stored message (as the commit log holds it) -> deliver it?


class PropertyFilter:
    """``enabled`` is the broker's enablePropertyFilter (off by default, as in RocketMQ); tests and the
    CLI turn it on, and may flip it while the broker runs."""

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled
        self._compiled: dict[str, SqlFilter] = {}

    def check(self, expression_type: str, expression: str) -> SqlFilter | None:
        """The compiled filter of a non-TAG subscription (None for TAG).

        Raises:
            Reject: SYSTEM_ERROR when filtering by properties is off or the type unknown (the remark
                Java's broker gives), SUBSCRIPTION_PARSE_FAILED when the expression does not parse.
        """
        if expression_type == EXPRESSION_TAG:
            return None
        if not self.enabled or expression_type != EXPRESSION_SQL92:
            raise _unsupported(expression_type)
        found = self._compiled.get(expression)
        if found is None:
            try:
                found = compile_sql92(expression)
            except FilterParseError as exc:
                raise Reject(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"{expression}: {exc}") from None
            if len(self._compiled) >= _CACHE_LIMIT:
                self._compiled.clear()
            self._compiled[expression] = found
        return found

    def accept(self, expression_type: str, expression: str) -> Accept | None:
        """What a pull delivers, judged on each message's properties; None: every message (TAG)."""
        sql = self.check(expression_type, expression)
        if sql is None:
            return None

        def matches(stored: bytes) -> bool:
            msg, _ = decode_stored(stored, inflate=False)
            return sql.matches(msg.properties)

        return matches

    def pull_accept(self, expression_type: str, expression: str) -> Accept | None:
        """What a pull carrying its own subscription delivers: as ``accept``, except that a non-TAG
        expression that does not compile (or of a type with no filter) filters nothing. 4.9.4's
        PullMessageProcessor gets null from ConsumerFilterManager.build, which catches the compile
        error, and ExpressionMessageFilter with no compiled expression matches every message; only
        CHECK_CLIENT_CONFIG refuses such an expression.

        Raises:
            Reject: SYSTEM_ERROR when filtering by properties is off (checked after the build in Java,
                so whether or not the expression compiles).
        """
        if expression_type == EXPRESSION_TAG:
            return None
        if not self.enabled:
            raise _unsupported(expression_type)
        try:
            return self.accept(expression_type, expression)
        except Reject:  # enabled, so the type is unknown or the expression does not parse
            return None


def _unsupported(expression_type: str) -> Reject:
    remark = f"The broker does not support consumer to filter message by {expression_type}"
    return Reject(ResponseCode.SYSTEM_ERROR, remark)

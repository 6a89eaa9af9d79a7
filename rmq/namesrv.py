"""Route queries across several name servers, failing over to the next on a transport error."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

import orjson

from .codes import RequestCode, ResponseCode
from .errors import ClientError, FrameError, RemotingError, RocketMQError, TopicNotExist, for_code
from .pool import Invoker
from .protocol.frame import RemotingCommand
from .route import TopicRouteData, is_host_port, parse_lenient_json

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 3.0


def parse_addresses(text: str | Sequence[str]) -> list[str]:
    """``"a:9876;b:9876"`` or ``"a:9876,b:9876"`` (both separators are in use) into a list."""
    items = text.replace(";", ",").split(",") if isinstance(text, str) else list(text)
    out = [a.strip() for a in items if a.strip()]
    for addr in out:
        if not is_host_port(addr):
            raise ClientError(f"name server address {addr!r} is not host:port")
    if not out:
        raise ClientError("no name server address given")
    return out


class NameServerClient:
    """Asks the name server that answered last; on a transport failure tries the others in turn.

    The first one asked is chosen at random (``rng``, for tests), as Java 4.9.4's NettyRemotingClient
    does (namesrvIndex starts at a random value): starting every client at the first address sent every
    route lookup of a fleet configured with the same list to that one name server."""

    def __init__(
        self,
        invoker: Invoker,
        addresses: str | Sequence[str],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._invoker = invoker
        self.addresses = parse_addresses(addresses)
        self._current = (rng or random.Random()).randrange(len(self.addresses))
        self._timeout_s = timeout_s

    @property
    def invoker(self) -> Invoker:
        """The connections the requests go through (shared with the brokers' calls)."""
        return self._invoker

    async def _request(self, code: int, header: dict[str, str]) -> RemotingCommand:
        last: RocketMQError | None = None
        n = len(self.addresses)
        for i in range(n):
            idx = (self._current + i) % n
            addr = self.addresses[idx]
            try:
                resp = await self._invoker.invoke(addr, RemotingCommand(code, dict(header)), self._timeout_s)
            except RemotingError as exc:
                last = exc
                continue
            self._current = idx
            return resp
        assert last is not None
        raise last

    async def get_route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC; TopicNotExist when no name server knows the topic."""
        resp = await self._request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": "true"}
        )
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotExist(
                f"topic {topic!r} has no route on the name server: {resp.remark or ''}",
                code=resp.code,
                remark=resp.remark,
            )
        if resp.code != ResponseCode.SUCCESS:
            raise for_code(resp.code, resp.remark)
        try:
            return TopicRouteData.from_json(resp.body)
        except FrameError as exc:
            addr = self.addresses[self._current]
            log.warning("route of %s from name server %s refused: %s", topic, addr, exc)
            raise FrameError(f"route of {topic!r} from {addr} refused: {exc}", addr=addr) from exc

    async def get_cluster_info(self) -> dict[str, object]:
        resp = await self._request(RequestCode.GET_BROKER_CLUSTER_INFO, {})
        if resp.code != ResponseCode.SUCCESS:
            raise for_code(resp.code, resp.remark)
        try:
            doc = parse_lenient_json(resp.body)
        except FrameError as exc:
            addr = self.addresses[self._current]
            raise FrameError(f"cluster info from {addr} refused: {exc}", addr=addr) from exc
        return doc if isinstance(doc, dict) else {}

    async def get_all_topics(self) -> list[str]:
        resp = await self._request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
        if resp.code != ResponseCode.SUCCESS:
            raise for_code(resp.code, resp.remark)
        try:
            topics = orjson.loads(resp.body).get("topicList") or []
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise FrameError(f"undecodable topic list: {exc}") from exc
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            raise FrameError("the topic list is not a list of names")
        return topics

    async def ping(self) -> bool:
        """True when some name server answers at all (for readiness)."""
        try:
            await self._request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
        except RocketMQError:
            return False
        return True

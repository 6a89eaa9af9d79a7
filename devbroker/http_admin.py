"""The admin HTTP endpoint for humans, on loopback: list brokers, set or clear faults, stop, start or
drop a broker's connections.

    GET    /brokers                      every broker: address, running, connections, faults, topics
    GET    /brokers/{name}
    POST   /brokers/{name}/faults        JSON {latency_ms, fail_next, fail_code, fail_remark, fail_all}
    DELETE /brokers/{name}/faults
    POST   /brokers/{name}/stop | start | drop
    GET    /topics/{topic}/messages      what every broker stores for a topic: UNIQ_KEY, broker, queue,
                                         offset, body size (?offset=N&limit=M pages through them)

A web page can make a browser send requests to loopback, so every request passes the sidecar's edge
checks (app.api.guards, written again here: devbroker imports no app code) before any route: a Host
that is not loopback (nor the address the request came in on) is refused 403 (DNS rebinding), so is an
Origin that is not loopback (cross-site forms and fetches), and a body that is not
``Content-Type: application/json`` is refused 415. No CORS headers are sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Generator, Mapping
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .broker import DevBroker
from .listener import LOOPBACK


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def describe(broker: DevBroker) -> dict[str, Any]:
    return {
        "name": broker.name,
        "addr": broker.addr,
        "running": broker.running,
        "connections": len(broker.listener.connections),
        "faults": broker.faults.to_json(),
        "enable_property_filter": broker.property_filter.enabled,
        "topics": broker.topics.names(),
        "groups": broker.clients.groups(),
    }


def apply_faults(broker: DevBroker, doc: Any) -> None:
    """Apply the given fields of a faults document, all or none; raises _BadRequest naming a bad field."""
    if not isinstance(doc, dict):
        raise _BadRequest(400, "the body must be a JSON object")
    unknown = set(doc) - {"latency_ms", "fail_next", "fail_code", "fail_remark", "fail_all"}
    if unknown:
        raise _BadRequest(400, f"unknown fields: {sorted(unknown)}")
    changes: dict[str, Any] = {}
    if "latency_ms" in doc:
        changes["latency_s"] = _number(doc, "latency_ms") / 1000
    for name in ("fail_code", "fail_next"):
        if name in doc:
            changes[name] = int(_number(doc, name))
    for name, kind, words in (("fail_remark", str, "a string"), ("fail_all", bool, "true or false")):
        if name in doc:
            if not isinstance(doc[name], kind):
                raise _BadRequest(400, f"{name} must be {words}")
            changes[name] = doc[name]
    for name, value in changes.items():
        setattr(broker.faults, name, value)


def _number(doc: dict[str, Any], name: str) -> float:
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _BadRequest(400, f"{name} must be a number >= 0")
    return float(value)


MAX_LIST = 100_000  # messages per page of /topics/{topic}/messages


def _query_int(request: Request, name: str, default: int, lo: int, hi: int | None = None) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdigit() or len(text) > 12 or int(text) < lo or (hi is not None and int(text) > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise _BadRequest(400, f"{name} must be an integer {bound}")
    return int(text)


# --- the edge: what app.api.guards and app.api.middleware check, for a browser on this machine -------
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _loopback(host: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ``::1`` as literals (app.localhost.is_loopback): a name may resolve
    anywhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(host: str) -> str:
    """``Host`` without its port, lower-case: ``[::1]:19880`` -> ``::1`` (as app.api.guards.host_name)."""
    try:
        return (urlsplit("//" + host.strip()).hostname or "").rstrip(".")
    except ValueError:  # an unclosed "[": no host of ours
        return ""


def _host_ok(host: bytes | None, scope: Scope) -> bool:
    """No Host (HTTP/1.0): no browser. Else loopback, or the address the request came in on (a container's
    --host): a DNS-rebinding page names its own domain, never an address."""
    if host is None:
        return True
    name = _host_name(host.decode("latin-1"))
    server = scope.get("server")
    return _loopback(name) or (server is not None and name == str(server[0]).lower().strip("[]"))


def _origin_ok(origin: bytes | None) -> bool:
    """No Origin: not a cross-origin browser request. ``null`` (sandboxed pages, files) is refused."""
    if origin is None:
        return True
    scheme, sep, rest = origin.decode("latin-1").strip().lower().partition("://")
    return bool(sep) and scheme in ("http", "https") and _loopback(_host_name(rest.rstrip("/")))


def _is_json(content_type: bytes | None) -> bool:
    """``application/json`` or ``application/<anything>+json``, with any parameters."""
    if content_type is None:
        return False
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def refusal(scope: Scope) -> tuple[int, str] | None:
    """Why a request is refused before routing (status, message), or None: in this order, so that a page
    on another origin learns nothing."""
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name, value)  # of repeated ones, the first
    if not _host_ok(headers.get(b"host"), scope):
        return 403, "this Host is not served here: use 127.0.0.1, localhost or [::1]"
    if not _origin_ok(headers.get(b"origin")):
        return 403, "cross-origin requests are refused"
    content_type = headers.get(b"content-type")
    has_body = (
        headers.get(b"content-length", b"0").strip() not in (b"0", b"") or b"transfer-encoding" in headers
    )
    if (
        scope["method"] in _BODY_METHODS
        and (has_body or content_type is not None)
        and not _is_json(content_type)
    ):
        return 415, "the body must be 'Content-Type: application/json'"
    return None


class _Edge:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = refusal(scope) if scope["type"] == "http" else None
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, message = refused
        await JSONResponse({"error": message}, status_code=status)(scope, receive, send)


def build_app(brokers: Mapping[str, DevBroker]) -> Starlette:
    def find(request: Request) -> DevBroker:
        name = request.path_params["name"]
        if name not in brokers:
            raise _BadRequest(404, f"no broker named {name!r}; there are {sorted(brokers)}")
        return brokers[name]

    async def list_brokers(request: Request) -> JSONResponse:
        return JSONResponse([describe(b) for b in brokers.values()])

    async def get_broker(request: Request) -> JSONResponse:
        return JSONResponse(describe(find(request)))

    async def set_faults(request: Request) -> JSONResponse:
        broker = find(request)
        try:
            doc = await request.json()
        except ValueError:
            raise _BadRequest(400, "the body is not JSON") from None
        apply_faults(broker, doc)
        return JSONResponse(describe(broker))

    async def clear_faults(request: Request) -> JSONResponse:
        broker = find(request)
        broker.faults.clear()
        return JSONResponse(describe(broker))

    async def act(request: Request) -> JSONResponse:
        broker, action = find(request), request.path_params["action"]
        if action == "stop":
            await broker.stop()
        elif action == "start":
            await broker.start()
        elif action == "drop":
            broker.drop_connections()
        else:
            raise _BadRequest(404, f"unknown action {action!r}; use stop, start or drop")
        return JSONResponse(describe(broker))

    async def topic_messages(request: Request) -> JSONResponse:
        """What the brokers store for a topic, in broker then queue order: a test's ledger of the ids
        it was answered 2xx checks against this (duplicates show as repeated uniqKeys)."""
        topic = request.path_params["topic"]
        offset = _query_int(request, "offset", 0, 0)
        limit = _query_int(request, "limit", MAX_LIST, 1, MAX_LIST)
        stored = [(name, m) for name, b in brokers.items() for m in b.messages(topic)]
        page = stored[offset : offset + limit]
        return JSONResponse(
            {
                "topic": topic,
                "total": len(stored),
                "offset": offset,
                "messages": [
                    {
                        "uniqKey": m.uniq_key,
                        "broker": name,
                        "queueId": m.queue_id,
                        "queueOffset": m.queue_offset,
                        "bodySize": len(m.body),
                    }
                    for name, m in page
                ],
            }
        )

    async def expire(request: Request) -> JSONResponse:
        """Retention for tests: drop a queue's offsets below ``before`` (a reader then sees them gone)."""
        broker = find(request)
        queue = request.path_params["queue"]
        if not queue.isdigit() or len(queue) > 6:
            raise _BadRequest(400, "the queue id must be an integer")
        before = _query_int(request, "before", 0, 0, 1 << 62)
        low = broker.store.expire(request.path_params["topic"], int(queue), before)
        return JSONResponse({"minOffset": low})

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, _BadRequest)
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    return Starlette(
        routes=[
            Route("/brokers", list_brokers, methods=["GET"]),
            Route("/brokers/{name}", get_broker, methods=["GET"]),
            Route("/brokers/{name}/faults", set_faults, methods=["POST"]),
            Route("/brokers/{name}/faults", clear_faults, methods=["DELETE"]),
            Route("/brokers/{name}/{action}", act, methods=["POST"]),
            Route("/topics/{topic}/messages", topic_messages, methods=["GET"]),
            Route("/brokers/{name}/topics/{topic}/queues/{queue}/expire", expire, methods=["POST"]),
        ],
        exception_handlers={_BadRequest: bad_request},
        middleware=[Middleware(_Edge)],
    )


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the process that embeds devbroker owns SIGINT and SIGTERM, not uvicorn


class AdminServer:
    """Serves build_app() with uvicorn on a socket bound (and listening) before start() returns."""

    def __init__(self, brokers: Mapping[str, DevBroker], *, port: int = 0, host: str = LOOPBACK) -> None:
        self._app = build_app(brokers)
        self.host, self.port = host, port
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)  # connections queue here until uvicorn accepts them
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app, lifespan="off", ws="none", log_config=None, log_level="warning", access_log=False
        )  # log_config None: leave the embedding process's logging setup alone
        self._server = _Server(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))

    async def stop(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.should_exit = True
        await task

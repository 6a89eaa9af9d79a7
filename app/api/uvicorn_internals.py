"""The private parts of uvicorn that app.api.http_protocol builds on, named in one place.

The hot routes are served by a protocol of our own (app.api.hot_http), which hands every other request's
connection to uvicorn's httptools protocol through what any ``uvicorn.Config(http=...)`` class is given.
What remains private is under the rest of the routes: app.api.http_protocol's subclass adds a read
timeout and a lingering close to uvicorn's protocol, overriding its parser callbacks and reading its
request cycle's ``more_body``; and both protocols register with the server state's connection and task
sets, which uvicorn's graceful stop reads. uvicorn is pinned exactly (pyproject.toml and tools/lock/),
and ``missing()`` lists whatever the installed uvicorn lacks of it: tests/app/api/test_uvicorn_internals.py
fails naming the part, and the HTTP server refuses to start with one line naming it, instead of failing
on some later request.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from importlib.metadata import version
from typing import Any

PINNED_VERSION = "0.54.0"  # pyproject.toml pins uvicorn[standard] to this; a test holds the two together
MODULE = "uvicorn.protocols.http.httptools_impl"
MODULE_NAMES = ("HttpToolsProtocol", "RequestResponseCycle")
# Overridden or called by app.api.http_protocol's subclass, with the signatures it assumes.
PROTOCOL_METHODS = (
    "connection_made",
    "data_received",
    "connection_lost",
    "on_message_begin",
    "on_header",
    "on_message_complete",
    "on_headers_complete",
    "on_response_complete",
    "shutdown",
)
# Per-connection state read by that subclass, present once a request's head is parsed; ``url`` (the target
# as read), ``headers`` (the list that is the scope's: an absolute-form target's host is written into its
# Host fields) and ``expect_100_continue`` (ignored for HTTP/1.0) are the head's.
PROTOCOL_ATTRIBUTES = (
    "cycle", "flow", "loop", "pipeline", "server_state", "transport", "url", "headers", "expect_100_continue",
)  # fmt: skip
HEADERS_ENTRY = "HttpToolsProtocol().headers (the list that is the request's scope['headers'])"
# A request asking to upgrade: llhttp raises HttpParserUpgrade after its head; uvicorn's data_received
# catches it and returns (the sidecar never upgrades: that subclass reads nothing after such a head).
UPGRADE_ENTRY = "HttpToolsProtocol.data_received (returning at an upgrade's HttpParserUpgrade)"
# Read, and for a request whose body the parser failed on, set (``disconnected``, ``message_event``: what
# uvicorn's connection_lost does to tell the app the client is gone); ``keep_alive`` set false when the
# client half-closed, as uvicorn's shutdown does: the answer says ``connection: close`` and closes.
# ``waiting_for_100_continue`` is set false for an HTTP/1.0 request: no 1xx is sent to it.
CYCLE_ATTRIBUTES = (
    "more_body", "response_started", "response_complete", "disconnected", "message_event", "keep_alive",
    "waiting_for_100_continue",
)  # fmt: skip
# A request read while an earlier one's answer is owed waits in ``pipeline`` as the pair (its cycle, the
# application to run it) at index 0 (the newest): that subclass puts a refusal in place of the application
# of one whose body cannot be parsed.
PIPELINE_ENTRY = "HttpToolsProtocol().pipeline[0] (the pair (cycle, app) of the request queued last)"
# What app.api.hot_http registers with and writes: uvicorn's graceful stop reads the two sets.
SERVER_STATE_ATTRIBUTES = ("connections", "tasks", "default_headers")


class _Transport(asyncio.Transport):
    """Enough of a transport for the protocol to take a connection and parse one request's head."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 9880), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def write(self, data: Any) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


_QUIET = logging.getLogger(f"{__name__}.probe")
_QUIET.disabled = True


async def _no_app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI application that is never called: the probe stops before the application would run."""


def missing() -> list[str]:
    """The private parts named above that the installed uvicorn lacks, as dotted names; empty when all
    are there."""
    module = importlib.import_module(MODULE)
    gone = [f"{MODULE}.{name}" for name in MODULE_NAMES if not hasattr(module, name)]
    if gone:
        return gone
    protocol_class = module.HttpToolsProtocol
    gone = [
        f"HttpToolsProtocol.{name}"
        for name in PROTOCOL_METHODS
        if not callable(getattr(protocol_class, name, None))
    ]
    return gone or _missing_state(module)


def _missing_state(module: Any) -> list[str]:
    """Drive a protocol through one request's head (no application runs) and look at its state."""
    import uvicorn
    from uvicorn.server import ServerState

    class Probe(module.HttpToolsProtocol):  # type: ignore[misc]
        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            pass  # the head is parsed; no application needed

    state = ServerState()
    gone = [f"ServerState().{name}" for name in SERVER_STATE_ATTRIBUTES if not hasattr(state, name)]
    if gone:
        return gone  # the probe below needs them
    loop = asyncio.new_event_loop()
    try:
        config = uvicorn.Config(app=_no_app, lifespan="off", log_config=None)
        config.load()
        protocol = Probe(config=config, server_state=state, app_state={}, _loop=loop)
        protocol.connection_made(_Transport())
        # A whole request, then the head of one pipelined behind it (the first is never answered here).
        head = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n"
        protocol.data_received(head + b"{}" + head)
        gone = [f"HttpToolsProtocol().{name}" for name in PROTOCOL_ATTRIBUTES if not hasattr(protocol, name)]
        cycle = getattr(protocol, "cycle", None)
        if cycle is None or not isinstance(cycle, module.RequestResponseCycle):
            gone.append("HttpToolsProtocol().cycle (a RequestResponseCycle once the head is parsed)")
        else:
            gone += [
                f"RequestResponseCycle().{name}" for name in CYCLE_ATTRIBUTES if not hasattr(cycle, name)
            ]
            queued = getattr(protocol, "pipeline", None)
            entry = queued[0] if queued else None
            if not (isinstance(entry, tuple) and len(entry) == 2 and entry[0] is cycle):
                gone.append(PIPELINE_ENTRY)
            if getattr(protocol, "headers", None) is not getattr(cycle, "scope", {}).get("headers"):
                gone.append(HEADERS_ENTRY)
        upgrading = Probe(config=config, server_state=state, app_state={}, _loop=loop)
        upgrading.logger = _QUIET  # it warns of the upgrade it does not do
        upgrading.connection_made(_Transport())
        try:
            upgrading.data_received(
                b"GET / HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n"
            )
        except Exception:
            gone.append(UPGRADE_ENTRY)
        return gone
    finally:
        loop.close()


def problem() -> str | None:
    """One line for an operator when the installed uvicorn is not the one the hot path was built on."""
    gone = missing()
    if not gone:
        return None
    return (
        f"uvicorn {version('uvicorn')} lacks {', '.join(gone)}, which the HTTP hot path relies on "
        f"(built for uvicorn {PINNED_VERSION}): install the locked versions (tools/lock/runtime.txt)"
    )

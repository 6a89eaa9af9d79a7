"""uvicorn's private parts under the HTTP routes that are not hot (issue 26): pinned exactly, and a
change to any of them is caught by name, here and at the HTTP server's start."""

from __future__ import annotations

import tomllib
from collections import deque
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from uvicorn.protocols.http import httptools_impl

from rocksidecar.app.api import uvicorn_internals
from rocksidecar.app.api.servers import HttpServer, ListenError

REPO = Path(__file__).resolve().parents[3]


def test_the_installed_uvicorn_is_the_pinned_one() -> None:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"uvicorn[standard]=={uvicorn_internals.PINNED_VERSION}" in dependencies
    assert version("uvicorn") == uvicorn_internals.PINNED_VERSION


def test_nothing_the_hot_path_relies_on_is_missing() -> None:
    assert uvicorn_internals.missing() == []
    assert uvicorn_internals.problem() is None


def test_a_name_gone_from_the_module_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(httptools_impl, "RequestResponseCycle")
    assert uvicorn_internals.missing() == [f"{uvicorn_internals.MODULE}.RequestResponseCycle"]


def test_a_renamed_method_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(httptools_impl.HttpToolsProtocol, "on_message_begin")
    assert uvicorn_internals.missing() == ["HttpToolsProtocol.on_message_begin"]


def test_a_renamed_connection_attribute_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a release renamed the protocol's ``loop``: only a live protocol shows it."""
    init = httptools_impl.HttpToolsProtocol.__init__

    def renamed(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.event_loop = self.__dict__.pop("loop")

    monkeypatch.setattr(httptools_impl.HttpToolsProtocol, "__init__", renamed)
    assert uvicorn_internals.missing() == ["HttpToolsProtocol().loop"]


def test_a_cycle_attribute_gone_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    init = httptools_impl.RequestResponseCycle.__init__

    def renamed(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        del self.more_body

    monkeypatch.setattr(httptools_impl.RequestResponseCycle, "__init__", renamed)
    assert uvicorn_internals.missing() == ["RequestResponseCycle().more_body"]


def test_a_pipeline_entry_of_another_shape_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """app.api.http_protocol puts a refusal in place of a queued request's application: the entry must
    still be the pair (cycle, app), the newest first."""
    init = httptools_impl.HttpToolsProtocol.__init__

    class Reshaped(deque[Any]):
        def appendleft(self, item: Any) -> None:
            super().appendleft({"cycle": item[0], "app": item[1]})

    def reshaped(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.pipeline = Reshaped()

    monkeypatch.setattr(httptools_impl.HttpToolsProtocol, "__init__", reshaped)
    assert uvicorn_internals.missing() == [uvicorn_internals.PIPELINE_ENTRY]


async def test_the_http_server_refuses_to_start_naming_the_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(httptools_impl.HttpToolsProtocol, "on_message_complete")
    server = HttpServer(app=None, addr="127.0.0.1:0", grace_s=1.0)
    with pytest.raises(ListenError, match=r"lacks HttpToolsProtocol\.on_message_complete.*tools/lock"):
        await server.start()


def test_a_server_state_set_gone_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our hot protocol registers in ``connections`` so that uvicorn's graceful stop waits for it."""
    from uvicorn.server import ServerState

    init = ServerState.__init__

    def renamed(self: Any) -> None:
        init(self)
        del self.connections

    monkeypatch.setattr(ServerState, "__init__", renamed)
    assert uvicorn_internals.missing() == ["ServerState().connections"]


def test_headers_that_are_no_longer_the_scope_s_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """app.api.http_protocol writes an absolute-form target's host into the Host fields of the protocol's
    ``headers``: that must be the list the scope holds."""
    on_headers_complete = httptools_impl.HttpToolsProtocol.on_headers_complete

    def copied(self: Any) -> None:
        on_headers_complete(self)
        if self.cycle is not None:
            self.cycle.scope["headers"] = list(self.headers)

    monkeypatch.setattr(httptools_impl.HttpToolsProtocol, "on_headers_complete", copied)
    assert uvicorn_internals.missing() == [uvicorn_internals.HEADERS_ENTRY]


def test_a_cycle_without_its_100_continue_flag_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    init = httptools_impl.RequestResponseCycle.__init__

    def renamed(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        del self.waiting_for_100_continue

    monkeypatch.setattr(httptools_impl.RequestResponseCycle, "__init__", renamed)
    assert uvicorn_internals.missing() == ["RequestResponseCycle().waiting_for_100_continue"]


def test_an_upgrade_the_protocol_no_longer_catches_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """app.api.http_protocol relies on uvicorn's data_received returning at llhttp's HttpParserUpgrade
    (it then reads nothing more): a release letting it out would end the connection's reading in error."""

    def raising(self: Any, data: bytes) -> None:
        self.parser.feed_data(data)

    monkeypatch.setattr(httptools_impl.HttpToolsProtocol, "data_received", raising)
    assert uvicorn_internals.missing() == [uvicorn_internals.UPGRADE_ENTRY]

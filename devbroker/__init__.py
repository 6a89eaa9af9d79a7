"""devbroker: a small RocketMQ-protocol-compatible name server and brokers, for local runs and tests.

The names below load on first use, so declaring the ``rocksidecar devbroker`` command (devbroker.cli)
does not import the brokers."""

from __future__ import annotations

import importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from .broker import DevBroker
    from .cluster import DevCluster
    from .faults import Faults
    from .namesrv import NameServer
    from .topics import TopicConfig

__all__ = ["DevBroker", "DevCluster", "Faults", "NameServer", "TopicConfig"]
_HOME = {"DevBroker": "broker", "DevCluster": "cluster", "Faults": "faults", "NameServer": "namesrv"}
_HOME["TopicConfig"] = "topics"


def __getattr__(name: str) -> object:
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

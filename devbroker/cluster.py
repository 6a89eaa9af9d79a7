"""DevCluster: a name server and N brokers ("broker-a", "broker-b", ...) on loopback in this event loop,
plus the optional admin HTTP endpoint; what tests, the CLI and the sidecar's --devbroker mode start.

    async with DevCluster(brokers=2, queues=4) as cluster:
        cluster.namesrv_addr                          # "127.0.0.1:<port>"
        cluster.brokers["broker-a"].faults.latency_s = 0.5
        await cluster.brokers["broker-b"].stop()      # gone from routes until start()

A sent-back message, or one sent with a DELAY level, is delivered at once unless ``delay_scale`` says
otherwise (BrokerOptions).
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Unpack

from rocksidecar.rmq.lifecycle import Lifecycle

from .broker import BrokerOptions, DevBroker
from .http_admin import AdminServer
from .listener import BROKER_PORT_STEP, LOOPBACK, MAX_BROKERS
from .namesrv import NameServer


def broker_name(index: int) -> str:
    return f"broker-{string.ascii_lowercase[index]}"


class DevCluster(Lifecycle):
    def __init__(
        self,
        brokers: int = 2,
        queues: int = 4,
        data_dir: Path | str | None = None,
        *,
        namesrv_port: int = 0,
        broker_base_port: int = 0,
        admin_port: int | None = None,
        **options: Unpack[BrokerOptions],
    ) -> None:
        """Ports 0 are ephemeral; ``broker_base_port`` 0 gives every broker an ephemeral port and
        ``admin_port`` None runs no admin endpoint. Everything listens on ``host`` (an IP address), which
        is also the address the routes name: another host (a container) can reach it when it is not
        loopback. ``delay_scale`` (BrokerOptions) multiplies the delay levels of sent-back and DELAY
        messages; its default here is 0, which delivers such a message at once (tests depend on that);
        ``rocksidecar devbroker`` passes 1.0, RocketMQ's real table.

        Raises:
            ValueError: a broker or queue count out of range.
        """
        if not 1 <= brokers <= MAX_BROKERS:
            raise ValueError(f"brokers must be between 1 and {MAX_BROKERS}, not {brokers}")
        if queues < 1:
            raise ValueError(f"queues must be at least 1, not {queues}")
        root = Path(data_dir) if data_dir is not None else None
        host = options.get("host", LOOPBACK)
        self.namesrv = NameServer(port=namesrv_port, host=host, tls=options.get("tls"))
        self.brokers: dict[str, DevBroker] = {}
        for i in range(brokers):
            name = broker_name(i)
            self.brokers[name] = DevBroker(
                name,
                self.namesrv,
                data_dir=root,
                port=broker_base_port + BROKER_PORT_STEP * i if broker_base_port else 0,
                queues=queues,
                **options,
            )
        self.admin = AdminServer(self.brokers, port=admin_port, host=host) if admin_port is not None else None

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    @property
    def admin_url(self) -> str | None:
        return self.admin.url if self.admin is not None else None

    async def start(self) -> None:
        """Start everything; on a failure (e.g. a port in use) stop what started and re-raise."""
        try:
            for broker in self.brokers.values():
                await broker.start()
            if self.admin is not None:
                await self.admin.start()
            # Last: once the name server accepts connections, every broker is in its routes.
            await self.namesrv.start()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        if self.admin is not None:
            await self.admin.stop()
        for broker in self.brokers.values():
            await broker.close()
        await self.namesrv.stop()

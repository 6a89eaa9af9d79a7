"""CPU per hot request spent by the HTTP connection protocol alone, in one process (issues 26 and 32).

End-to-end CPU per message on the shared machine moves by 2-3x with the rate each run happens to get, so
the protocol's own share (parse the head, admit through the edge's guards, start the answer, write it)
is measured here without the network, the broker or the send path: the server's real protocol class
(what ``HttpServer`` gives uvicorn) is fed ``POST /v1/messages`` requests from memory on a loopback-less
transport, answered by a route that returns at once, ``--requests`` per round; process CPU time (user +
system) per request, the median of ``--rounds``. Run it in two checkouts to compare them (each tree's
own .venv, the file copied into the older one if it lacks it):

    .venv/bin/python -m bench.http_protocol_cpu
    /tmp/base/.venv/bin/python -m bench.http_protocol_cpu     # with bench/http_protocol_cpu.py copied in
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
from typing import Any

from uvicorn.server import ServerState

from rocksidecar.app.api.guards import Guards
from rocksidecar.app.api.middleware import EdgeMiddleware
from rocksidecar.app.api.servers import HttpServer
from rocksidecar.app.metrics import Metrics

BODY = b'{"topic": "Bench", "body": "' + b"x" * 256 + b'"}'
REQUEST = (
    b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1:9880\r\ncontent-type: application/json\r\n"
    b"user-agent: bench\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY)
)
ANSWER = b'{"id":"0A0B0C0D0E0F","status":"SENT"}'


class _Transport(asyncio.Transport):
    """Takes the protocol's writes; counts answers so the driver knows when one is out."""

    def __init__(self) -> None:
        super().__init__()
        self.answers = 0
        self.written = asyncio.Event()
        self._protocol: Any = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 9880), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.answers += bytes(data).count(b"HTTP/1.1 200")
        self.written.set()

    def is_closing(self) -> bool:
        return False

    def set_protocol(self, protocol: Any) -> None:
        self._protocol = protocol

    def get_protocol(self) -> Any:
        return self._protocol

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        pass


async def _route(scope: Any, headers: Any, body: bytes) -> tuple[int, bytes, str, dict[str, str]]:
    return 200, ANSWER, "application/json", {}


class _App:
    """What HttpServer looks for: an ASGI app whose ``edge`` is the EdgeMiddleware with the hot routes."""

    def __init__(self) -> None:
        self.edge = EdgeMiddleware(
            self,  # type: ignore[arg-type]  # never called: every request here is hot
            metrics=Metrics(),
            guards=Guards.of(""),
            limits={"/v1/messages": 1 << 20},
            default_limit=1 << 20,
            routes=[],
            fast={"/v1/messages": _route},
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a hot request took the ASGI way")


async def _protocol() -> tuple[Any, _Transport]:
    """The protocol class the server hands uvicorn, one connection of it on a memory transport."""
    server = HttpServer(_App(), "127.0.0.1:0", grace_s=1.0)
    await server.start()
    assert server._server is not None
    config = server._server.config
    await server.stop()
    protocol = config.http_protocol_class(
        config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = _Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def _round(requests: int) -> float:
    protocol, transport = await _protocol()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(requests):
        transport.written.clear()
        protocol.data_received(REQUEST)
        await transport.written.wait()
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert transport.answers == requests, (transport.answers, requests)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import uvloop

    per = [uvloop.run(_round(args.requests)) for _ in range(args.rounds)]
    print(
        f"HTTP protocol CPU per hot request: median {statistics.median(per):.2f} us, "
        f"min {min(per):.2f} us ({', '.join(f'{p:.2f}' for p in per)}); {args.requests} requests a round"
    )


if __name__ == "__main__":
    main()

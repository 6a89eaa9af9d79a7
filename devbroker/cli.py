"""``rocksidecar devbroker``: run a name server, N brokers and the admin endpoint on loopback (or on
--host) until SIGINT or SIGTERM, then stop cleanly and exit 0."""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from .listener import BROKER_PORT_STEP, LOOPBACK, MAX_BROKERS, server_context

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


HELP = "run a RocketMQ-compatible name server and brokers on loopback (for local runs and tests)"
DESCRIPTION = (
    "Run a RocketMQ-protocol-compatible name server, N brokers and an admin HTTP endpoint (fault "
    "injection) on loopback until SIGINT or SIGTERM. For local runs and tests, not production."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--brokers", type=int, default=2, metavar="N", help="number of brokers (default 2)")
    p.add_argument("--namesrv-port", type=int, default=19876, metavar="PORT", help="default 19876; 0 = any")
    p.add_argument(
        "--broker-base-port",
        type=int,
        default=20911,
        metavar="PORT",
        help=f"broker i listens on PORT + {BROKER_PORT_STEP}*i (default 20911); 0 = any free ports",
    )
    p.add_argument("--queues", type=int, default=4, help="queues of auto-created topics (default 4)")
    p.add_argument("--data-dir", type=Path, default=None, help="keep topics, messages and offsets here")
    p.add_argument("--admin-port", type=int, default=19880, metavar="PORT", help="admin HTTP (default 19880)")
    p.add_argument(
        "--host",
        default=LOOPBACK,
        help="address (or a name resolved once) to listen on and to name in routes, e.g. a container's "
        "own name so other containers can reach it (default 127.0.0.1)",
    )
    p.add_argument("--no-auto-create", action="store_true", help="no TBW102: sends to unknown topics fail")
    p.add_argument(
        "--enable-property-filter", action="store_true", help="SQL92 subscriptions (enablePropertyFilter)"
    )
    p.add_argument(
        "--transaction-check-interval",
        type=float,
        default=60.0,
        metavar="S",
        help="ask producers about undecided half messages every S seconds (transactionCheckInterval, "
        "default 60)",
    )
    p.add_argument(
        "--delay-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply the delay levels of sent-back and DELAY messages "
        "(RocketMQ's 1s 5s 10s 30s 1m ... 2h) by X: 1 (default) is RocketMQ's timing, 0 delivers at once, "
        "0.01 a hundredth of each delay",
    )
    p.add_argument(
        "--max-log-mb", type=int, default=None, metavar="MB", help="drop the oldest messages beyond this"
    )
    p.add_argument(
        "--tls-cert",
        type=Path,
        default=None,
        metavar="FILE",
        help="serve TLS only, with this certificate (PEM, the chain after it), as a RocketMQ started with "
        "tls.server.mode=enforcing; clients need ROCKSIDECAR_TLS=true",
    )
    p.add_argument("--tls-key", type=Path, default=None, metavar="FILE", help="the key of --tls-cert (PEM)")
    p.add_argument(
        "--tls-client-ca",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --tls-cert: require a client certificate signed by these CAs (PEM; "
        "tls.server.need.client.auth=require)",
    )


def _check(args: argparse.Namespace) -> str | None:
    if not 1 <= args.brokers <= MAX_BROKERS:
        return f"--brokers must be between 1 and {MAX_BROKERS}"
    if args.queues < 1:
        return "--queues must be at least 1"
    if not 0.1 <= args.transaction_check_interval <= 86400:
        return "--transaction-check-interval must be between 0.1 and 86400 seconds"
    if not 0 <= args.delay_scale <= 1000:  # also refuses nan
        return "--delay-scale must be between 0 and 1000"
    last_port = args.broker_base_port + BROKER_PORT_STEP * (args.brokers - 1)
    ports = (args.namesrv_port, args.admin_port, args.broker_base_port, last_port)
    if any(not 0 <= p <= 65535 for p in ports):
        return "ports must be between 0 and 65535"
    if args.max_log_mb is not None and args.max_log_mb < 128:
        return "--max-log-mb must be at least 128 (two 64 MiB segments)"
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together"
    if args.tls_client_ca is not None and args.tls_cert is None:
        return "--tls-client-ca needs --tls-cert and --tls-key"
    if args.tls_cert is not None:
        try:
            args.tls = server_context(args.tls_cert, args.tls_key, args.tls_client_ca)
        except (OSError, ssl.SSLError) as exc:
            return f"--tls-cert/--tls-key/--tls-client-ca do not load: {exc}"
    else:
        args.tls = None
    try:
        # Routes carry an IPv4 address (the broker's store host is packed as 4 bytes): resolve names now.
        args.host = socket.gethostbyname(args.host)
    except OSError as exc:
        return f"--host {args.host!r} does not resolve to an IPv4 address: {exc}"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem is not None:
        print(f"rocksidecar devbroker: {problem}", file=sys.stderr)
        return 2
    try:
        _run_loop(_serve(args))
    except OSError as exc:
        print(f"rocksidecar devbroker: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop  # a faster loop when installed; benchmarks run devbroker as its own process

        factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


async def _serve(args: argparse.Namespace) -> None:
    from .cluster import DevCluster  # the brokers themselves: not needed to declare the command

    cluster = DevCluster(
        brokers=args.brokers,
        queues=args.queues,
        data_dir=args.data_dir,
        auto_create=not args.no_auto_create,
        namesrv_port=args.namesrv_port,
        broker_base_port=args.broker_base_port,
        admin_port=args.admin_port,
        host=args.host,
        max_log_bytes=args.max_log_mb * 1024 * 1024 if args.max_log_mb else None,
        enable_property_filter=args.enable_property_filter,
        transaction_check_interval_s=args.transaction_check_interval,
        delay_scale=args.delay_scale,
        tls=args.tls,
    )
    async with cluster:
        print(f"devbroker name server {cluster.namesrv_addr}", flush=True)
        for name, broker in cluster.brokers.items():
            print(f"devbroker {name} {broker.addr}", flush=True)
        print(f"devbroker admin {cluster.admin_url}", flush=True)
        if args.tls is not None:
            print("devbroker TLS only: clients need ROCKSIDECAR_TLS=true", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        try:
            print("devbroker ready", flush=True)
            # As in the sidecar: a busy devbroker allocates per request; collect less often, and never
            # walk what start-up created (it is the cheap side of every benchmark).
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 50, 100)
            await stop.wait()
        finally:
            for sig in _SIGNALS:
                loop.remove_signal_handler(sig)
    print("devbroker stopped", flush=True)

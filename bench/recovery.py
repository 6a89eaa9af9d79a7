"""Replay on recovery: how long after the brokers come back until every message spooled during the
outage is delivered (target: 100 000 messages within 10 s).

devbroker and the sidecar (`rocksidecar serve`) run in their own processes. The brokers are stopped, N
messages are spooled through the HTTP API (`ack=spool`, batches of 1000), the outage lasts long enough
for them to climb the ladder (rungs of 3, 5, 30 s ...), then the brokers start again and the clock runs
until `rocksidecar_retry_pending` is 0. Without replay on recovery they would wait for their rung.

    python -m bench.recovery [--messages 100000] [--outage-s 20]
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import Row, bench_parser, devbroker_process, environment, print_rows
from bench.sidecar_process import sidecar_process

TOPIC = "Recovery"
TARGET_S = 10.0
POLL_S = 0.02  # how often the metrics are read; the resolution of the measurement


def metric(client: httpx.Client, name: str) -> float:
    found = re.search(rf"^rocksidecar_{name} (\S+)$", client.get("/metrics").text, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no metric rocksidecar_{name}")
    return float(found.group(1))


def spool(client: httpx.Client, n: int, batch: int) -> None:
    body = "x" * 200
    for start in range(0, n, batch):
        size = min(batch, n - start)
        doc = {"messages": [{"topic": TOPIC, "body": body} for _ in range(size)]}
        answer = client.post("/v1/messages:batch", params={"ack": "spool"}, json=doc)
        answer.raise_for_status()
        if answer.json()["spooled"] != size:
            raise RuntimeError(f"not every message was spooled: {answer.text[:300]}")


def until(predicate: object, timeout_s: float) -> float:
    """Poll ``predicate()`` (another process's state: nothing to await) until true; seconds waited."""
    started = time.monotonic()
    while not predicate():  # type: ignore[operator]
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not done after {timeout_s} s")
        time.sleep(POLL_S)
    return time.monotonic() - started


def run(messages: int, outage_s: float, batch: int, verbose: bool = False) -> list[Row]:
    with (
        devbroker_process() as brokers,
        tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp,
        sidecar_process(brokers.namesrv, Path(tmp), LOG_LEVEL="info") as sidecar,
        httpx.Client(base_url=sidecar.url, timeout=120) as client,
    ):
        client.post("/v1/messages", json={"topic": TOPIC, "body": "warm-up"}).raise_for_status()
        for name in ("broker-a", "broker-b"):
            brokers.act(name, "stop")
        outage_started = time.monotonic()
        spool(client, messages, batch)
        spool_s = time.monotonic() - outage_started
        until(lambda: metric(client, "retry_pending") >= messages, 60)
        rest = outage_s - (time.monotonic() - outage_started)
        if rest > 0:
            time.sleep(rest)  # the outage itself: messages climb the ladder meanwhile
        if verbose:
            print("pending before the return:", metric(client, "retry_pending"))
        for name in ("broker-a", "broker-b"):
            brokers.act(name, "start")
        delivered_s = until(lambda: metric(client, "retry_pending") == 0, 300)
        if verbose:
            print((Path(tmp) / "sidecar.log").read_text()[-6000:])
        dead = metric(client, "dead_letters_stored")
        if dead:
            raise RuntimeError(f"{dead:.0f} messages were dead-lettered")
    return [
        Row(f"spool {messages:,} messages with the brokers down (ack=spool)", messages / spool_s, "msg/s"),
        Row(
            f"brokers back -> {messages:,} spooled messages delivered (vs the target)",
            delivered_s,
            "s",
            TARGET_S,
        ),
        Row("delivery rate after the return", messages / delivered_s, "msg/s"),
    ]


def main() -> None:
    parser = bench_parser(__doc__, messages=100_000, outage_s=20.0, batch=1000)
    parser.add_argument("--verbose", action="store_true", help="print the sidecar's log at the end")
    args = parser.parse_args()
    rows = run(args.messages, args.outage_s, args.batch, args.verbose)
    print_rows(f"Replay on recovery ({environment()})", rows)


if __name__ == "__main__":
    main()

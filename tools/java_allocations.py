"""Run rocketmq-client's own allocation strategies on rocksidecar's test inputs; print JSON vectors.

    python tools/java_allocations.py /tmp/rocketmq-dist > tests/rmq/consumer/allocation_vectors.json

Compiles tools/java/AllocationVectors.java against the distribution's lib/*.jar (javac and java on PATH)
and feeds it the cases below. tests/rmq/consumer/test_allocate.py compares the Python strategies
with the recorded output, and with a live run when the distribution is present.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

JAVA_SOURCE = Path(__file__).with_name("java") / "AllocationVectors.java"

Queue = tuple[str, str, int]


def _queues(topic: str, brokers: list[str], per_broker: int) -> list[Queue]:
    return [(topic, b, i) for b in brokers for i in range(per_broker)]


def _cids(n: int, rng: random.Random) -> list[str]:
    # ip@pid#nanoTime, the ids 4.9.4 clients build when the instance name is left at DEFAULT
    return [
        f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}@{rng.randint(100, 99999)}"
        f"#{rng.randint(10**11, 10**14)}"
        for _ in range(n)
    ]


def cases() -> list[dict[str, Any]]:
    rng = random.Random(20261123)
    out: list[dict[str, Any]] = []

    def add(name: str, strategy: str, cids: list[str], queues: list[Queue], option: str = "") -> None:
        shuffled = list(queues)
        rng.shuffle(shuffled)  # the strategies see them sorted, as RebalanceImpl sorts them
        out.append({"name": name, "strategy": strategy, "cids": cids, "queues": shuffled, "option": option})

    # Seed 003's example: 4 clients, 24 queues, then the second client (in sorted order) leaves.
    seed_cids = ["192.168.0.1@1001#1", "192.168.0.2@1002#2", "192.168.0.3@1003#3", "192.168.0.4@1004#4"]
    seed_queues = _queues("TopicTest", ["broker-a"], 24)
    for strategy, option in (("AVG", ""), ("AVG_BY_CIRCLE", ""), ("CONSISTENT_HASH", "10")):
        add(f"seed003-before-{strategy}", strategy, seed_cids, seed_queues, option)
        add(f"seed003-after-{strategy}", strategy, seed_cids[:1] + seed_cids[2:], seed_queues, option)

    two_brokers = _queues("T", ["broker-b", "broker-a"], 4)
    for strategy in ("AVG", "AVG_BY_CIRCLE"):
        for n in (1, 3, 5, 8, 11):
            add(f"{strategy}-{n}-clients-8-queues", strategy, _cids(n, rng), two_brokers)
    for vnodes in ("0", "1", "3", "10", "50"):
        add(f"hash-v{vnodes}", "CONSISTENT_HASH", _cids(5, rng), _queues("T", ["broker-a", "b2"], 8), vnodes)
    for i in range(12):
        n, brokers, per = rng.randint(1, 9), rng.randint(1, 3), rng.randint(1, 16)
        queues = _queues(f"Topic{i}", [f"broker-{chr(97 + b)}" for b in range(brokers)], per)
        for strategy in ("AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"):
            add(
                f"random{i}-{strategy}",
                strategy,
                _cids(n, rng),
                queues,
                "10" if strategy == "CONSISTENT_HASH" else "",
            )
    # Java compares strings by UTF-16 code units: U+FFFD sorts after U+1F600 (a surrogate pair).
    add(
        "unicode-sort",
        "AVG",
        ["c-\U0001f600", "c-\ufffd", "c-z", "C-a"],
        _queues("T", ["b\u00e9", "b\U0001f600", "bz"], 2),
    )
    add(
        "unicode-hash",
        "CONSISTENT_HASH",
        ["c-\U0001f600", "c-\u00e9", "c-z"],
        _queues("T\u00e9", ["b"], 6),
        "10",
    )
    add("config", "CONFIG", _cids(3, rng), two_brokers, "T/broker-a/3;T/broker-b/0")
    rooms = _queues("T", ["idc1@broker-a", "idc2@broker-b", "broker-c", "idc3@x@y"], 5)
    add("machine-room", "MACHINE_ROOM", _cids(3, rng), rooms, "idc1,idc2")
    add("machine-room-one", "MACHINE_ROOM", _cids(1, rng), rooms, "idc2")
    nearby_queues = _queues("T", ["IDC1-broker-a", "IDC2-broker-b", "IDC3-broker-c"], 7)
    nearby_cids = ["IDC1-" + c for c in _cids(3, rng)] + ["IDC2-" + c for c in _cids(2, rng)]
    add("nearby-avg", "NEARBY_AVG", nearby_cids, nearby_queues)
    add("nearby-circle", "NEARBY_CIRCLE", nearby_cids, nearby_queues)
    add("nearby-one-room", "NEARBY_AVG", ["IDC2-" + c for c in _cids(2, rng)], nearby_queues)
    for env in ("1", "3"):
        add(f"environment-{env}", "ENV", _cids(3, rng), _queues("T", ["broker-a"], 4), env)
    return out


def run_java(dist: Path, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    jars = [str(p) for p in sorted((dist / "lib").glob("*.jar")) if p.stat().st_size > 0]
    classpath = ":".join(jars)
    lines = []
    for c in items:
        queues = ";".join(f"{t}/{b}/{q}" for t, b, q in c["queues"])
        lines.append("\t".join([c["name"], c["strategy"], ",".join(c["cids"]), queues, c["option"]]))
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(
            ["javac", "-encoding", "UTF-8", "-cp", classpath, "-d", classes, str(JAVA_SOURCE)], check=True
        )
        done = subprocess.run(
            # MD5Hash hashes key.getBytes() in the platform charset: pin it to UTF-8, the usual one.
            ["java", "-Dfile.encoding=UTF-8", "-cp", f"{classes}:{classpath}", "AllocationVectors"],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            encoding="utf-8",
            check=True,
        )
    results = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    by_name = {r["name"]: r["allocations"] for r in results}
    return [{**c, "java": by_name[c["name"]]} for c in items]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: java_allocations.py ROCKETMQ_DIST", file=sys.stderr)
        return 2
    vectors = run_java(Path(argv[1]), cases())
    # One case a line: a diff of a re-run shows which case changed.
    sys.stdout.write('{"produced_by": "tools/java_allocations.py on rocketmq-client-4.9.4", "cases": [\n')
    sys.stdout.write(",\n".join(json.dumps(v, ensure_ascii=False) for v in vectors))
    sys.stdout.write("\n]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

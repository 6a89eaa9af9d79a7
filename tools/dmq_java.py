"""Compile and run tools/java/DmqLoad.java (the RocketMQ 4.9.4 Java client as a Rock-DMQ producer and
consumer) against a RocketMQ distribution, as tools/java_allocations.py does.

    python tools/dmq_java.py /tmp/rocketmq-dist consume 127.0.0.1:9876 TOPIC GROUP 100 60

Used by tests/realbroker/test_dmq_java.py and bench/dmq.py; javac and java must be on PATH.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

JAVA_SOURCE = Path(__file__).with_name("java") / "DmqLoad.java"
SYSTEM = Path("/usr/share/java")


def classpath(dist: Path) -> str:
    """The distribution's jars plus Debian's netty modules, bcprov and zstd-jni, as real-broker.sh builds
    it (the distribution's netty jar may be an empty placeholder here)."""
    own = [str(j) for j in sorted((dist / "lib").glob("*.jar")) if j.stat().st_size > 0]
    netty = [
        str(j)
        for j in sorted(SYSTEM.glob("netty-*[0-9].Final.jar"))
        if not any(skip in j.name for skip in ("macos", "epoll", "kqueue"))
    ]
    extra = [str(SYSTEM / j) for j in ("bcprov.jar", "zstd-jni.jar") if (SYSTEM / j).exists()]
    return ":".join([str(dist / "conf"), *own, *netty, *extra])


@cache
def compiled(dist: Path) -> str:
    """The classes directory (compiled once per process)."""
    classes = tempfile.mkdtemp(prefix="dmqload-")
    subprocess.run(
        ["javac", "-encoding", "UTF-8", "-cp", classpath(dist), "-d", classes, str(JAVA_SOURCE)], check=True
    )
    return classes


def command(dist: Path, *args: str) -> list[str]:
    """The java command line running DmqLoad with ``args``."""
    home = tempfile.mkdtemp(prefix="dmqload-home-")  # the client's ~/logs and offsets, not the user's
    return ["java", "-Xms256m", "-Xmx512m", f"-Duser.home={home}", "-Drocketmq.client.logUseSlf4j=false",
            "-cp", f"{compiled(dist)}:{classpath(dist)}", "DmqLoad", *args]  # fmt: skip


if __name__ == "__main__":
    sys.exit(subprocess.run(command(Path(sys.argv[1]), *sys.argv[2:]), check=False).returncode)

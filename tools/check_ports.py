"""`make run`'s first check: can every port it needs be listened on? Standard library only.

    python tools/check_ports.py "9880=the sidecar's HTTP API" "9881=the sidecar's gRPC API" ...

Exits 0 when each can be bound on 127.0.0.1; else prints one line naming the first port in use, what the
demo needs it for and what holds it (when /proc says), and exits 1. Exits 2 on a malformed argument.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

HOST = "127.0.0.1"
MAX_PORTS = 64  # the demo needs 7; anything near this is a mistake in the caller
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def parse(args: Sequence[str]) -> list[tuple[int, str]]:
    """``PORT=WHAT`` arguments as (port, what). Raises ValueError naming the bad one."""
    if not 1 <= len(args) <= MAX_PORTS:
        raise ValueError(f"give 1 to {MAX_PORTS} PORT=WHAT arguments, not {len(args)}")
    out = []
    for arg in args:
        port, sep, what = arg.partition("=")
        if not sep or not port.isdigit() or not 1 <= int(port) <= 65535 or not what:
            raise ValueError(f"expected PORT=WHAT with PORT 1-65535, got {arg!r}")
        out.append((int(port), what))
    return out


def in_use(port: int) -> bool:
    """Whether a server could not listen on ``port`` now. SO_REUSEADDR as servers set it, so a
    connection of an earlier run lingering in TIME_WAIT does not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def tcp_sockets() -> Iterator[tuple[str, int, str]]:
    """(inode, local port, state) of every TCP socket of the host, from /proc/net/tcp and tcp6 (none
    where /proc does not show them). The one reader of these tables: bench.http_syscalls uses it too."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9:
                yield fields[9], int(fields[1].rsplit(":", 1)[1], 16), fields[3]


def _listening_inodes(port: int) -> set[str]:
    return {inode for inode, local, state in tcp_sockets() if state == _LISTEN and local == port}


def holder(port: int) -> str | None:
    """ "pid N (command line)" of a process listening on ``port``, when /proc shows it (Linux, and only
    processes this user may look into); else None."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in wanted for fd in fds):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                return f"pid {pid} ({' '.join(cmd.replace(chr(0), ' ').split())[:120]})"  # one line
        except OSError:
            continue  # gone meanwhile, or not ours to look into
    return None


def problem(ports: Sequence[tuple[int, str]]) -> str | None:
    """One line about the first port in use, or None when all are free."""
    for port, what in ports:
        if in_use(port):
            who = holder(port)
            by = f"by {who}" if who else "by another process"
            stop = f"kill {who.split()[1]}" if who else "stop what listens there"
            return (
                f"make run: port {port} ({what}) is in use {by}: run `make stop` if an earlier "
                f"`make run` started it, else {stop}; then run again"
            )
    return None


def main(argv: Sequence[str]) -> int:
    try:
        ports = parse(argv)
    except ValueError as exc:
        print(f"check_ports: {exc}", file=sys.stderr)
        return 2
    found = problem(ports)
    if found is not None:
        print(found, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

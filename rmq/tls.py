"""TLS to name servers and brokers, as RocketMQ's Java client does it when ``tls.enable`` is on
(ClientConfig.useTLS): every connection, name server and broker alike, is TLS.

A RocketMQ server's ``tls.server.mode`` is ``permissive`` by default (it takes TLS and plain connections
on the same port) and a server with no certificate configured makes itself a self-signed one at start,
so Java's client verifies nothing unless told to (``tls.client.authServer``). The same here: with a CA
file the peer's certificate chain must verify against it; without, it is not verified (the sidecar warns
at start). Host names are never checked: clients reach brokers at the addresses the name server lists,
IP addresses mostly, and Java does not check them either.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def client_context(ca_file: str = "", cert_file: str = "", key_file: str = "") -> ssl.SSLContext:
    """The context of every connection. ``ca_file``: PEM CA certificates the peer's chain must verify
    against (tls.client.trustCertPath with authServer); ``cert_file`` and ``key_file``: the client's own
    certificate and key, for servers that require one (tls.server.need.client.auth=require;
    tls.client.certPath and keyPath). Raises OSError or ssl.SSLError for a file that does not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        context.load_cert_chain(cert_file, key_file or None)
    return context


class ReloadingContext:
    """A client_context that follows its files: asked for the context (at each new connection), it looks
    at the files' modification times at most every ``check_every_s`` and builds the context again when one
    changed, so a certificate rotated on disk (cert-manager renews a mounted Secret) is used by the next
    connection, with no restart. Connections already open keep theirs: TLS checks a certificate at the
    handshake only. A rotated set that does not load (caught half-written) keeps the previous context,
    with a warning, until it does."""

    def __init__(
        self,
        ca_file: str = "",
        cert_file: str = "",
        key_file: str = "",
        *,
        check_every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._files = (ca_file, cert_file, key_file)
        self._check_every_s = check_every_s
        self._clock = clock
        self._context = client_context(*self._files)  # raises for files that do not load, as at start
        self._stamps = self._mtimes()
        self._checked = clock()
        self.reloads = 0

    def __call__(self) -> ssl.SSLContext:
        now = self._clock()
        if now - self._checked >= self._check_every_s:
            self._checked = now
            stamps = self._mtimes()
            if stamps != self._stamps:
                try:
                    self._context = client_context(*self._files)
                except OSError as exc:  # ssl.SSLError too
                    log.warning("TLS files changed but do not load (%s); the previous ones stay in use", exc)
                else:
                    self._stamps = stamps
                    self.reloads += 1
                    log.info("TLS files changed: new connections use them")
        return self._context

    def _mtimes(self) -> tuple[int | None, ...]:
        stamps: list[int | None] = []
        for path in self._files:
            try:
                stamps.append(os.stat(path).st_mtime_ns if path else None)
            except OSError:
                stamps.append(None)
        return tuple(stamps)

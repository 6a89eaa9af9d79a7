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

import ssl


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

"""What counts as "this machine": the one check behind every must-be-on-localhost setting and header.

Only literals are trusted. A host *name* such as ``127.0.0.1.nip.io`` or ``127.attacker.test`` may
resolve anywhere, and a subscription endpoint receives every consumed message with its headers, so
names other than exactly ``localhost`` are refused (``*.localhost`` too: not every resolver keeps it
on loopback).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

_IPV6_LOOPBACK = ipaddress.IPv6Address("::1")


def is_loopback(host: str) -> bool:
    """True only for ``localhost``, a dotted-quad in 127.0.0.0/8 and ``::1`` (brackets optional)."""
    host = host.lower()
    if host == "localhost":
        return True
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:  # ipaddress refuses short forms (127.1) and leading zeros: strict dotted-quad only
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        return address == _IPV6_LOOPBACK
    return address.is_loopback


def local_url_error(url: str) -> str | None:
    """Why ``url`` is not an http:// URL of this machine, or None when it is."""
    if any(ch <= " " or ch == "\x7f" for ch in url):  # urlsplit drops tabs and newlines silently
        return "control characters or whitespace in the URL"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises on a bad port
    except ValueError:
        return "bad port or malformed URL"
    if parts.scheme != "http":
        return "expected an http:// URL"
    if "@" in parts.netloc:
        return "user information (user@host) is not allowed"
    if not parts.hostname or not is_loopback(parts.hostname):
        return "the host must be localhost, 127.x.x.x or [::1] (an IP literal, not a name)"
    return None

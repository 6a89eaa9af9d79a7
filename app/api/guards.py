"""Who may call the HTTP API: the checks against local attackers, as pure functions of request headers.

The sidecar listens on loopback, where browsers live too. A web page can make a browser send requests
to it (CSRF: refused by the Origin and Content-Type checks), or make its own host name resolve to
127.0.0.1 and then read the answers (DNS rebinding: refused by the Host check). The bearer token keeps
out everything else that can reach the port.
"""

from __future__ import annotations

import functools
import hmac
from dataclasses import dataclass, field

from ..localhost import is_loopback

# Hosts and origins repeat on every request: parse each once (bounded: attackers choose them).
_loopback = functools.lru_cache(maxsize=256)(is_loopback)
MAX_CACHED_HOSTS = 256  # Host values whose verdict a Guards keeps (the same few on every request)
# Reachable without the token: liveness says nothing, and the API description is public anyway.
# /readyz and /metrics name brokers and show store errors, so they need it.
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
# /docs' static Swagger UI files are as public as /docs; /ui checks the token itself, from the header or
# from the cookie /ui?token= sets (a browser navigating to the page cannot send the header).
PUBLIC_PREFIXES = ("/docs/assets/", "/ui")


def needs_token(path: str) -> bool:
    return path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES)


# Methods whose bodies must be JSON: a browser sends text/plain or a form cross-origin without asking.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True, slots=True)
class Guards:
    auth_token: str = ""
    allowed_hosts: frozenset[str] = frozenset()  # lower-case names; "*" allows any
    allowed_origins: frozenset[str] = frozenset()  # lower-case scheme://host[:port]
    # Host header -> verdict: parsing it cost 0.8 us of every request, and a client sends the same one
    # each time (0.1 us from here). Bounded: past MAX_CACHED_HOSTS values are checked, not kept.
    _hosts: dict[bytes, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(
        cls, auth_token: str, allowed_hosts: tuple[str, ...] = (), allowed_origins: tuple[str, ...] = ()
    ) -> Guards:
        return cls(
            auth_token,
            frozenset(h.lower().rstrip(".") for h in allowed_hosts),
            frozenset(o.lower().rstrip("/") for o in allowed_origins),
        )

    def host_ok(self, host: bytes | None) -> bool:
        """A request without Host (HTTP/1.0) comes from no browser; otherwise loopback or configured."""
        if host is None:
            return True
        ok = self._hosts.get(host)
        if ok is None:
            ok = "*" in self.allowed_hosts or self._host_allowed(host_name(host.decode("latin-1")))
            if len(self._hosts) < MAX_CACHED_HOSTS:
                self._hosts[host] = ok
        return ok

    def _host_allowed(self, name: str) -> bool:
        return _loopback(name) or name in self.allowed_hosts

    def origin_ok(self, origin: bytes | None) -> bool:
        """No Origin: not a cross-origin browser request. ``null`` (sandboxed pages, files) is refused."""
        if origin is None:
            return True
        text = origin.decode("latin-1").strip().lower()
        if text in self.allowed_origins:
            return True
        scheme, sep, rest = text.partition("://")
        return bool(sep) and scheme in ("http", "https") and _loopback(host_name(rest))

    def authorized(self, authorization: bytes | str | None) -> bool:
        """``Bearer <token>``; the scheme is case-insensitive (RFC 7235), the token compared in constant
        time."""
        if not self.auth_token:
            return True
        if authorization is None:
            return False
        if isinstance(authorization, str):
            try:
                raw = authorization.encode("latin-1")  # a header as HTTP decodes it
            except UnicodeEncodeError:  # gRPC metadata: grpc decodes a value that is valid UTF-8 so
                raw = authorization.encode()
        else:
            raw = authorization
        scheme, _, token = raw.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.auth_token.encode())


def host_name(host: str) -> str:
    """``Host`` without its port, lower-case: ``[::1]:9880`` -> ``::1``, ``A.com.:80`` -> ``a.com``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit():
        host = name
    return host.rstrip(".")


def is_json(content_type: bytes | None) -> bool:
    """``application/json`` or ``application/<anything>+json``, with any parameters."""
    if content_type is None:
        return False
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))

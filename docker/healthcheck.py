"""Health probe run inside the container: GET a path of the sidecar's HTTP listener, exit 0 on 200.

The image's HEALTHCHECK and the Helm chart's exec probes run it (kubelet's httpGet probes connect to the
pod IP, which a loopback-bound listener never answers). The address and token are read the way
`rocksidecar serve` reads them, through app.config, so a changed ROCKSIDECAR_HTTP_ADDR or config file
cannot leave the probe asking the wrong port.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

from rocksidecar.app import config

TIMEOUT_S = 3.0
# Straight to the listener: never through an HTTP(S)_PROXY of the environment (docker injects them from
# ~/.docker/config.json; clusters behind egress proxies set them), which cannot reach this loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# A wildcard bind address is reachable from inside the container on loopback.
_WILDCARD = {"0.0.0.0", "::", "[::]", ""}


def probe_url(http_addr: str, path: str) -> str:
    host, _, port = http_addr.rpartition(":")
    if host in _WILDCARD:
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"  # bare IPv6 literal
    return f"http://{host}:{port}{path}"


def check(path: str, env: dict[str, str] | None = None) -> tuple[bool, str]:
    """Return (healthy, reason) for GET ``path`` on the configured listener."""
    env = dict(os.environ) if env is None else env
    try:
        settings = config.load(env, env.get(config.CONFIG_ENV), require_namesrv=False)
    except config.ConfigError as exc:
        return False, f"configuration error: {exc}"
    request = urllib.request.Request(probe_url(settings.http_addr, path))
    if settings.auth_token:
        request.add_header("Authorization", f"Bearer {settings.auth_token}")
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            return response.status == 200, f"{path}: {response.status}"
    except urllib.error.HTTPError as exc:
        return False, f"{path}: {exc.code}"
    except OSError as exc:
        return False, f"{path}: {exc}"


def main(argv: list[str]) -> int:
    path = argv[0] if argv else "/healthz"
    healthy, reason = check(path)
    print(reason, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

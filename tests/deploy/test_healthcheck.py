"""docker/healthcheck.py: the probe behind HEALTHCHECK and the chart's exec probes."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.fake_http import serve
from tests.deploy.paths import load_script

healthcheck = load_script("healthcheck")
ROUTES = {"/healthz": (200, b"ok"), "/readyz": (503, b"no route")}


def test_healthy_only_on_200() -> None:
    with serve(ROUTES) as (port, _):
        env = {"ROCKSIDECAR_HTTP_ADDR": f"127.0.0.1:{port}"}
        assert healthcheck.check("/healthz", env) == (True, "/healthz: 200")
        assert healthcheck.check("/readyz", env) == (False, "/readyz: 503")


def test_address_and_token_come_from_the_config_file_like_the_service(tmp_path: Path) -> None:
    with serve(ROUTES, token="s3cret") as (port, seen):
        cfg = tmp_path / "rocksidecar.yaml"
        cfg.write_text(f"http_addr: 0.0.0.0:{port}\nauth_token: s3cret\n")
        assert healthcheck.check("/healthz", {"ROCKSIDECAR_CONFIG": str(cfg)})[0]
        assert seen[-1]["Authorization"] == "Bearer s3cret"


def test_unreachable_or_misconfigured_is_unhealthy() -> None:
    with serve(ROUTES) as (port, _):
        pass  # closed again: nothing listens on that port now
    healthy, reason = healthcheck.check("/healthz", {"ROCKSIDECAR_HTTP_ADDR": f"127.0.0.1:{port}"})
    assert not healthy and "refused" in reason.lower()
    healthy, reason = healthcheck.check("/healthz", {"ROCKSIDECAR_HTTP_ADDR": "nonsense"})
    assert not healthy and "ROCKSIDECAR_HTTP_ADDR" in reason


def test_probe_url_reaches_wildcard_binds_on_loopback() -> None:
    assert healthcheck.probe_url("0.0.0.0:9880", "/readyz") == "http://127.0.0.1:9880/readyz"
    assert healthcheck.probe_url("::1:9880", "/healthz") == "http://[::1]:9880/healthz"
    assert healthcheck.probe_url("127.0.0.1:9880", "/healthz") == "http://127.0.0.1:9880/healthz"

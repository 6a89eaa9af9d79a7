"""The pure checks of app.api.guards: Host and Origin parsing, the bearer scheme, JSON media types."""

from __future__ import annotations

import pytest

from rocksidecar.app.api.guards import MAX_CACHED_HOSTS, Guards, host_name, is_json


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("127.0.0.1:9880", "127.0.0.1"),
        ("[::1]:9880", "::1"),
        ("[::1]", "::1"),
        ("LocalHost.", "localhost"),
        ("Example.COM.:80", "example.com"),
        ("evil.example:notaport", "evil.example:notaport"),
    ],
)
def test_host_name(host: str, name: str) -> None:
    assert host_name(host) == name


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        (None, True),  # HTTP/1.0 without Host: no browser
        (b"127.0.0.1:1", True),
        (b"127.1.2.3", True),
        (b"[::1]:1", True),
        (b"localhost:1", True),
        (
            b"rocksidecar.app.localhost",
            False,
        ),  # only exactly localhost: not every resolver keeps *.localhost local
        (b"sidecar.internal:9880", True),
        (b"evil.example", False),
        (b"127.0.0.1.nip.io", False),
        (b"0.0.0.0", False),
        (b"", False),
    ],
)
def test_host_ok(host: bytes | None, ok: bool) -> None:
    assert Guards.of("", allowed_hosts=("Sidecar.Internal",)).host_ok(host) is ok


def test_host_verdicts_are_kept_per_header_value_and_bounded() -> None:
    guards = Guards.of("", ("api.example",))
    for _ in range(2):  # the second round answers from what the first kept, the same
        assert guards.host_ok(b"127.0.0.1:9880") and guards.host_ok(b"API.example.:443")
        assert not guards.host_ok(b"evil.example")
    # Hostile clients choose Host values: past the bound each is still checked, none is kept.
    for i in range(MAX_CACHED_HOSTS + 50):
        assert not guards.host_ok(b"evil%d.example" % i)
    assert guards.host_ok(b"[::1]:80") and not guards.host_ok(b"evil-late.example")
    assert len(guards._hosts) == MAX_CACHED_HOSTS
    assert Guards.of("", ("api.example",)) == guards  # the kept verdicts are no part of its value


@pytest.mark.parametrize(
    ("origin", "ok"),
    [
        (None, True),
        (b"http://localhost:3000", True),
        (b"https://127.0.0.1", True),
        (b"http://[::1]:8080", True),
        (b"https://console.example:8443", True),
        (b"https://console.example", False),
        (b"null", False),
        (b"http://evil.example", False),
        (b"chrome-extension://abc", False),
    ],
)
def test_origin_ok(origin: bytes | None, ok: bool) -> None:
    assert Guards.of("", allowed_origins=("https://console.example:8443/",)).origin_ok(origin) is ok


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        (b"Bearer s3cret", True),
        (b"bearer s3cret", True),
        ("BEARER  s3cret ", True),
        (b"Bearer s3cret2", False),
        (b"Basic s3cret", False),
        (b"s3cret", False),
        (None, False),
        ("Bearer s3cret€", False),  # gRPC metadata that was UTF-8: grpc hands it over decoded so
        ("Bearer €", False),
    ],
)
def test_bearer(header: bytes | str | None, ok: bool) -> None:
    assert Guards.of("s3cret").authorized(header) is ok
    assert Guards.of("").authorized(header)  # no token configured: everyone


@pytest.mark.parametrize(
    ("content_type", "ok"),
    [
        (b"application/json", True),
        (b"Application/JSON; charset=utf-8", True),
        (b"application/problem+json", True),
        (b"text/plain", False),
        (b"application/x-www-form-urlencoded", False),
        (b"text/json", False),
        (None, False),
    ],
)
def test_is_json(content_type: bytes | None, ok: bool) -> None:
    assert is_json(content_type) is ok

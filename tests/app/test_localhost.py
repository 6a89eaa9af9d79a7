"""The one localhost check (issue 27 item 3): IP literals and exactly ``localhost``, never names that
merely start like a loopback address, and every setting that must be local uses it."""

from __future__ import annotations

import pytest

from rocksidecar.app import config
from rocksidecar.app.localhost import is_loopback, local_url_error
from rocksidecar.app.subscriptions.spec import SpecError, parse_one

GOOD_URLS = [
    "http://localhost:8080/in",
    "http://LOCALHOST/in",
    "http://127.0.0.1:32200/",
    "http://127.1.2.3/",
    "http://[::1]:81/a",
]
BAD_URLS = [
    "http://127.attacker.test:32200/",
    "http://127.0.0.1.nip.io/",
    "http://127.0.0.1\t.evil.com/",
    "http://127.0.0.1@evil.com/",
    "http://user:pw@127.0.0.1/",
    "http://app.localhost/",
    "http://localhost./",
    "http://127.1/",  # short form: a resolver may treat it as a name
    "http://0177.0.0.1/",  # octal: refused, not guessed
    "http://[::ffff:127.0.0.1]/",
    "http://127.0.0.1 /",
    "http://127.0.0.1/\n",
    "http://127.0.0.1/\x7f",
    "https://localhost/",
    "ftp://localhost/",
    "file:///etc/passwd",
    "http:///path",
    "http://localhost:99999/",
]


@pytest.mark.parametrize("url", GOOD_URLS)
def test_local_urls_pass(url: str) -> None:
    assert local_url_error(url) is None


@pytest.mark.parametrize("url", BAD_URLS)
def test_other_urls_are_refused(url: str) -> None:
    assert local_url_error(url)


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("::1", True),
        ("[::1]", True),
        ("127.attacker.test", False),
        ("127.0.0.1.nip.io", False),
        ("x.localhost", False),
        ("localhost.", False),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("", False),
    ],
)
def test_is_loopback(host: str, ok: bool) -> None:
    assert is_loopback(host) is ok


@pytest.mark.parametrize("url", BAD_URLS[:4])
def test_subscription_endpoint_refuses_lookalike_hosts(url: str) -> None:
    entry = {"name": "a", "topic": "T", "group": "G", "endpoint": url}
    with pytest.raises(SpecError, match=r"^s\[0\]\.endpoint: the app must be on localhost"):
        parse_one(entry, "s[0]")


def test_bind_address_lookalike_needs_a_token() -> None:
    refused = r"ROCKSIDECAR_HTTP_ADDR: 127\.0\.0\.1\.nip\.io is not a loopback"
    with pytest.raises(config.ConfigError, match=refused):
        config.load({"ROCKSIDECAR_HTTP_ADDR": "127.0.0.1.nip.io:9880"}, require_namesrv=False)

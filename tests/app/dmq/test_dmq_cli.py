"""`rocksidecar dmq`: bad configuration is one clear line and exit code 2, before anything starts."""

from __future__ import annotations

import pytest

from rocksidecar.app.cli import main
from rocksidecar.app.dmq import service


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, "ROCKSIDECAR_NAMESRV: required"),
        (["--inner-topic", "bad topic"], {"ROCKSIDECAR_NAMESRV": "127.0.0.1:1"}, "--inner-topic: topic"),
        (["--group", " "], {"ROCKSIDECAR_NAMESRV": "127.0.0.1:1"}, "--group: must not be empty"),
        (["--http-addr", "nope"], {"ROCKSIDECAR_NAMESRV": "127.0.0.1:1"}, "--http-addr: "),
        # The flags skipped their settings' parsers: a TypeError traceback from ReplicaSet before.
        (
            ["--replicas", "a,b", "--instance", "a", "--copies", "99999"],
            {"ROCKSIDECAR_NAMESRV": "127.0.0.1:1"},
            "--copies: must be between 0 and 64, got 99999",
        ),
        (
            ["--replicas", "a,b", "--instance", "a", "--copies", "two"],
            {"ROCKSIDECAR_NAMESRV": "127.0.0.1:1"},
            "--copies: expected an integer",
        ),
        (["--http-addr", "127.0.0.1:99999"], {"ROCKSIDECAR_NAMESRV": "127.0.0.1:1"}, "--http-addr: "),
    ],
)
def test_bad_config_is_one_line(
    args: list[str], env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.delenv("ROCKSIDECAR_NAMESRV", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["dmq", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("rocksidecar dmq: configuration error: ") and expected in err


@pytest.mark.parametrize("value", ["nan", "inf", "Infinity"])
@pytest.mark.parametrize("flag", ["--offset-persist-s", "--refresh-after-s", "--presence-interval-s"])
def test_seconds_must_be_finite(
    flag: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """float() takes these; NaN passed ``<= 0`` and made the offset-persist loop spin."""
    monkeypatch.setenv("ROCKSIDECAR_NAMESRV", "127.0.0.1:1")
    started: list[object] = []
    monkeypatch.setattr(service, "serve", lambda settings, options: started.append(options) or 0)
    assert main(["dmq", flag, value]) == 2
    assert started == []
    err = capsys.readouterr().err
    assert err == f"rocksidecar dmq: configuration error: {flag}: must be a finite number of seconds\n"

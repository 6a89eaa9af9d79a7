"""Service mode's inner topic is checked when `serve` starts, as `rocksidecar dmq` checks it: with one no
broker takes, every delayed send was answered 202 and then could never be forwarded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocksidecar.app import config, service
from rocksidecar.app.cli import main


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[config.Settings]:
    """No ROCKSIDECAR_* but a name server and service mode; serve() only records being called."""
    for key in list(os.environ):
        if key.startswith("ROCKSIDECAR_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("ROCKSIDECAR_NAMESRV", "127.0.0.1:1")
    monkeypatch.setenv("ROCKSIDECAR_DELAY_MODE", "service")
    calls: list[config.Settings] = []
    monkeypatch.setattr(service, "serve", lambda settings, **_: calls.append(settings) or 0)
    return calls


@pytest.mark.parametrize("topic", ["bad topic!", "TBW102", "SCHEDULE_TOPIC_XXXX", "t" * 128])
def test_serve_refuses_an_inner_topic_no_broker_takes(
    started: list[config.Settings], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    topic: str,
) -> None:  # fmt: skip
    monkeypatch.setenv("ROCKSIDECAR_DMQ_INNER_TOPIC", topic)
    assert main(["serve"]) == 2
    assert started == []
    err = capsys.readouterr().err
    assert err.startswith("rocksidecar: configuration error: ROCKSIDECAR_DMQ_INNER_TOPIC: "), err
    assert err.count("\n") == 1


def test_serve_refuses_an_inner_topic_key_left_empty(
    started: list[config.Settings], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Not the default in its place: the Rock-DMQ service may consume another topic."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("dmq_inner_topic:\n")
    assert main(["serve", "--config", str(cfg)]) == 2
    assert started == []
    assert "configuration error: dmq_inner_topic: has no value" in capsys.readouterr().err


def test_serve_takes_a_valid_inner_topic(
    started: list[config.Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCKSIDECAR_DMQ_INNER_TOPIC", "%DMQ|inner-1_a")
    assert main(["serve"]) == 0
    (settings,) = started
    assert (settings.delay_mode, settings.dmq_inner_topic) == ("service", "%DMQ|inner-1_a")


def test_serve_and_dmq_agree_on_the_inner_topic(
    started: list[config.Settings], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCKSIDECAR_DMQ_INNER_TOPIC", "bad topic!")
    assert main(["serve"]) == 2 and main(["dmq"]) == 2
    serve_err, dmq_err = capsys.readouterr().err.splitlines()
    assert serve_err.partition("error: ")[2] == dmq_err.partition("error: ")[2]

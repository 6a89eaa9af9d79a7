"""Every setting the code parses is declared once and listed by --help-settings (issue 27 item 13): the
dmq command's settings do not stop `serve` (nor the other way round), typos are still refused."""

from __future__ import annotations

import pytest

from rocksidecar.app import config
from rocksidecar.app.cli import main
from rocksidecar.app.dmq import cli as dmq_cli
from rocksidecar.app.subscriptions.spec import SUBSCRIPTION_KEY_HELP, SubscriptionSpec

DMQ_ENV = {
    "ROCKSIDECAR_DMQ_GROUP": "g",
    "ROCKSIDECAR_DMQ_HTTP_ADDR": "127.0.0.1:9999",
    "ROCKSIDECAR_DMQ_INSTANCE": "pod-0",
    "ROCKSIDECAR_DMQ_INNER_TOPIC": "inner",
}


def test_one_environment_serves_both_commands() -> None:
    s = config.load(DMQ_ENV, require_namesrv=False)
    assert (s.dmq_group, s.dmq_http_addr, s.dmq_instance, s.dmq_inner_topic) == (
        "g",
        "127.0.0.1:9999",
        "pod-0",
        "inner",
    )


@pytest.mark.parametrize("typo", ["ROCKSIDECAR_DMQ_GRUOP", "ROCKSIDECAR_TOPIC", "ROCKSIDECAR_DMQ_TOPICZ"])
def test_typos_are_still_refused(typo: str) -> None:
    with pytest.raises(config.ConfigError, match=f"^{typo}: not a rocksidecar setting"):
        config.load({**DMQ_ENV, typo: "x"}, require_namesrv=False)


def test_dmq_reads_its_settings_from_the_environment_and_names_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag, name, _ in dmq_cli.FLAGS:
        assert config.setting(name).env.startswith("ROCKSIDECAR_DMQ_"), flag
    monkeypatch.setenv("ROCKSIDECAR_NAMESRV", "127.0.0.1:1")
    monkeypatch.setenv("ROCKSIDECAR_DMQ_GROUP", " ")
    assert main(["dmq"]) == 2
    assert "configuration error: ROCKSIDECAR_DMQ_GROUP: must not be empty" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "dmq"])
def test_help_settings_lists_every_parsed_setting_and_key(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help-settings"]) == 0
    out = capsys.readouterr().out
    missing = [s.env for s in config.SETTINGS if s.env not in out]
    missing += [s.name for s in config.SETTINGS if s.name not in out]
    missing += [config.CONFIG_ENV] if config.CONFIG_ENV not in out else []
    missing += [f"retry.{k}" for k in config.RETRY_KEYS if f"retry.{k}" not in out]
    missing += [k for k in config.POLICY_KEYS if f"retry.default.{k}" not in out]
    lines = out.splitlines()
    keys = SubscriptionSpec.__dataclass_fields__
    missing += [k for k in keys if not any(line.split() and line.split()[0] == k for line in lines)]
    assert not missing, f"--help-settings leaves out {missing}"
    assert set(SUBSCRIPTION_KEY_HELP) == set(keys)  # every key explained, none stale

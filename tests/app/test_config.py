"""Settings: layering (defaults < file < env < flags) and clear errors naming the bad setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocksidecar.app.config import SETTINGS, ConfigError, RetryPolicy, Settings, describe, load
from tests.tls_certs import Certs


def test_defaults_bind_to_loopback() -> None:
    s = load({"ROCKSIDECAR_NAMESRV": "127.0.0.1:9876"})
    assert s.http_addr == "127.0.0.1:9880" and s.grpc_addr == "127.0.0.1:9881"
    assert s.namesrv == ("127.0.0.1:9876",) and s.send_timeout_ms == 3000 and s.fault_tolerance


def test_settings_table_matches_the_dataclass() -> None:
    defaults = Settings()
    for setting in SETTINGS:
        assert getattr(defaults, setting.name) == setting.default, setting.name
        assert setting.env == "ROCKSIDECAR_" + setting.name.upper()
    assert "ROCKSIDECAR_AUTH_TOKEN" in describe()


def test_env_overrides_file_and_flags_override_env(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "namesrv: [a:1, b:2]\nsend_timeout_ms: 1000\nretry_times: 4\n"
        "retry:\n  default: {ladder_s: [1, 2], max_retries: 3}\n"
        "  types: {orders: {max_retries: 9}}\n  dead_letter_webhook: http://127.0.0.1:1/dl\n"
    )
    s = load({"ROCKSIDECAR_SEND_TIMEOUT_MS": "2000"}, cfg, overrides={"retry_times": 1})
    assert s.namesrv == ("a:1", "b:2") and s.send_timeout_ms == 2000 and s.retry_times == 1
    assert s.retry_default == RetryPolicy((1.0, 2.0), 3)
    assert s.retry_policy("orders") == RetryPolicy((1.0, 2.0), 9)
    assert s.retry_policy("other") == s.retry_default
    assert s.dead_letter_webhook == "http://127.0.0.1:1/dl"


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, "ROCKSIDECAR_NAMESRV"),
        ({"ROCKSIDECAR_NAMESRV": "nohostport"}, "ROCKSIDECAR_NAMESRV"),
        ({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_SEND_TIMEOUT_MS": "abc"}, "ROCKSIDECAR_SEND_TIMEOUT_MS"),
        ({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_SEND_TIMEOUT_MS": "0"}, "ROCKSIDECAR_SEND_TIMEOUT_MS"),
        ({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_HTTP_ADDR": "9880"}, "ROCKSIDECAR_HTTP_ADDR"),
        ({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_ACCESS_KEY": "ak"}, "ROCKSIDECAR_ACCESS_KEY"),
        (
            {"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_FAULT_TOLERANCE": "maybe"},
            "ROCKSIDECAR_FAULT_TOLERANCE",
        ),
        ({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_QUEUE_SELECTOR": "zone"}, "ROCKSIDECAR_ZONE"),
        ({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_NAMSRV": "typo:1"}, "ROCKSIDECAR_NAMSRV"),
    ],
)
def test_bad_settings_name_themselves(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        load(env)


def test_namesrv_optional_with_embedded_devbroker() -> None:
    assert load({}, require_namesrv=False).namesrv == ()


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("nope: 1\n", "nope"),
        ("- a\n", "mapping"),
        ("retry: {default: {ladder_s: []}}\n", "retry.default.ladder_s"),
        ("retry: {types: {t: {max_retries: -1}}}\n", "retry.types.t.max_retries"),
        ("retry: {bogus: 1}\n", r"retry: unknown keys \['bogus'\]"),
        ("retry: [1]\n", "retry: expected a mapping"),
        ("retry: {default: 3}\n", "retry.default: expected a mapping with ladder_s and/or max_retries"),
        ("retry: {types: {t: {ladder: [1]}}}\n", r"retry.types.t: unknown keys \['ladder'\]"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_files_name_the_key(tmp_path: Path, text: str, names: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=names):
        load({"ROCKSIDECAR_NAMESRV": "a:1"}, cfg)


@pytest.mark.parametrize(
    "env",
    [
        {"ROCKSIDECAR_HTTP_ADDR": "0.0.0.0:9880"},
        {"ROCKSIDECAR_GRPC_ADDR": "[::]:9881"},
        {"ROCKSIDECAR_HTTP_ADDR": "10.1.2.3:9880"},
        {"ROCKSIDECAR_HTTP_ADDR": "sidecar.example:9880"},
    ],
)
def test_a_non_loopback_listener_needs_a_token_or_an_explicit_opt_in(env: dict[str, str]) -> None:
    env = {"ROCKSIDECAR_NAMESRV": "a:1", **env}
    name = next(iter(k for k in env if k.endswith("_ADDR")))
    with pytest.raises(ConfigError, match=f"{name}.*ROCKSIDECAR_AUTH_TOKEN"):
        load(env)
    assert load({**env, "ROCKSIDECAR_AUTH_TOKEN": "s3cret"}).auth_token == "s3cret"
    assert load({**env, "ROCKSIDECAR_ALLOW_REMOTE_WITHOUT_TOKEN": "true"}).allow_remote_without_token


@pytest.mark.parametrize("addr", ["127.0.0.1:1", "127.9.9.9:1", "localhost:1", "[::1]:1"])
def test_loopback_listeners_need_no_token(addr: str) -> None:
    assert load({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_HTTP_ADDR": addr}).http_addr == addr


def test_the_opt_in_is_warned_about_at_start(caplog: pytest.LogCaptureFixture) -> None:
    from rocksidecar.app.service import warn_if_open

    settings = load(
        {
            "ROCKSIDECAR_NAMESRV": "a:1",
            "ROCKSIDECAR_HTTP_ADDR": "0.0.0.0:9880",
            "ROCKSIDECAR_ALLOW_REMOTE_WITHOUT_TOKEN": "1",
        }
    )
    warn_if_open(settings)
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "0.0.0.0:9880" in record.message and "SECURITY" in record.message


def test_edge_settings_parse_lists() -> None:
    s = load(
        {
            "ROCKSIDECAR_NAMESRV": "a:1",
            "ROCKSIDECAR_ALLOWED_HOSTS": "sidecar.internal, other",
            "ROCKSIDECAR_ALLOWED_ORIGINS": "https://console.example",
            "ROCKSIDECAR_READ_TIMEOUT_S": "2.5",
        }
    )
    assert s.allowed_hosts == ("sidecar.internal", "other") and s.allowed_origins == (
        "https://console.example",
    )
    assert s.read_timeout_s == 2.5
    with pytest.raises(ConfigError, match="ROCKSIDECAR_READ_TIMEOUT_S"):
        load({"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_READ_TIMEOUT_S": "0"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("READ_TIMEOUT_S", "nan"),  # started: a deadline never reached (nor refused)
        ("READ_TIMEOUT_S", "inf"),
        ("READ_TIMEOUT_S", "1e308"),
        ("SHUTDOWN_GRACE_S", "nan"),  # a traceback at start (int(nan) in the server's config)
        ("SHUTDOWN_GRACE_S", "inf"),
        ("MAX_DELAY_MS", "999999999999999999999"),  # answers promised times the store clamps to 2286
    ],
)
def test_numbers_beyond_any_sense_are_refused_naming_the_setting(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"ROCKSIDECAR_{name}: "):
        load({"ROCKSIDECAR_NAMESRV": "a:1", f"ROCKSIDECAR_{name}": value})


@pytest.mark.parametrize("step", [".nan", ".inf", "1e308"])
def test_a_retry_step_that_is_no_finite_time_is_refused(tmp_path: Path, step: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"retry: {{default: {{ladder_s: [1, {step}]}}}}\n")
    with pytest.raises(ConfigError, match=r"retry\.default\.ladder_s"):
        load({"ROCKSIDECAR_NAMESRV": "a:1"}, cfg)


def test_tls_files_load_and_each_bad_one_is_named(certs: Certs, tmp_path: Path) -> None:
    base = {"ROCKSIDECAR_NAMESRV": "a:1", "ROCKSIDECAR_TLS": "true"}
    ca, cert, key = "ROCKSIDECAR_TLS_CA_FILE", "ROCKSIDECAR_TLS_CERT_FILE", "ROCKSIDECAR_TLS_KEY_FILE"
    s = load({**base, ca: str(certs.ca), cert: str(certs.client_cert), key: str(certs.client_key)})
    assert (s.tls, s.tls_ca_file, s.tls_cert_file) == (True, str(certs.ca), str(certs.client_cert))
    assert load(base).tls_ca_file == ""  # TLS without verification, as Java's default
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    bad = [
        ({"ROCKSIDECAR_NAMESRV": "a:1", ca: str(certs.ca)}, f"{ca}: set ROCKSIDECAR_TLS=true"),
        ({**base, ca: str(tmp_path / "missing.pem")}, f"{ca}: .* does not load"),
        ({**base, ca: str(garbage)}, f"{ca}: .* does not load"),
        ({**base, key: str(certs.client_key)}, f"{key}: needs {cert}"),
        ({**base, cert: str(certs.client_cert), key: str(certs.server_key)}, f"{cert}: .* does not load"),
        ({**base, "ROCKSIDECAR_TLS": "perhaps"}, "ROCKSIDECAR_TLS"),
    ]
    for env, message in bad:
        with pytest.raises(ConfigError, match=message):
            load(env)

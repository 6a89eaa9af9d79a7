"""Settings' values as the file and the environment give them: an empty key is "not set" (never the text
"None"), a key given twice, a list or mapping where one value belongs, a topic or group no broker takes,
a webhook that is no http(s) URL, a file that is not UTF-8 or nests past sense: each refused at start
with one line naming the setting, and `rocksidecar serve` exits 2 without a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocksidecar.app import config, service
from rocksidecar.app.cli import main

BASE = {"ROCKSIDECAR_NAMESRV": "a:1"}


def _file(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "c.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _load(tmp_path: Path, text: str | bytes, env: dict[str, str] | None = None) -> config.Settings:
    return config.load({**BASE, **(env or {})}, _file(tmp_path, text))


# --- an empty value ---------------------------------------------------------------------------------
def test_an_empty_auth_token_is_no_token(tmp_path: Path) -> None:
    assert _load(tmp_path, "auth_token:\n").auth_token == ""  # was "None": a token anyone could send
    with pytest.raises(config.ConfigError, match=r"^ROCKSIDECAR_HTTP_ADDR: 0\.0\.0\.0 is not a loopback"):
        _load(tmp_path, "auth_token:\nhttp_addr: 0.0.0.0:9880\n")
    with pytest.raises(config.ConfigError, match=r"^ROCKSIDECAR_HTTP_ADDR: 0\.0\.0\.0 is not a loopback"):
        config.load({**BASE, "ROCKSIDECAR_AUTH_TOKEN": "  ", "ROCKSIDECAR_HTTP_ADDR": "0.0.0.0:9880"})


@pytest.mark.parametrize("text", ["data_dir:\n", "data_dir: ~\n", "data_dir: ''\n"])
def test_an_empty_data_dir_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(config.ConfigError, match=r"^data_dir: "):  # was ./None
        _load(tmp_path, text)


def test_an_empty_dead_letter_webhook_is_none(tmp_path: Path) -> None:
    assert _load(tmp_path, "retry:\n  dead_letter_webhook:\n").dead_letter_webhook == ""  # was "None"


REQUIRED_WHEN_GIVEN = {"data_dir", "dmq_inner_topic", "dmq_group", "dmq_marks_topic"}


@pytest.mark.parametrize("setting", config.SETTINGS, ids=lambda s: s.name)
def test_a_key_without_a_value_is_its_default_or_refused(tmp_path: Path, setting: config.Setting) -> None:
    text = f"{setting.name}:\n"
    if setting.name in REQUIRED_WHEN_GIVEN:
        with pytest.raises(config.ConfigError, match=f"^{setting.name}: has no value"):
            config.load({}, _file(tmp_path, text), require_namesrv=False)
    else:
        loaded = config.load({}, _file(tmp_path, text), require_namesrv=False)
        assert getattr(loaded, setting.name) == setting.default


def test_a_null_in_a_list_is_refused(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match=r"^allowed_hosts: expected a value, got none"):
        _load(tmp_path, "allowed_hosts: [a, ~]\n")


# --- a key given twice ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("send_timeout_ms: 100\nsend_timeout_ms: 200\n", "send_timeout_ms"),
        ("transactions: {mode: local, mode: broker}\n", "mode"),
        ("retry:\n  default: {max_retries: 1}\n  default: {max_retries: 2}\n", "default"),
        (
            "subscriptions:\n- {name: a, topic: T, group: G, group: H, endpoint: 'http://localhost:1/'}\n",
            "group",
        ),
    ],
)
def test_a_key_given_twice_is_refused(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(config.ConfigError, match=f"duplicate key '{key}'") as err:
        _load(tmp_path, text)
    assert "\n" not in str(err.value)


def test_a_key_given_twice_in_the_subscriptions_variable_is_refused() -> None:
    twice = '[{"name": "a", "name": "b", "topic": "T", "group": "G", "endpoint": "http://localhost:1/"}]'
    with pytest.raises(config.ConfigError, match=r"^ROCKSIDECAR_SUBSCRIPTIONS: .*duplicate key 'name'"):
        config.load({**BASE, "ROCKSIDECAR_SUBSCRIPTIONS": twice})


def test_a_merged_key_may_still_be_overridden(tmp_path: Path) -> None:
    text = (
        "subscriptions:\n"
        "- &base {name: a, topic: T, group: G, endpoint: 'http://localhost:1/', concurrency: 3}\n"
        "- {<<: *base, name: b, group: G2}\n"
    )
    subs = _load(tmp_path, text).subscriptions
    assert [(s.name, s.group, s.concurrency) for s in subs] == [("a", "G", 3), ("b", "G2", 3)]


# --- one value, as text ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("producer_group: [a, b]\n", "^producer_group: expected a single value, got a list"),
        ("auth_token: {a: b}\n", "^auth_token: expected a single value, got a mapping"),
        ("send_timeout_ms: [1000]\n", "^send_timeout_ms: expected a single value, got a list"),
        ("tls: [true]\n", "^tls: expected a single value, got a list"),
        ("allowed_hosts: {a: b}\n", "^allowed_hosts: expected a single value, got a mapping"),
        ("allowed_hosts: [a, [b]]\n", "^allowed_hosts: expected a single value, got a list"),
        ("namesrv: {a: 1}\n", "^namesrv: expected a single value, got a mapping"),
        ("retry: {default: {ladder_s: [1, [2]]}}\n", r"^retry\.default\.ladder_s: expected a single value"),
        ('data_dir: "a\\0b"\n', "^data_dir: contains a control character"),
    ],
)
def test_a_list_mapping_or_control_character_for_one_value_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(config.ConfigError, match=message):
        _load(tmp_path, text)


def test_plain_values_are_taken_as_written(tmp_path: Path) -> None:
    s = _load(
        tmp_path, "producer_group: 0123\nzone: no\nqueue_selector: zone\ntls: yes\nsend_timeout_ms: 1_500\n"
    )
    # YAML would have made 0123 the octal 83 and `no` False ("False")
    assert (s.producer_group, s.zone, s.tls, s.send_timeout_ms) == ("0123", "no", True, 1500)


# --- topics and groups -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DMQ_INNER_TOPIC", "bad topic!"),
        ("DMQ_INNER_TOPIC", "TBW102"),  # the auto-create template
        ("DMQ_INNER_TOPIC", "t" * 128),
        ("DMQ_MARKS_TOPIC", ""),
        ("MSG_TRACE_TOPIC", "rmq_sys_mine"),  # a system topic: sends to it are refused
        ("MSG_TRACE_TOPIC", "trace/topic"),
        ("PRODUCER_GROUP", ""),
        ("PRODUCER_GROUP", "my group"),
        ("PRODUCER_GROUP", "g" * 256),
        ("TRANSACTIONS_GROUP", "tx.group"),
        ("DMQ_GROUP", "dmq group"),
    ],
)
def test_a_topic_or_group_no_broker_takes_is_refused(name: str, value: str) -> None:
    with pytest.raises(config.ConfigError, match=f"^ROCKSIDECAR_{name}: "):
        config.load({**BASE, f"ROCKSIDECAR_{name}": value})


def test_topics_and_groups_the_brokers_take_are_accepted() -> None:
    env = {
        **BASE,
        "ROCKSIDECAR_PRODUCER_GROUP": "g" * 255,
        "ROCKSIDECAR_TRANSACTIONS_GROUP": "%tx|pod-1_a",
        "ROCKSIDECAR_DMQ_GROUP": "dmq-1",
        "ROCKSIDECAR_DMQ_INNER_TOPIC": "t" * 127,
        "ROCKSIDECAR_MSG_TRACE_TOPIC": "RMQ_SYS_TRACE_TOPIC",
    }
    s = config.load(env)
    assert (len(s.producer_group), s.transaction_group, s.dmq_group) == (255, "%tx|pod-1_a", "dmq-1")
    assert (s.dmq_inner_topic, s.msg_trace_topic) == ("t" * 127, "RMQ_SYS_TRACE_TOPIC")
    assert config.load(BASE).transaction_group == "rocksidecar"  # empty: the producer group


# --- the dead-letter webhook -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    ["ftp://host/dl", "127.0.0.1:8080/dl", "http://", "http://host:99999/", "http://[::1/", "http://h/a b"],
)
def test_a_webhook_that_is_no_http_url_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(config.ConfigError, match=r"^retry\.dead_letter_webhook: expected an http"):
        _load(tmp_path, f"retry: {{dead_letter_webhook: '{url}'}}\n")


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/dl", "https://u:p@alerts.example/x?q=1"])
def test_http_and_https_webhooks_are_accepted(tmp_path: Path, url: str) -> None:
    assert _load(tmp_path, f"retry: {{dead_letter_webhook: '{url}'}}\n").dead_letter_webhook == url


# --- what used to be a traceback: `rocksidecar serve` prints one line and exits 2 ------------------
@pytest.fixture
def serve_env(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """No ROCKSIDECAR_* but a name server, and a serve() that records being called: a configuration
    accepted by mistake fails the test at once instead of starting a sidecar."""
    for key in list(os.environ):
        if key.startswith("ROCKSIDECAR_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("ROCKSIDECAR_NAMESRV", "127.0.0.1:1")
    started: list[object] = []
    monkeypatch.setattr(service, "serve", lambda settings, **_: started.append(settings) or 0)
    return started


def _exits_2_with_one_line(
    args: list[str], started: list[object], capsys: pytest.CaptureFixture[str], *names: str
) -> None:
    assert main(["serve", *args]) == 2
    assert started == []
    err = capsys.readouterr().err
    assert err.startswith("rocksidecar: configuration error: ") and err.count("\n") == 1, err
    for name in names:
        assert name in err, err


LAUGHS = "subscriptions:\n- &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"- &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param(b"\xff\xfe\x00a: 1\n", ("not UTF-8",), id="not-utf8"),
        pytest.param(("[" * 5000 + "]" * 5000 + "\n").encode(), ("nested more than",), id="deeply-nested"),
        pytest.param(LAUGHS.encode(), ("with its aliases expanded",), id="alias-bomb"),
        pytest.param(b"subscriptions: &a [*a]\n", ("an alias refers to itself",), id="alias-loop"),
        pytest.param(b"send_timeout_ms: 1\nsend_timeout_ms: 2\n", ("send_timeout_ms",), id="twice"),
    ],
)
def test_serve_with_an_odd_config_file_exits_2(
    serve_env: list[object], capsys: pytest.CaptureFixture[str], tmp_path: Path, text: bytes,
    names: tuple[str, ...],
) -> None:  # fmt: skip
    cfg = _file(tmp_path, text)
    _exits_2_with_one_line(["--config", str(cfg)], serve_env, capsys, str(cfg), *names)


@pytest.mark.parametrize("port", ["\u00b2", "\u0661\u0662"])  # superscript two; Arabic-Indic 12
def test_serve_with_a_non_ascii_digit_port_exits_2(
    serve_env: list[object], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, port: str
) -> None:
    monkeypatch.setenv("ROCKSIDECAR_HTTP_ADDR", f"127.0.0.1:{port}")
    _exits_2_with_one_line([], serve_env, capsys, "ROCKSIDECAR_HTTP_ADDR: expected host:port")


def test_serve_with_deeply_nested_subscriptions_env_exits_2(
    serve_env: list[object], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCKSIDECAR_SUBSCRIPTIONS", "[" * 5000 + "]" * 5000)
    _exits_2_with_one_line([], serve_env, capsys, "ROCKSIDECAR_SUBSCRIPTIONS: not valid YAML/JSON")

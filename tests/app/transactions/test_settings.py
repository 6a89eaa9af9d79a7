"""The transactions settings (issue 29): environment and file (flat keys or a `transactions:` section),
checked at start with an error naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocksidecar.app.config import ConfigError, load

NS = {"ROCKSIDECAR_NAMESRV": "127.0.0.1:9876"}


def test_defaults_and_environment() -> None:
    s = load(NS)
    assert (s.transactions_mode, s.transactions_check_endpoint, s.transactions_undecided_timeout_s) == (
        "broker", "", 60,
    )  # fmt: skip
    assert s.transaction_group == s.producer_group == "rocksidecar"
    s = load({
        **NS, "ROCKSIDECAR_TRANSACTIONS_MODE": "AUTO", "ROCKSIDECAR_TRANSACTIONS_GROUP": "tx-pod-1",
        "ROCKSIDECAR_TRANSACTIONS_CHECK_ENDPOINT": "http://127.0.0.1:8080/tx-check",
        "ROCKSIDECAR_TRANSACTIONS_UNDECIDED_TIMEOUT_S": "5",
    })  # fmt: skip
    assert s.transactions_mode == "auto" and s.transaction_group == "tx-pod-1"
    assert s.transactions_check_endpoint == "http://127.0.0.1:8080/tx-check"
    assert s.transactions_undecided_timeout_s == 5


def test_file_section_and_environment_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "transactions:\n  mode: local\n  check_endpoint: http://[::1]:9/c\n  undecided_timeout_s: 7\n"
    )
    s = load({**NS, "ROCKSIDECAR_TRANSACTIONS_UNDECIDED_TIMEOUT_S": "9"}, cfg)
    assert s.transactions_mode == "local" and s.transactions_check_endpoint == "http://[::1]:9/c"
    assert s.transactions_undecided_timeout_s == 9


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ROCKSIDECAR_TRANSACTIONS_MODE": "outbox"}, "ROCKSIDECAR_TRANSACTIONS_MODE"),
        ({"ROCKSIDECAR_TRANSACTIONS_CHECK_ENDPOINT": "http://example.com/c"}, "CHECK_ENDPOINT: the host"),
        ({"ROCKSIDECAR_TRANSACTIONS_CHECK_ENDPOINT": "https://127.0.0.1/c"}, "expected an http:// URL"),
        ({"ROCKSIDECAR_TRANSACTIONS_UNDECIDED_TIMEOUT_S": "0"}, "UNDECIDED_TIMEOUT_S: must be between"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load({**NS, **env})


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("transactions: auto\n", "transactions: expected a mapping"),
        ("transactions:\n  modes: auto\n", "unknown setting transactions.modes"),
        ("transactions_mode: auto\ntransactions:\n  mode: local\n", "transactions.mode is set twice"),
    ],
)
def test_bad_sections_name_the_key(tmp_path: Path, text: str, named: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=named):
        load(NS, cfg)

"""Subscription settings: from the YAML file and the environment; each mistake is one clear line
naming the entry and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocksidecar.app import config
from rocksidecar.app.subscriptions.runner import consumer_config
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.rmq.consumer.sticky import AllocateSticky

GOOD = {"name": "orders", "topic": "Orders", "group": "orders-app", "endpoint": "http://localhost:8080/in"}


def test_yaml_file_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "subscriptions:\n"
        "  - {name: orders, topic: Orders, group: g1, endpoint: 'http://127.0.0.1:8080/in'}\n"
        "  - name: audit\n    topic: Audit\n    group: g2\n    endpoint: 'http://[::1]:81/a'\n"
        "    expression: 'TagA || TagB'\n    mode: orderly\n    concurrency: 4\n    timeout_s: 2.5\n"
        "    max_reconsume_times: 3\n    consume_from: first\n    allocation: sticky\n    commit_window: 16\n"
    )
    s = config.load({}, path, require_namesrv=False)
    assert s.subscriptions[0] == SubscriptionSpec("orders", "Orders", "g1", "http://127.0.0.1:8080/in")
    audit = s.subscriptions[1]
    assert (audit.expression, audit.orderly, audit.concurrency, audit.timeout_s) == (
        "TagA || TagB",
        True,
        4,
        2.5,
    )
    assert (audit.max_reconsume_times, audit.consume_from, audit.allocation) == (3, "first", "sticky")
    assert isinstance(consumer_config(audit).allocate, AllocateSticky)
    assert consumer_config(s.subscriptions[0]).allocate.name == "AVG"  # Java's default
    assert (consumer_config(audit).commit_window, consumer_config(s.subscriptions[0]).commit_window) == (
        16,
        256,
    )


def test_environment_takes_yaml_or_json_text() -> None:
    env = {
        "ROCKSIDECAR_SUBSCRIPTIONS": '[{"name": "a", "topic": "T", "group": "G", "endpoint": "http://localhost:1/"}]'
    }
    assert config.load(env, require_namesrv=False).subscriptions[0].group == "G"
    assert config.load({}, require_namesrv=False).subscriptions == ()


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        ({**GOOD, "colour": "red"}, "[0].colour: unknown key"),
        ({k: v for k, v in GOOD.items() if k != "endpoint"}, "[0].endpoint: required"),
        ({**GOOD, "endpoint": "http://app.example.com/in"}, "[0].endpoint: the app must be on localhost"),
        ({**GOOD, "endpoint": "ftp://localhost/in"}, "[0].endpoint: the app must be on localhost"),
        ({**GOOD, "endpoint": "http://localhost:99999/in"}, "[0].endpoint: the app must be on localhost"),
        ({**GOOD, "mode": "fifo"}, "[0].mode: expected one of concurrent, orderly"),
        ({**GOOD, "concurrency": 0}, "[0].concurrency: must be between 1 and 1000"),
        ({**GOOD, "timeout_s": "soon"}, "[0].timeout_s: expected a number"),
        ({**GOOD, "max_reconsume_times": -1}, "[0].max_reconsume_times: must be between"),
        ({**GOOD, "consume_from": "middle"}, "[0].consume_from: expected one of last, first, timestamp"),
        ({**GOOD, "consume_from": "timestamp"}, "[0].consume_timestamp_ms: required"),
        ({**GOOD, "allocation": "random"}, "[0].allocation: expected one of averagely, bounded_hash, sticky"),
        ({**GOOD, "commit_window": -1}, "[0].commit_window"),
        ({**GOOD, "commit_window": "wide"}, "[0].commit_window"),
        ({**GOOD, "topic": "bad topic"}, "[0].topic: 1-127 letters"),
        ({**GOOD, "expression": "SQL92:a > 1"}, "[0].expression: for an SQL92 filter set expression_type"),
        ({**GOOD, "expression_type": "SQL92"}, "[0].expression: required with expression_type: SQL92"),
        ({**GOOD, "expression_type": "XPATH"}, "[0].expression_type: expected one of TAG, SQL92"),
        ("orders", "[0]: expected a mapping"),
    ],
)
def test_bad_entry_is_one_line_naming_the_key(entry: object, names: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        config._subscriptions([entry], "subscriptions")
    message = str(err.value)
    assert message.startswith("subscriptions" + names), message
    assert "\n" not in message


def test_env_errors_name_the_variable() -> None:
    with pytest.raises(config.ConfigError, match=r"^ROCKSIDECAR_SUBSCRIPTIONS: expected a list"):
        config.load({"ROCKSIDECAR_SUBSCRIPTIONS": "name: a"}, require_namesrv=False)
    with pytest.raises(config.ConfigError, match=r"^ROCKSIDECAR_SUBSCRIPTIONS: not valid YAML/JSON"):
        config.load({"ROCKSIDECAR_SUBSCRIPTIONS": "[{"}, require_namesrv=False)


def test_duplicate_names_and_groups_are_refused() -> None:
    twice = [GOOD, {**GOOD, "name": "other"}]
    with pytest.raises(
        config.ConfigError, match=r"subscriptions\[1\]\.group: 'orders-app' is used by another"
    ):
        config._subscriptions(twice, "subscriptions")
    with pytest.raises(config.ConfigError, match=r"subscriptions\[1\]\.name: 'orders' is used"):
        config._subscriptions([GOOD, {**GOOD, "group": "g2"}], "subscriptions")


def test_serve_refuses_a_bad_subscription_with_one_line(tmp_path: Path) -> None:
    from tests.app.test_serve_startup import second_serve

    bad = '[{name: a, topic: T, group: G, endpoint: "http://example.com/"}]'
    out = second_serve(tmp_path, SUBSCRIPTIONS=bad)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines() == [
        "rocksidecar: configuration error: ROCKSIDECAR_SUBSCRIPTIONS[0].endpoint: the app must be on "
        "localhost (a sidecar pushes to its own pod), got 'http://example.com/': the host must be "
        "localhost, 127.x.x.x or [::1] (an IP literal, not a name)"
    ]


def test_a_key_left_empty_takes_its_default() -> None:
    # Before: `expression:` (null) became the tag filter "None", which matches no message; `timeout_s:`
    # was refused as "None".
    env = {
        "ROCKSIDECAR_SUBSCRIPTIONS": (
            "- {name: a, topic: T, group: G, endpoint: 'http://localhost:1/', expression: , timeout_s: }"
        )
    }
    spec = config.load(env, require_namesrv=False).subscriptions[0]
    assert (spec.expression, spec.timeout_s) == ("*", 15.0)
    with pytest.raises(config.ConfigError, match=r"\[0\]\.group: required"):
        config.load(
            {"ROCKSIDECAR_SUBSCRIPTIONS": "- {name: a, topic: T, group: , endpoint: 'http://localhost:1/'}"},
            require_namesrv=False,
        )

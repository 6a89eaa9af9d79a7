"""Claims of README.md, the chart (values.yaml, values.schema.json, its README) and the CLI's help, each
held to the code path that implements it: the retry limit a ladder without max_retries keeps, the
`unknown` outcome of a local-outbox check, the chart's schema against the settings' parsers (checked
mechanically, so that they cannot drift), and `rocksidecar dmq --help`'s defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rocksidecar.app import config
from rocksidecar.rmq.codes import DEFAULT_TOPIC
from rocksidecar.rmq.message import NOT_ALLOWED_SEND_TOPICS, SYSTEM_TOPIC_PREFIX, TOPIC_MAX_LEN
from rocksidecar.storage.reserve import MIN_RESERVE_MB

ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "helm" / "rocksidecar" / "values.yaml"
SCHEMA: dict[str, Any] = json.loads((VALUES.parent / "values.schema.json").read_text())
CONFIG_SCHEMA: dict[str, Any] = SCHEMA["properties"]["config"]["properties"]


# --- retry: a ladder without max_retries keeps the limit it inherits ---------------------------------
def test_retry_type_without_max_retries_inherits_the_defaults_limit(tmp_path: Path) -> None:
    """values.yaml, config.retry.types: "Per message type ("type" field of a request): same keys, unset
    ones inherit from default." A type that sets only its ladder must keep retry.default's max_retries."""
    claim = 'Per message type ("type" field of a request): same keys, unset ones inherit from default.'
    assert claim in VALUES.read_text(), "values.yaml's comment changed: change this test with it"
    path = tmp_path / "sidecar.yaml"
    path.write_text(
        "retry:\n"
        "  default: {ladder_s: [3, 5, 30], max_retries: 30}\n"
        "  types:\n"
        "    payments: {ladder_s: [1, 2, 5]}\n"
    )
    s = config.load({"ROCKSIDECAR_NAMESRV": "127.0.0.1:9876"}, path)
    assert s.retry_policy("payments").ladder_s == (1.0, 2.0, 5.0)
    # unset in the type: inherited from default (30), not the length of the type's own ladder (3)
    assert s.retry_policy("payments").max_retries == s.retry_default.max_retries == 30


def test_default_ladder_without_max_retries_keeps_the_documented_limit(tmp_path: Path) -> None:
    """`rocksidecar serve --help-settings`: "retry.default.max_retries  Retries before a message becomes a
    dead letter (default 10)". Setting only retry.default.ladder_s must not change the retry limit: a
    short ladder would otherwise dead-letter every spooled message after a few seconds of outage."""
    listed = config.describe()
    assert (
        "retry.default.max_retries\n    Retries before a message becomes a dead letter (default 10)."
        in listed
    )
    path = tmp_path / "sidecar.yaml"
    path.write_text("retry:\n  default: {ladder_s: [1, 2, 5]}\n")
    s = config.load({"ROCKSIDECAR_NAMESRV": "127.0.0.1:9876"}, path)
    assert s.retry_default.ladder_s == (1.0, 2.0, 5.0)
    assert s.retry_default.max_retries == 10  # the documented default, not len(ladder_s) == 3


# --- transactions: a local-outbox check answered UNKNOWN is counted ----------------------------------
class _NoBroker:
    """A TransactionProducer no half reaches (mode local never calls it)."""

    checker = None


async def test_a_local_outbox_check_answered_unknown_is_counted_unknown() -> None:
    """README, "Status page": `rocksidecar_transactions_total{outcome}` ... (`checked_commit`,
    `checked_rollback` when the app's check endpoint decided, asked on a broker's check or by the local
    outbox's; `unknown` for each check answered UNKNOWN). The local outbox asks the app about a stale
    transaction; the app answers UNKNOWN: that check must be counted `unknown`, as a broker's is."""
    from rocksidecar.app.transactions.coordinator import LocalOutbox, TransactionCoordinator
    from rocksidecar.app.transactions.records import CF, TransactionRecords
    from rocksidecar.retry import RetryStore
    from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
    from rocksidecar.retry.policy import RetryPolicy
    from rocksidecar.rmq import Message
    from rocksidecar.rmq.producer.transaction import TransactionState
    from rocksidecar.storage.memory import MemoryKV
    from tests.fakes import FakeWallClock

    readme = (ROOT / "README.md").read_text()
    assert "`unknown` for each check\nanswered UNKNOWN)" in readme, "README's sentence changed"
    clock = FakeWallClock()
    kv = MemoryKV([CF, *RETRY_CFS])
    asked: list[str] = []

    async def ask_app(tx_id: str, key: str | None, topic: str) -> TransactionState:
        asked.append(tx_id)
        return TransactionState.UNKNOWN

    outbox = LocalOutbox(
        RetryStore(kv, now_ms=clock.now_ms), lambda _t: RetryPolicy((2.0,), 5), undecided_timeout_ms=60_000
    )
    c = TransactionCoordinator(
        TransactionRecords(kv), _NoBroker(), ask_app,  # type: ignore[arg-type]
        now_ms=clock.now_ms, mode="local", outbox=outbox,
    )  # fmt: skip
    begun = await c.begin(Message("Orders", b"x"))
    clock.wall_ms += 60_000
    assert await c.check_undecided() == 0
    assert asked == [begun.id]  # the app was asked, and answered UNKNOWN
    assert c.stats.outcomes["unknown"] == 1  # was 0: only a broker's check-back was counted
    assert c.stats.undecided()[0] == 1  # still undecided: asked again on a later round


# --- the chart's schema refuses what the sidecar refuses ---------------------------------------------
# Values of the chart's `config:` that `rocksidecar serve` refuses at start (a ConfigError: the pod
# crash-loops) and that values.schema.json let through, while it refused log_format: yaml,
# delay_mode: later or max_connections: 0 by the same means (an enum, a minimum).
REFUSED_AT_START: list[dict[str, object]] = [
    {"log_level": "verbose"},
    {"queue_selector": "roundrobin"},
    {"disk_reserve_mb": 10},
    {"send_timeout_ms": 0},
    {"batch_limit": 0},
]


@pytest.mark.parametrize("bad", REFUSED_AT_START, ids=[next(iter(v.keys())) for v in REFUSED_AT_START])
def test_chart_schema_rejects_what_the_sidecar_refuses(bad: dict[str, object], tmp_path: Path) -> None:
    """helm/rocksidecar/README.md: "`values.yaml` explains every value, and `values.schema.json` rejects
    unknown keys and bad values at `helm install`"; values.yaml: "values.schema.json checks them: a typo
    fails `helm install`". A `config:` value the sidecar refuses must fail `helm template`, not install
    a pod that restarts for ever."""
    import yaml

    from tests.deploy import chart

    claim = "`values.schema.json` rejects\nunknown keys and bad values at\n`helm install`"
    assert " ".join(claim.split()) in " ".join((VALUES.parent / "README.md").read_text().split())
    name = next(iter(bad.keys()))
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(config.ConfigError, match=name):  # the sidecar refuses it at start
        config.load({"ROCKSIDECAR_NAMESRV": "127.0.0.1:9876"}, path)
    with pytest.raises(chart.HelmError, match=name):  # was: rendered without a word
        chart.render_with({"config": bad})


# Parsers with nothing a schema bounds beyond the value's type (any text, a list of names, a boolean).
UNBOUNDED = {config._text, config._name_list, config._bool}
# Parsers whose checks a JSON schema cannot express, made at start naming the key (the chart's README
# lists them); the structured settings (subscriptions, retry, transactions) are checked on their own.
AT_START_ONLY = {config._topic_list, config._addr, config._local_url, config._subscriptions}


def _schema_keys() -> list[tuple[str, str]]:
    """(schema key under config:, the setting it is), the file's transactions: section's included."""
    keys = [(k, k) for k in CONFIG_SCHEMA if k not in ("retry", "transactions")]
    keys += [(f"transactions.{k}", f"transactions_{k}") for k in CONFIG_SCHEMA["transactions"]["properties"]]
    return keys


def _prop(key: str) -> dict[str, Any]:
    section, _, inner = key.rpartition(".")
    prop: dict[str, Any] = CONFIG_SCHEMA[section]["properties"][inner] if section else CONFIG_SCHEMA[key]
    return prop


def _resolved(prop: dict[str, Any]) -> dict[str, Any]:
    """``prop``, or the definition it refers to (its type stated beside the reference: `allOf`)."""
    refs = [r["$ref"] for r in prop.get("allOf", []) if "$ref" in r]
    return SCHEMA["definitions"][refs[0].removeprefix("#/definitions/")] if refs else prop


@pytest.mark.parametrize(("key", "name"), _schema_keys(), ids=[k for k, _ in _schema_keys()])
def test_chart_schema_bounds_each_config_key_as_its_setting_does(key: str, name: str) -> None:
    """Each `config:` key of values.schema.json carries the enum, range or pattern of its setting's
    parser in app.config, read from the parser itself: a bound changed on one side only fails here."""
    parse = config.setting(name).parse
    prop = _resolved(_prop(key))
    if isinstance(parse, config.IntRange | config.FloatRange):
        assert prop["type"] == ("integer" if isinstance(parse, config.IntRange) else "number")
        assert (prop.get("minimum"), prop.get("maximum")) == (parse.lo, parse.hi)
    elif isinstance(parse, config.Choice):
        assert prop == {"type": "string", "enum": list(parse.options)}
    elif isinstance(parse, config.Group):
        least = 0 if parse.optional else 1
        assert prop == {"type": "string", "pattern": f"^[%|a-zA-Z0-9_-]{{{least},{config.GROUP_MAX_LEN}}}$"}
    elif parse is config._topic:
        assert _prop(key) == {"type": "string", "allOf": [{"$ref": "#/definitions/topic"}]}
    elif parse is config._reserve_mb:
        assert (prop["minimum"], prop["maximum"]) == (config.RESERVE_MB.lo, config.RESERVE_MB.hi)
        assert prop["anyOf"] == [{"const": 0}, {"minimum": MIN_RESERVE_MB}]  # 0: none; else at least 16
    else:  # a new kind of parser: say here how the schema holds its values
        assert parse in UNBOUNDED | AT_START_ONLY, f"{name}: no rule relates its parser to the schema"
        assert {"minimum", "maximum", "enum"}.isdisjoint(prop), f"{key}: a bound its parser lacks"


def test_chart_schema_topic_is_the_topic_the_sidecar_takes() -> None:
    """The schema's topic (dmq_inner_topic, msg_trace_topic, dmq_marks_topic) is rmq.message's check:
    its characters and length, not the auto-create template, not a system topic."""
    topic = SCHEMA["definitions"]["topic"]
    assert topic["pattern"] == f"^[%|a-zA-Z0-9_-]{{1,{TOPIC_MAX_LEN}}}$"
    refused, prefix = topic["not"]["anyOf"]
    assert sorted(refused["enum"]) == sorted({DEFAULT_TOPIC, *NOT_ALLOWED_SEND_TOPICS})
    assert prefix == {"pattern": f"^{SYSTEM_TOPIC_PREFIX}"}


def test_chart_schema_retry_policy_is_the_sidecars() -> None:
    policy = SCHEMA["definitions"]["retryPolicy"]["properties"]
    step, limit = config.LADDER_STEP_S, config.MAX_RETRIES
    assert (policy["ladder_s"]["items"]["minimum"], policy["ladder_s"]["items"]["maximum"]) == (
        step.lo,
        step.hi,
    )
    assert (policy["max_retries"]["minimum"], policy["max_retries"]["maximum"]) == (limit.lo, limit.hi)


def _just_outside(key: str, name: str) -> list[Any]:
    """Values of ``key`` its setting's parser refuses, next to what it takes."""
    parse = config.setting(name).parse
    if isinstance(parse, config.IntRange):
        return [parse.lo - 1] + ([] if parse.hi is None else [parse.hi + 1])
    if isinstance(parse, config.FloatRange):
        return [parse.lo / 2, parse.hi * 2]
    if isinstance(parse, config.Choice):
        return [parse.options[0] + "x"]
    if isinstance(parse, config.Group):
        return ["a b", "g" * (config.GROUP_MAX_LEN + 1)]
    if parse is config._topic:
        return [DEFAULT_TOPIC, SYSTEM_TOPIC_PREFIX + "x", "t" * (TOPIC_MAX_LEN + 1)]
    if parse is config._reserve_mb:
        return [MIN_RESERVE_MB - 1, config.RESERVE_MB.hi + 1]  # type: ignore[operator]
    return []


OUTSIDE = [(k, n, v) for k, n in _schema_keys() for v in _just_outside(k, n)]


@pytest.mark.parametrize(("key", "name", "value"), OUTSIDE, ids=[f"{k}={str(v)[:12]}" for k, _, v in OUTSIDE])
def test_chart_refuses_each_value_just_outside_a_settings_bounds(
    key: str, name: str, value: Any, tmp_path: Path
) -> None:
    """Each value just past a bound of a setting's parser is refused by the sidecar at start and by
    `helm template` (through the schema), naming the key."""
    from tests.deploy import chart

    with pytest.raises(config.ConfigError, match=name):
        config.setting(name).parse(value, name)
    section, _, inner = key.rpartition(".")
    values = {section: {inner: value}} if section else {key: value}
    with pytest.raises(chart.HelmError, match=inner or key):
        chart.render_with({"config": values})


# --- `rocksidecar dmq --help` ------------------------------------------------------------------------
def test_dmq_help_states_the_copies_default(capsys: pytest.CaptureFixture[str]) -> None:
    """`rocksidecar dmq --help` said of --copies "(env ROCKSIDECAR_DMQ_COPIES; default none)". The code's
    default is 0, which means 2 (1 with a single replica: ReplicaSet.parse), as README says ("Each
    message is kept by `--copies` replicas (default 2)") and `--help-settings` says ("0: 2, or 1 with a
    single replica"). "none" suggests no copies are kept, or that it must be given."""
    from rocksidecar.app.cli import main
    from rocksidecar.app.dmq.replicas import ReplicaSet

    assert ReplicaSet.parse("r0,r1,r2", "r0", None).copies == 2  # what an unset --copies means
    with pytest.raises(SystemExit):
        main(["dmq", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    copies = text[text.rindex("--copies DMQ_COPIES") : text.rindex("--marks-topic DMQ_MARKS_TOPIC")]
    assert "default none" not in copies, copies  # was: "... (env ROCKSIDECAR_DMQ_COPIES; default none)"
    assert "default 0" in copies and "0: 2, or 1 with a single replica" in copies, copies

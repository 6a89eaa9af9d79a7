"""Option parsing and the schema check that run on the driver before any task: defaults, Spark's
lower-cased option names, and an error naming the option for every bad value."""

from __future__ import annotations

import pytest

from rocksidecar.pipeline.options import DEFAULT_ENDPOINT, OptionError, WriteOptions, check_schema, parse

SCHEMA = {
    "id": "bigint",
    "body": "string",
    "payload": "binary",
    "k": "string",
    "ks": "array<string>",
    "props": "map<string,string>",
    "n": "int",
}


def test_defaults() -> None:
    opts = parse({"topic": "Orders"})
    assert opts == WriteOptions(topic="Orders")
    assert (opts.endpoint, opts.batch_size, opts.max_retries, opts.job_id) == (
        DEFAULT_ENDPOINT,
        500,
        20,
        None,
    )
    assert opts.backoff().initial_s == 0.5 and opts.backoff().max_s == 30.0
    assert parse({"topic": "T", "retryBackoffMax": "0.05"}).retry_backoff_s == 0.05  # the cap wins


def test_spark_lower_cases_names_and_all_options_parse() -> None:
    opts = parse(
        {
            "topic": "T",
            "endpoint": "http://sidecar:9880/",
            "keycolumn": "k",
            "TAGSCOLUMN": "k",
            "bodyColumn": "payload",
            "shardingKeyColumn": "k",
            "propertiescolumn": "props",
            "rowidcolumn": "id",
            "batchsize": "1000",
            "maxbatchbytes": "65536",
            "token": "t",
            "timeout": "2.5",
            "maxretries": "0",
            "retrybackoff": "0.01",
            "retrybackoffmax": "0.5",
            "jobid": "daily-2024.06.01",
            "ack": "spool",
            "reportpath": "/tmp/r.jsonl",
            "path": "ignored, Spark's own",
        }
    )
    assert opts.endpoint == "http://sidecar:9880" and opts.timeout_s == 2.5
    assert (opts.batch_size, opts.max_batch_bytes) == (1000, 65536)
    assert opts.columns == {
        "bodyColumn": "payload",
        "keyColumn": "k",
        "tagsColumn": "k",
        "shardingKeyColumn": "k",
        "propertiesColumn": "props",
        "rowIdColumn": "id",
    }
    assert (opts.max_retries, opts.retry_backoff_s, opts.retry_backoff_max_s) == (0, 0.01, 0.5)
    assert (opts.job_id, opts.ack, opts.report_path, opts.token) == (
        "daily-2024.06.01",
        "spool",
        "/tmp/r.jsonl",
        "t",
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, "option topic is required"),
        ({"topic": "a b"}, "option topic='a b'"),
        ({"topic": "T", "tpoic": "x"}, "unknown option 'tpoic'"),
        ({"topic": "T", "endpoint": "localhost:9880"}, "endpoint='localhost:9880' must be an http"),
        ({"topic": "T", "batchSize": "0"}, "batchSize='0' must be between 1 and 10000"),
        ({"topic": "T", "batchSize": "1.5"}, "batchSize='1.5' must be a whole number"),
        ({"topic": "T", "timeout": "soon"}, "timeout='soon' is not a number"),
        ({"topic": "T", "jobId": "a:b"}, "jobId='a:b' must be 1-128 characters"),
        ({"topic": "T", "ack": "never"}, "ack='never' must be 'broker' or 'spool'"),
        ({"topic": "T", "keyColumn": ""}, "option keyColumn is empty"),
        (
            {"topic": "T", "retryBackoff": "2", "retryBackoffMax": "1"},
            "retryBackoff='2' must be between 0 and 1",
        ),
    ],
)
def test_bad_options_name_themselves(given: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse(given)


def test_schema_check_fills_the_default_body_column() -> None:
    assert check_schema(parse({"topic": "T"}), SCHEMA).column("bodyColumn") == "body"
    assert (
        check_schema(parse({"topic": "T"}), {"id": "bigint", "body": "int"}).column("bodyColumn") is None
    )  # whole row
    assert check_schema(parse({"topic": "T"}), {"id": "bigint"}).column("bodyColumn") is None
    assert (
        check_schema(parse({"topic": "T", "bodyColumn": "payload"}), SCHEMA).column("bodyColumn") == "payload"
    )
    assert (
        check_schema(parse({"topic": "T", "keyColumn": "ks", "propertiesColumn": "props"}), SCHEMA).column(
            "keyColumn"
        )
        == "ks"
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"keyColumn": "nope"}, "option keyColumn: no column 'nope' (columns: id, body"),
        ({"bodyColumn": "n"}, "option bodyColumn: column 'n' is int; it must be string or binary"),
        ({"propertiesColumn": "ks"}, "column 'ks' is array<string>; it must be map<string,string>"),
        ({"rowIdColumn": "props"}, "option rowIdColumn: column 'props' is map<string,string>"),
    ],
)
def test_schema_check_names_the_option_and_column(given: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as info:
        check_schema(parse({"topic": "T", **given}), SCHEMA)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "column_type", ["bigint", "int", "smallint", "tinyint", "boolean", "date", "decimal(10,2)"]
)
@pytest.mark.parametrize("option", ["keyColumn", "tagsColumn", "shardingKeyColumn"])
def test_keys_tags_and_sharding_keys_take_types_with_one_text_form(option: str, column_type: str) -> None:
    opts = check_schema(parse({"topic": "T", option: "c"}), {"c": column_type, "body": "string"})
    assert opts.columns[option] == "c"


@pytest.mark.parametrize("column_type", ["double", "timestamp", "binary", "array<bigint>"])
def test_keys_refuse_types_without_one_text_form(column_type: str) -> None:
    with pytest.raises(OptionError, match=r"it must be string or array<string> or an integer, boolean"):
        check_schema(parse({"topic": "T", "keyColumn": "c"}), {"c": column_type})


def test_an_unknown_option_keeps_its_case_and_suggests_the_name() -> None:
    with pytest.raises(OptionError) as typed:
        parse({"topic": "T", "bathSize": "9"})
    assert "unknown option 'bathSize'; did you mean 'batchSize'?" in str(typed.value)
    with pytest.raises(OptionError) as lowered:  # what Spark hands the data source
        parse({"topic": "T", "bathsize": "9"})
    assert (
        "unknown option 'bathsize' (Spark passes option names lower-cased); did you mean 'batchSize'?"
        in str(lowered.value)
    )


def test_a_misspelt_column_option_in_our_own_code_fails_at_once() -> None:
    opts = parse({"topic": "T", "bodyColumn": "b"})
    assert opts.column("bodyColumn") == "b" and opts.column("keyColumn") is None
    with pytest.raises(KeyError, match="bodyColum"):
        opts.column("bodyColum")


@pytest.mark.parametrize(
    "column_type",
    [
        "interval day to second",
        "interval hour",
        "interval year to month",
        "variant",
        "geography(4326)",
        "array<interval day>",
        "struct<n:int,d:interval minute to second>",
        "map<string,variant>",
    ],
)
def test_a_whole_row_body_refuses_a_column_json_cannot_hold_naming_it(column_type: str) -> None:
    """A day-time interval column (a timedelta in Python) passed this check, then every task failed on
    it with a bare TypeError (and each retry of it), after the partitions whose intervals are null were
    published. Refused here as a column option's type without one text form is: cast it."""
    with pytest.raises(OptionError, match=r"option bodyColumn is not given, .* column 'd' \(") as info:
        check_schema(parse({"topic": "T"}), {"id": "bigint", "d": column_type})
    assert "cast('string')" in str(info.value)
    # with a body column the row is not written as JSON: any column may be there
    given = check_schema(parse({"topic": "T", "bodyColumn": "b"}), {"b": "string", "d": column_type})
    assert given.column("bodyColumn") == "b"
    assert (
        check_schema(parse({"topic": "T"}), {"body": "binary", "d": column_type}).column("bodyColumn")
        == "body"
    )


@pytest.mark.parametrize(
    "column_type",
    ["struct<interval:int,variant:string>", "timestamp_ntz", "time(6)", "map<string,array<date>>"],
)
def test_a_whole_row_body_takes_columns_json_can_hold(column_type: str) -> None:
    """A struct field's name is not its type: one called 'interval' is fine."""
    assert check_schema(parse({"topic": "T"}), {"d": column_type}).column("bodyColumn") is None

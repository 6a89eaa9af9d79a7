"""devbroker's SQL92 evaluator against RocketMQ 4.9.4's own ExpressionTest (filter module; its cases
with string properties, the only kind a message has) and the semantics read from its expression
classes: three-valued logic, unknown property -> no match, unconvertible values abort the match."""

from __future__ import annotations

import pytest

from rocksidecar.devbroker.sql92 import FilterParseError, compile_sql92

AND = "a=3 and b<>4 And c>5 AND d<=4"
OR = "a=3 or b<>4 Or c>5 OR d<=4"

# (expression, properties, matches) -- the first block is ExpressionTest.java of rocketmq-all-4.9.4
ROCKETMQ_EXPRESSION_TEST = [
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}, False),  # Java throws
    ("key is not null and key between 0 and 100", {"key": "con"}, False),  # Java throws
    ("a between 0 and 100", {"a": "abc"}, False),  # Java throws
    ("a=b", {"a": "3.14", "b": "3.14"}, True),
    ("a<>b", {"a": "3.14", "b": "3.14"}, False),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True),
    ("a > 3.1E10", {"a": "3.1415E10"}, True),
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "20", "b": "10"}, True),
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {}, False),
    (AND, {"a": "3", "b": "5", "c": "6", "d": "1"}, True),
    (AND, {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
    (OR, {"a": "3"}, True),
    (OR, {"a": "4", "b": "5"}, True),
    (OR, {"a": "4", "b": "4", "c": "6"}, True),
    (OR, {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    (OR, {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    ("a in ('3', '4', '5')", {"a": "3"}, True),
    ("a in ('3', '4', '5')", {"a": "5"}, True),
    ("a in ('3', '4', '5')", {"a": "8"}, False),
    ("a not in ('3', '4', '5')", {"a": "8"}, True),
    ("a not in ('3', '4', '5')", {"a": "4"}, False),
    ("a between 2 and 10", {"a": "2"}, True),
    ("a between 2 and 10", {"a": "10"}, True),
    ("a between 2 and 10", {"a": "3"}, True),
    ("a between 2 and 10", {"a": "1"}, False),
    ("a between 2 and 10", {"a": "11"}, False),
    ("a not between 2 and 10", {"a": "1"}, True),
    ("a not between 2 and 10", {"a": "11"}, True),
    ("a not between 2 and 10", {"a": "3"}, False),
    ("a is null", {"abc": "2"}, True),
    ("a is null", {"a": "2"}, False),
    ("a is not null", {"a": "2"}, True),
    ("a is not null", {"abc": "2"}, False),
]

# Semantics read from ComparisonExpression / LogicExpression / UnaryExpression (4.9.4)
SEMANTICS = [
    ("a > 5", {}, False),  # unknown property: the comparison is unknown, never a match
    ("a <> 5", {}, False),  # NOT unknown is unknown
    ("NOT (a > 5)", {}, False),
    ("'x' <> a", {}, True),  # equality checks the left side for null first: FALSE, negated TRUE
    ("a > 5 OR TAGS = 'T'", {"TAGS": "T"}, True),  # unknown OR true
    ("a > 5 AND TAGS = 'T'", {"TAGS": "T"}, False),
    ("a > 1", {"a": "1.5"}, False),  # a long literal converts the value with Long.valueOf: it throws
    ("a > 1.0", {"a": "1.5"}, True),
    ("a = 10 OR TAGS = 'T'", {"a": "ten", "TAGS": "T"}, False),  # the throw aborts the whole match
    ("a = 'ten' OR a = 10", {"a": "ten"}, True),  # ... unless OR is decided before it
    ("a = -3", {"a": "-3"}, True),
    ("a = +3", {"a": "+3"}, True),  # Long.valueOf accepts a plus sign
    ("a >= 3L", {"a": "3"}, True),
    ("a < .5", {"a": "0.25"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),  # Boolean.valueOf ignores case
    ("a = TRUE", {"a": "yes"}, False),
    ("a", {"a": "true"}, False),  # a bare property is a boolean cast: a string is never a Boolean
    ("TAGS IN ('A', 'B') AND region = 'eu'", {"TAGS": "B", "region": "eu"}, True),
    ("Region = 'eu'", {"region": "eu"}, False),  # names are case-sensitive, keywords are not
    ("a iS NoT nUlL", {"a": ""}, True),
    ("(a = 1 OR b = 2) AND NOT (c = 3)", {"a": "1", "c": "4"}, True),
    ("(a = 1 OR b = 2) AND NOT c = 3", {"a": "1", "c": "4"}, False),  # NOT binds to c: (NOT c) = 3
    ("a = 'it''s'", {"a": "it's"}, True),
]


@pytest.mark.parametrize(("expression", "props", "matches"), ROCKETMQ_EXPRESSION_TEST + SEMANTICS)
def test_matches(expression: str, props: dict[str, str], matches: bool) -> None:
    assert compile_sql92(expression).matches(props) is matches


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "a >",
        "a = NULL",  # use IS NULL
        "'a' > 1",  # strings cannot be ordered
        "a > TRUE",
        "a between 5 and 1",  # Java: left value must be less than or equal to the right one
        "a in (1, 2)",  # IN takes strings
        "5 in ('5')",  # IN needs a property
        "1",  # not a boolean
        "a = 1 b = 2",
        "a = 99999999999999999999",  # beyond a long
        "a = 'open",
        "a # 1",
        "TRUE = 'x'",
    ],
)
def test_parse_errors(expression: str) -> None:
    with pytest.raises(FilterParseError):
        compile_sql92(expression)

"""schemathesis against /openapi.json of a running sidecar: on any generated input, no 5xx, and every
answer matches the documented status codes, content types and response schemas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from bench.sidecar_process import sidecar_process

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def sidecar_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("schemathesis")
    with sidecar_process(None, data, SEND_TIMEOUT_MS="1000", LOG_LEVEL="error") as (url, _):
        yield url


def operations(url: str) -> list[Any]:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


def test_no_5xx_and_no_schema_violations(sidecar_url: str) -> None:
    ops = operations(sidecar_url)
    assert {op.label for op in ops} >= {
        "POST /v1/messages",
        "POST /v1/messages:batch",
        "GET /v1/messages/{id}",
    }
    for op in ops:  # one hypothesis run per operation (the pytest plugin does not support pytest 9 yet)

        @given(case=op.as_strategy())
        @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS)

        run()

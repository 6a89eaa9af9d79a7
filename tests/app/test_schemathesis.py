"""schemathesis against /openapi.json of a running sidecar: on any generated input, no 5xx, and every
answer matches the documented status codes, content types and response schemas."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from bench.common import free_port

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def sidecar_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    http = free_port()
    env = {**os.environ, "ROCKSIDECAR_HTTP_ADDR": f"127.0.0.1:{http}", "ROCKSIDECAR_GRPC_ADDR":
           f"127.0.0.1:{free_port()}", "ROCKSIDECAR_DATA_DIR": str(tmp_path_factory.mktemp("schemathesis")),
           "ROCKSIDECAR_SEND_TIMEOUT_MS": "1000", "ROCKSIDECAR_LOG_LEVEL": "error"}
    env.pop("ROCKSIDECAR_NAMESRV", None)
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--devbroker"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "rocksidecar ready" in line:
                break
        else:
            raise AssertionError("the sidecar did not start")
        yield f"http://127.0.0.1:{http}"
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.fixture(scope="module")
def api_schema(sidecar_url: str) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{sidecar_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_5xx_and_no_schema_violations(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=CHECKS)

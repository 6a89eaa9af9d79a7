"""Fault injection for one broker's sends: extra latency, failing the next N sends or every send with a
chosen response code. Tests set it through the Python API, humans through the admin endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocksidecar.rmq.codes import ResponseCode

DEFAULT_FAIL_CODE = ResponseCode.SYSTEM_ERROR
DEFAULT_FAIL_REMARK = "devbroker: injected failure"


@dataclass(slots=True)
class Faults:
    """``latency_s`` delays every send before it is stored (a send cut off by a dropped connection is
    not stored). Failures answer ``fail_code`` instead of storing: the next ``fail_next`` sends, or
    every send while ``fail_all`` is set."""

    latency_s: float = 0.0
    fail_next: int = 0
    fail_all: bool = False
    fail_code: int = DEFAULT_FAIL_CODE
    fail_remark: str = DEFAULT_FAIL_REMARK

    def fail_next_sends(
        self, n: int, code: int = DEFAULT_FAIL_CODE, remark: str = DEFAULT_FAIL_REMARK
    ) -> None:
        if n < 0:
            raise ValueError(f"cannot fail a negative number of sends ({n})")
        self.fail_next, self.fail_code, self.fail_remark = n, code, remark

    def fail_all_sends(self, code: int = DEFAULT_FAIL_CODE, remark: str = DEFAULT_FAIL_REMARK) -> None:
        self.fail_all, self.fail_code, self.fail_remark = True, code, remark

    def clear(self) -> None:
        self.latency_s, self.fail_next, self.fail_all = 0.0, 0, False
        self.fail_code, self.fail_remark = DEFAULT_FAIL_CODE, DEFAULT_FAIL_REMARK

    def take_failure(self) -> tuple[int, str] | None:
        """The (code, remark) this send must fail with, or None; counts down ``fail_next``."""
        if self.fail_all:
            return self.fail_code, self.fail_remark
        if self.fail_next > 0:
            self.fail_next -= 1
            return self.fail_code, self.fail_remark
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "latency_ms": round(self.latency_s * 1000),
            "fail_next": self.fail_next,
            "fail_all": self.fail_all,
            "fail_code": self.fail_code,
            "fail_remark": self.fail_remark,
        }

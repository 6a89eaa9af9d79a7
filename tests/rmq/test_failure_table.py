"""The README's failure-rule table and the error table (rmq/errors.py) agree, row by row (issue 12)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.errors import for_code

README = Path(__file__).resolve().parents[2] / "README.md"


def _rows() -> list[tuple[set[str], str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Failure rule", 1)[1].split("\n\n", 3)
    table = next(part for part in section if part.lstrip().startswith("| what failed"))
    rows = []
    for line in table.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        codes = {c for c in re.findall(r"`([A-Z_]+)`", cells[0]) if c in ResponseCode.__members__}
        rows.append((codes, cells[1]))
    return rows


def test_the_readme_has_the_four_rows() -> None:
    assert len(_rows()) == 4


@pytest.mark.parametrize(("codes", "within_send"), _rows())
def test_each_row_matches_the_error_table(codes: set[str], within_send: str) -> None:
    assert codes, "every row names at least one response code"
    for name in codes:
        exc = for_code(ResponseCode[name], "remark")
        if within_send.startswith("next attempt"):
            assert exc.retriable and not exc.final and not exc.refresh_route, name
        elif within_send.startswith("route refreshed"):
            assert exc.retriable and exc.refresh_route and not exc.final, name
        elif within_send.startswith("stop: final"):
            assert exc.final and not exc.retriable, name
        else:
            assert within_send == "stop" and not exc.retriable and not exc.final, name


def test_every_code_the_table_of_errors_flags_is_in_the_readme() -> None:
    named = set().union(*(codes for codes, _ in _rows()))
    flagged = {
        c.name for c in ResponseCode if (e := for_code(c, None)).retriable or e.final or e.refresh_route
    }
    assert flagged <= named, flagged - named

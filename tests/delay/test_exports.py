"""The public surface of delay/ is what its __all__ lists, and each name resolves."""

from __future__ import annotations

from rocksidecar import delay


def test_all_names_resolve() -> None:
    assert len(delay.__all__) == len(set(delay.__all__))
    for name in delay.__all__:
        assert getattr(delay, name) is not None
    assert delay.COLUMN_FAMILIES == (
        "delay_due",
        "delay_index",
        "delay_done",
        "delay_done_expiry",
        "delay_meta",
    )
    assert all(cf.startswith("delay_") for cf in delay.COLUMN_FAMILIES)

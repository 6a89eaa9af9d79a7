"""app.bounded.remember: the memo of the OTLP encoder and the CloudEvents header lines keeps at most its
limit of entries, starting again when full."""

from __future__ import annotations

from rocksidecar.app.bounded import remember


def test_a_value_is_kept_and_returned() -> None:
    cache: dict[str, int] = {}
    assert remember(cache, "a", 1, 3) == 1
    assert remember(cache, "b", 2, 3) == 2
    assert cache == {"a": 1, "b": 2}


def test_a_full_cache_starts_again_with_the_new_entry() -> None:
    cache: dict[int, str] = {}
    for i in range(3):
        remember(cache, i, str(i), 3)
    assert len(cache) == 3
    assert remember(cache, 3, "3", 3) == "3"
    assert cache == {3: "3"}  # the old entries gone, the new one kept
    for i in range(4, 20):
        remember(cache, i, str(i), 3)
        assert len(cache) <= 3

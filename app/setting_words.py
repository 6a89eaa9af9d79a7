"""How a setting's integer, number and true/false values are read: one parser for the sidecar's
settings (app.config) and its subscriptions' (app.subscriptions.spec), each raising its own error class."""

from __future__ import annotations

from typing import Any

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def parse_bool(raw: Any, where: str, error: type[ValueError], *, empty: bool | None = None) -> bool:
    """``raw`` (a YAML bool or a word) as true or false; ``empty``: what an empty value means (None:
    it is invalid). Anything else raises ``error`` naming ``where``."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    if text == "" and empty is not None:
        return empty
    raise error(f"{where}: expected true or false, got {raw!r}")


def parse_int(raw: Any, where: str, error: type[ValueError], lo: int, hi: int | None = None) -> int:
    """``raw`` as an integer within ``lo`` .. ``hi`` (no upper bound when None); a YAML bool is not
    one. Anything else raises ``error`` naming ``where``."""
    try:
        if isinstance(raw, bool):
            raise ValueError(raw)
        value = int(str(raw).strip())
    except ValueError:
        raise error(f"{where}: expected an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise error(f"{where}: must be {bound}, got {value}")
    return value


def parse_float(raw: Any, where: str, error: type[ValueError], lo: float, hi: float) -> float:
    """``raw`` as a number within ``lo`` .. ``hi`` (nan never is). Anything else raises ``error`` naming
    ``where``."""
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise error(f"{where}: expected a number, got {raw!r}") from None
    if not lo <= value <= hi:  # nan too: it compares false
        raise error(f"{where}: must be between {lo} and {hi}, got {value}")
    return value

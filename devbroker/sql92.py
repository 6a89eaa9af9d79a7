"""RocketMQ's SQL92 message filter (rocketmq-filter 4.9.4: SelectorParser.jj and the expression classes),
as the broker evaluates it against a message's properties (TAGS, KEYS and the user's).

Semantics kept from Java, quirks included, because a consumer must see on devbroker exactly what it
would see on a real broker:
- property values are strings; comparing one with a number converts it (Long.valueOf / Double.valueOf
  by the number's type); a value that does not convert aborts the whole evaluation: no match;
- a missing property makes its comparison unknown (None), AND/OR/NOT are three-valued, and only a
  final TRUE matches;
- ``'x' <> a`` with ``a`` missing is TRUE (equality tests the left side for null first);
- ``>``/``<`` between two strings compare them as doubles, else abort; IN lists hold strings only.
Parse errors raise FilterParseError, which the broker answers with SUBSCRIPTION_PARSE_FAILED.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Value = str | int | float | bool | None
Props = Mapping[str, str]


class FilterParseError(ValueError):
    """The expression is not valid SQL92 as RocketMQ reads it."""


class EvalAbort(Exception):
    """Java's RuntimeException inside evaluate: the message does not match."""


_NEGATABLE = ("BETWEEN", "IN")
_KEYWORDS = {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"}
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<float>(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+))
     |(?P<dec>(?:0|[1-9]\d*)[lL]?)
     |(?P<str>'(?:''|[^'])*')
     |(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
     |(?P<op><>|>=|<=|[=<>(),+-])
    )""",
    re.VERBOSE,
)
_JAVA_LONG = re.compile(r"[+-]?\d+")
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # float, dec, str, id, kw, op, end
    text: str


def _tokenize(sql: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(sql):
        if not sql[pos:].strip():
            break
        m = _TOKEN.match(sql, pos)
        if m is None or m.end() == pos:
            raise FilterParseError(f"unexpected character {sql[pos:].lstrip()[:1]!r} at {pos}")
        kind = m.lastgroup or "op"
        text = m.group(kind)
        if kind == "id" and text.upper() in _KEYWORDS:
            kind, text = "kw", text.upper()
        out.append(_Tok(kind, text))
        pos = m.end()
    out.append(_Tok("end", ""))
    return out


# Expression nodes: a callable evaluating to a value; the class says what the parser may combine.
@dataclass(frozen=True, slots=True)
class _Expr:
    fn: Callable[[Props], Value]
    kind: str  # "const", "bool_const", "prop", "bool", "value"
    const: Value = None

    def __call__(self, props: Props) -> Value:
        return self.fn(props)


def _const(value: Value) -> _Expr:
    return _Expr(lambda _p: value, "bool_const" if isinstance(value, bool) else "const", value)


def _java_number(text: str, like: int | float) -> int | float:
    """Long.valueOf / Double.valueOf of a property value, by the type of the number it meets."""
    if isinstance(like, int):
        if not _JAVA_LONG.fullmatch(text):
            raise EvalAbort(f"{text!r} is not a long")
        value = int(text)
        if not _LONG_MIN <= value <= _LONG_MAX:
            raise EvalAbort(f"{text!r} overflows a long")
        return value
    stripped = text.strip()
    if not _JAVA_DOUBLE.fullmatch(stripped):
        raise EvalAbort(f"{text!r} is not a double")
    return float(stripped.rstrip("fFdD").replace("Infinity", "inf"))


def _compare(lv: Value, rv: Value) -> int:
    """ComparisonExpression.__compare with convertStringExpressions on (the parser always sets it)."""
    if type(lv) is not type(rv):
        if isinstance(lv, bool):
            if not isinstance(rv, str):
                return -1
            # Java casts the Boolean itself to String here: a ClassCastException, the message is skipped
            raise EvalAbort("a boolean compared with a string")
        if isinstance(lv, str):
            if isinstance(rv, bool):
                lv = lv.lower() == "true"
            elif isinstance(rv, int | float):
                lv = _java_number(lv, rv)
            else:
                return -1
        elif isinstance(lv, int | float):
            if isinstance(rv, str):
                rv = _java_number(rv, lv)
            elif isinstance(rv, bool):
                return -1
        else:
            return -1
    assert lv is not None and rv is not None
    return (lv > rv) - (lv < rv)  # type: ignore[operator]


def _ordering(left: _Expr, right: _Expr, test: Callable[[int], bool]) -> _Expr:
    for side in (left, right):
        if side.kind in ("const", "bool_const") and (
            isinstance(side.const, bool) or not isinstance(side.const, int | float)
        ):
            raise FilterParseError(f"value {side.const!r} cannot be compared")
        if side.kind in ("bool", "bool_const"):
            raise FilterParseError("a boolean expression cannot be compared")

    def ev(p: Props) -> Value:
        lv = left(p)
        rv = None if lv is None else right(p)  # unknown on the left: the right is not evaluated
        if lv is None or rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            try:
                return test(_compare(_java_number(lv, 0.0), _java_number(rv, 0.0)))
            except EvalAbort:
                raise EvalAbort("strings compared with an ordering operator") from None
        return test(_compare(lv, rv))

    return _Expr(ev, "bool")


def _equal_raw(left: _Expr, right: _Expr) -> _Expr:
    def ev(p: Props) -> Value:
        lv, rv = left(p), right(p)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None or (type(lv) is type(rv) and lv == rv):
            return True
        return _compare(lv, rv) == 0

    return _Expr(ev, "bool")


def _equal(left: _Expr, right: _Expr) -> _Expr:
    for side in (left, right):
        if side.kind == "const" and side.const is None:
            raise FilterParseError("NULL cannot be compared; use IS NULL")
    if left.kind == "bool_const" and right.kind == "const":
        raise FilterParseError(f"{left.const!r} cannot be compared with {right.const!r}")
    return _equal_raw(left, right)


def _not(inner: _Expr) -> _Expr:
    def ev(p: Props) -> Value:
        v = inner(p)
        return None if v is None else not v

    return _Expr(ev, "bool")


def _logic(left: _Expr, right: _Expr, decisive: bool) -> _Expr:
    """AND (``decisive`` False) and OR (True) as LogicExpression: either side equal to ``decisive``
    decides, evaluated left first; else unknown if a side is unknown."""

    def ev(p: Props) -> Value:
        lv = left(p)
        if lv is decisive:
            return decisive
        rv = right(p)
        if rv is decisive:
            return decisive
        return None if lv is None or rv is None else not decisive

    return _Expr(ev, "bool")


def _and(left: _Expr, right: _Expr) -> _Expr:
    return _logic(left, right, decisive=False)


def _or(left: _Expr, right: _Expr) -> _Expr:
    return _logic(left, right, decisive=True)


def _as_bool(e: _Expr) -> _Expr:
    """asBooleanExpression: a property is cast (a string is never a Boolean: FALSE); a value is refused."""
    if e.kind in ("bool", "bool_const"):
        return e
    if e.kind == "prop":

        def ev(p: Props) -> Value:
            v = e(p)
            return None if v is None else (v if isinstance(v, bool) else False)

        return _Expr(ev, "bool")
    raise FilterParseError("expression will not result in a boolean value")


class _Parser:
    def __init__(self, sql: str) -> None:
        self.toks = _tokenize(sql)
        self.i = 0

    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def take(self, kind: str, text: str | None = None) -> _Tok:
        t = self.peek()
        if t.kind != kind or (text is not None and t.text != text):
            want = text or kind
            raise FilterParseError(f"expected {want}, found {t.text or 'the end'!r}")
        self.i += 1
        return t

    def at(self, kind: str, text: str) -> bool:
        t = self.peek()
        return t.kind == kind and t.text == text

    def selector(self) -> _Expr:
        e = _as_bool(self.or_expr())
        if self.peek().kind != "end":
            raise FilterParseError(f"unexpected {self.peek().text!r}")
        return e

    def or_expr(self) -> _Expr:
        return self._logical("OR", _or, self.and_expr)

    def and_expr(self) -> _Expr:
        return self._logical("AND", _and, self.equality)

    def _logical(
        self, keyword: str, combine: Callable[[_Expr, _Expr], _Expr], operand: Callable[[], _Expr]
    ) -> _Expr:
        """A left-associative chain of ``operand``s joined by ``keyword`` (AND binds tighter than OR)."""
        left = operand()
        while self.at("kw", keyword):
            self.i += 1
            left = combine(_as_bool(left), _as_bool(operand()))
        return left

    def equality(self) -> _Expr:
        left = self.comparison()
        while True:
            if self.at("op", "="):
                self.i += 1
                left = _equal(left, self.comparison())
            elif self.at("op", "<>"):
                self.i += 1
                left = _not(_equal(left, self.comparison()))
            elif self.at("kw", "IS"):
                self.i += 1
                negate = self.at("kw", "NOT")
                if negate:
                    self.i += 1
                self.take("kw", "NULL")
                is_null = _equal_raw(left, _const(None))
                left = _not(is_null) if negate else is_null
            else:
                return left

    def comparison(self) -> _Expr:
        left = self.unary()
        ops: dict[str, Callable[[int], bool]] = {
            ">": lambda c: c > 0,
            ">=": lambda c: c >= 0,
            "<": lambda c: c < 0,
            "<=": lambda c: c <= 0,
        }
        while True:
            t = self.peek()
            if t.kind == "op" and t.text in ops:
                self.i += 1
                left = _ordering(left, self.unary(), ops[t.text])
            elif self.at("kw", "BETWEEN"):
                self.i += 1
                left = self.between(left, negate=False)
            elif self.at("kw", "IN"):
                self.i += 1
                left = self.in_list(left, negate=False)
            elif self.at("kw", "NOT") and self.peek(1).kind == "kw" and self.peek(1).text in _NEGATABLE:
                self.i += 2
                if self.toks[self.i - 1].text == "BETWEEN":
                    left = self.between(left, negate=True)
                else:
                    left = self.in_list(left, negate=True)
            else:
                return left

    def between(self, value: _Expr, *, negate: bool) -> _Expr:
        low = self.unary()
        self.take("kw", "AND")
        high = self.unary()
        if not negate and low.kind == "const" and high.kind == "const":
            if low.const is None or high.const is None:
                raise FilterParseError("illegal values of between, values can not be null")
            try:
                if _compare(high.const, low.const) < 0:
                    raise FilterParseError(
                        f"illegal values of between, left value({low.const}) must be less than or "
                        f"equal to right value({high.const})"
                    )
            except EvalAbort as exc:
                raise FilterParseError(str(exc)) from None
        ge = _ordering(value, low, lambda c: c >= 0)
        le = _ordering(value, high, lambda c: c <= 0)
        if negate:  # NOT BETWEEN is value < low OR value > high
            return _or(_ordering(value, low, lambda c: c < 0), _ordering(value, high, lambda c: c > 0))
        return _and(ge, le)

    def in_list(self, left: _Expr, *, negate: bool) -> _Expr:
        if left.kind != "prop":
            raise FilterParseError("expected a property for an IN expression")
        self.take("op", "(")
        items = {_unquote(self.take("str").text)}
        while self.at("op", ","):
            self.i += 1
            items.add(_unquote(self.take("str").text))
        self.take("op", ")")

        def ev(p: Props) -> Value:
            v = left(p)
            if not isinstance(v, str):
                return None
            return (v in items) != negate

        return _Expr(ev, "bool")

    def unary(self) -> _Expr:
        t = self.peek()
        if t.kind == "op" and t.text == "+":
            self.i += 1
            return self.unary()
        if t.kind == "op" and t.text == "-":
            self.i += 1
            return _negate(self.unary())
        if t.kind == "kw" and t.text == "NOT":
            self.i += 1
            return _not(_as_bool(self.unary()))
        return self.primary()

    def primary(self) -> _Expr:
        t = self.peek()
        self.i += 1
        if t.kind == "str":
            return _const(_unquote(t.text))
        if t.kind == "dec":
            value = int(t.text.rstrip("lL"))
            if value > _LONG_MAX:
                raise FilterParseError(f"{t.text} is out of range of a long")
            return _const(value)
        if t.kind == "float":
            return _const(float(t.text))
        if t.kind == "kw" and t.text in ("TRUE", "FALSE"):
            return _const(t.text == "TRUE")
        if t.kind == "kw" and t.text == "NULL":
            return _const(None)
        if t.kind == "id":
            name = t.text
            return _Expr(lambda p: p.get(name), "prop")
        if t.kind == "op" and t.text == "(":
            e = self.or_expr()
            self.take("op", ")")
            return e
        self.i -= 1
        raise FilterParseError(f"unexpected {t.text or 'end of expression'!r}")


def _unquote(literal: str) -> str:
    return literal[1:-1].replace("''", "'")


def _negate(e: _Expr) -> _Expr:
    if e.kind == "const" and isinstance(e.const, int | float) and not isinstance(e.const, bool):
        return _const(-e.const)

    def ev(p: Props) -> Value:
        v = e(p)
        return -v if isinstance(v, int | float) and not isinstance(v, bool) else None

    return _Expr(ev, "value")


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A compiled expression; ``matches(properties)`` is the broker's isMatchedByCommitLog."""

    expression: str
    _root: _Expr

    def matches(self, properties: Props) -> bool:
        try:
            return self._root(properties) is True
        except EvalAbort:
            return False


def compile_sql92(expression: str) -> SqlFilter:
    """Raises FilterParseError."""
    if not expression or not expression.strip():
        raise FilterParseError("the SQL92 expression is empty")
    return SqlFilter(expression, _Parser(expression).selector())

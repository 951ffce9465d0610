"""The sqlglot side of filter compilation: Lance's SQL dialect, parsing, AST shape tests.

Also holds the tables mapping sqlglot node classes to the pyarrow kernels that implement
them. Nothing here looks at a schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pyarrow.compute as pc
import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError

from alance.errors import InvalidInputError


class LanceSql(Dialect):
    """sqlglot dialect matching Lance's filter grammar quirks."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS: ClassVar = ["`"]
        QUOTES: ClassVar = ["'", '"']
        HEX_STRINGS: ClassVar = [("X'", "'"), ("x'", "'")]  # binary literals: X'0aff'
        STRING_ESCAPES: ClassVar = ["'"]  # backslashes stay in the literal (LIKE uses them)


COMPARISONS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.EQ: pc.equal,
    exp.NEQ: pc.not_equal,
    exp.LT: pc.less,
    exp.LTE: pc.less_equal,
    exp.GT: pc.greater,
    exp.GTE: pc.greater_equal,
}
ARITHMETIC: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.Add: pc.add,
    exp.Sub: pc.subtract,
    exp.Mul: pc.multiply,
    exp.Div: pc.divide,  # integer inputs give truncating integer division
    exp.Mod: pc.remainder,  # sign of the dividend, like Rust's %
}
UNARY_FUNCS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.Lower: pc.utf8_lower,
    exp.Upper: pc.utf8_upper,
    exp.Abs: pc.abs,
}
PATTERN_FUNCS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.StartsWith: pc.starts_with,
    exp.EndsWith: pc.ends_with,
    exp.RegexpLike: pc.match_substring_regex,
    exp.Contains: pc.match_substring,
}


def parse_filter(sql: str) -> exp.Expression:
    """Parse one filter expression, rejecting empty text and trailing statements."""
    if not isinstance(sql, str):
        raise InvalidInputError(f"a filter must be a string, got {type(sql).__name__}")
    if not sql.strip():
        raise InvalidInputError("the filter is empty")
    try:
        parsed = sqlglot.parse(sql, dialect=LanceSql)
    except SqlglotError as exc:
        raise InvalidInputError(f"cannot parse filter {sql!r}: {exc}") from exc
    if len(parsed) != 1 or parsed[0] is None:
        raise InvalidInputError(f"a filter must be a single expression: {sql!r}")
    node = parsed[0]
    assert isinstance(node, exp.Expression)
    return node


def unparen(node: exp.Expression) -> exp.Expression:
    """Strip any number of enclosing parentheses."""
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def is_sql_literal(node: exp.Expression) -> bool:
    """True for a plain SQL literal: a number (possibly negated), string, boolean or NULL."""
    node = unparen(node)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return not node.this.is_string
    return isinstance(node, (exp.Literal, exp.Boolean, exp.Null, exp.HexString))


def is_column_ref(node: exp.Expression) -> bool:
    """True for a column, or a struct field of one (``a.b`` or ``a['b']``)."""
    node = unparen(node)
    if isinstance(node, exp.Column):
        return True
    if isinstance(node, exp.Dot):
        return is_column_ref(node.this)
    if isinstance(node, exp.Bracket):
        keys = node.expressions
        return (
            len(keys) == 1
            and isinstance(keys[0], exp.Literal)
            and keys[0].is_string
            and (is_column_ref(node.this))
        )
    return False

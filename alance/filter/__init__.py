"""SQL filter strings (as pylance accepts them) compiled to ``pyarrow.compute.Expression``.

The text is parsed with sqlglot using a small dialect that mirrors Lance's: only backticks
quote identifiers, double-quoted tokens are *string literals*, and ``==`` means ``=``.
The resulting tree is compiled into a pyarrow expression with SQL three-valued logic, so
rows whose predicate is NULL are dropped by ``Table.filter``.

Typing follows Lance: when a column (or nested struct field) is compared directly with a
literal, at the top level of the filter or under AND/OR, the literal is converted to the
column's type and a literal that does not fit (``int_col > 1.5``, ``uint8_col = 300``,
``date_col > '2024-01-01'``) is an error rather than a silent cast. Elsewhere operands meet
with Arrow's usual numeric promotion. Integer ``/`` truncates and ``%`` keeps the sign of
the dividend, as in Lance; mixed-width integer arithmetic is widened first. Unquoted
top-level column names fall back to a case-insensitive match; struct field names and
backquoted names must match exactly.

Deliberate differences from pylance: trailing text after the expression (``i = 1 x``,
``a; b``) is an error instead of being ignored; LIKE/starts_with/... need a literal pattern;
TRY_CAST, list indexing and array functions are not supported; unary ``+`` is accepted.

Nothing here touches data: compilation only needs the schema.

Layout: :mod:`._sql` (dialect, parsing, sqlglot node tables), :mod:`._values` (typed
nodes, literal coercion, numeric widening) and :mod:`._compiler` (the tree walker); this
module holds the public entry points.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from alance.errors import InvalidInputError
from alance.filter._bounds import (
    UNKNOWN,
    AllOf,
    AnyOf,
    BoundPredicate,
    RangeTest,
    Unknown,
    bound_predicate,
    tested_columns,
)
from alance.filter._compiler import Compiler
from alance.filter._sql import is_sql_literal, parse_filter

__all__ = [
    "ROW_ADDRESS_COLUMNS",
    "UNKNOWN",
    "AllOf",
    "AnyOf",
    "BoundPredicate",
    "RangeTest",
    "Unknown",
    "bound_predicate",
    "tested_columns",
    "as_expression",
    "compile_filter",
    "compile_expression",
    "compile_filter_and_columns",
    "filter_columns",
]

#: Virtual columns pylance lets filters use although they are not in the schema (uint64).
ROW_ADDRESS_COLUMNS: tuple[str, ...] = ("_rowid", "_rowaddr")


def _compile(
    sql: str, schema: pa.Schema, extra_columns: Iterable[str]
) -> tuple[pc.Expression, Compiler]:
    compiler = Compiler(schema, extra_columns)
    node = compiler.compile(parse_filter(sql), resolve=True)
    result_type = compiler.infer(node.expr)
    if not pa.types.is_boolean(result_type):
        raise InvalidInputError(
            f"the filter {sql!r} is not a boolean expression (it is {result_type})"
        )
    return node.expr, compiler


def compile_filter(
    sql: str, schema: pa.Schema, extra_columns: Sequence[str] = ROW_ADDRESS_COLUMNS
) -> pc.Expression:
    """Compile a SQL filter string into a pyarrow expression over ``schema``.

    ``extra_columns`` names virtual ``uint64`` columns the caller will supply (by default
    ``_rowid`` and ``_rowaddr``). Raises :class:`InvalidInputError` for syntax errors,
    unknown columns, literals that do not fit the column they are compared with,
    unsupported constructs, and filters that are not boolean.
    """
    return _compile(sql, schema, extra_columns)[0]


def filter_columns(
    sql: str, schema: pa.Schema, extra_columns: Sequence[str] = ROW_ADDRESS_COLUMNS
) -> list[str]:
    """Return the top-level column names a filter reads, in schema order.

    Virtual columns from ``extra_columns`` come last. Raises like :func:`compile_filter`.
    """
    compiler = _compile(sql, schema, extra_columns)[1]
    return [name for name in compiler.schema.names if name in compiler.columns]


def compile_filter_and_columns(
    sql: str, schema: pa.Schema, extra_columns: Sequence[str] = ROW_ADDRESS_COLUMNS
) -> tuple[pc.Expression, list[str]]:
    """:func:`compile_filter` and :func:`filter_columns` in one pass (parses once).

    Compiled filters are remembered (a service repeats the same filters, and parsing costs
    more than a point read); expressions are immutable, so sharing them is safe."""
    expr, names = _compiled(sql, schema, tuple(extra_columns))
    return expr, list(names)


@functools.lru_cache(maxsize=512)
def _compiled(sql: str, schema: pa.Schema, extra_columns: tuple[str, ...],
              ) -> tuple[pc.Expression, tuple[str, ...]]:
    expr, compiler = _compile(sql, schema, extra_columns)
    return expr, tuple(name for name in compiler.schema.names if name in compiler.columns)


def compile_expression(
    sql: str,
    schema: pa.Schema,
    target_type: pa.DataType | None = None,
    extra_columns: Sequence[str] = ROW_ADDRESS_COLUMNS,
) -> tuple[pc.Expression, pa.DataType, list[str]]:
    """Compile a SQL *value* expression (any type), e.g. the new value in an UPDATE.

    Returns the expression, its result type and the top-level columns it reads. When the
    text is a bare literal and ``target_type`` is given, the literal is converted to that
    type (:class:`InvalidInputError` if it does not fit, e.g. ``'abc'`` for an integer).
    """
    compiler = Compiler(schema, extra_columns)
    tree = parse_filter(sql)
    coerce = target_type if is_sql_literal(tree) else None
    node = compiler.compile(tree, resolve=True, coerce_to=coerce)
    columns = [name for name in compiler.schema.names if name in compiler.columns]
    return node.expr, compiler.infer(node.expr), columns


def as_expression(
    filter: str | pc.Expression | None,
    schema: pa.Schema,
    extra_columns: Sequence[str] = ROW_ADDRESS_COLUMNS,
) -> pc.Expression | None:
    """Accept a filter as SQL text or a ready pyarrow expression (passed through).

    ``None`` means "no filter" and is returned unchanged.
    """
    if filter is None or isinstance(filter, pc.Expression):
        return filter
    if isinstance(filter, str):
        return compile_filter(filter, schema, extra_columns)
    raise InvalidInputError(
        "a filter must be a SQL string or a pyarrow.compute.Expression, "
        f"got {type(filter).__name__}"
    )

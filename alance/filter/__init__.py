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
TRY_CAST and array functions other than ``array_element`` are not supported, and list
indices must be constant positive integers (``items[1]``); unary ``+`` is accepted.

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
from sqlglot import exp

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
from alance.filter._sql import is_column_ref, is_sql_literal, parse_filter, quoted_sql, unparen

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
    "column_path",
    "expression_nullable",
    "filter_columns",
]

#: Virtual columns pylance lets filters use although they are not in the schema (uint64).
ROW_ADDRESS_COLUMNS: tuple[str, ...] = ("_rowid", "_rowaddr")


def _compile(
    sql: str, schema: pa.Schema, extra_columns: Iterable[str]
) -> tuple[pc.Expression, Compiler]:
    try:
        compiler = Compiler(schema, extra_columns)
        node = compiler.compile(parse_filter(sql, literal_lists=True), resolve=True)
        result_type = compiler.infer(node.expr)
        if not pa.types.is_boolean(result_type):
            raise InvalidInputError(
                f"the filter {quoted_sql(sql)} does not return a boolean (it returns "
                f"{result_type})")
    except InvalidInputError as exc:
        if str(exc).startswith(_USER_INPUT):
            raise
        # pylance's wording for every filter it refuses (callers match on it).
        raise type(exc)(f"{_USER_INPUT}{exc}") from exc
    return node.expr, compiler


_USER_INPUT = "Invalid user input: "


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
    more than a point read); expressions are immutable, so sharing them is safe. Only a
    few long texts (huge IN lists: megabytes each) are remembered."""
    long = isinstance(sql, str) and len(sql) > _LONG_SQL_CHARS
    cache = _compiled_long if long else _compiled
    expr, names = cache(sql, schema, tuple(extra_columns))
    return expr, list(names)


#: Filters longer than this are remembered in a small cache of their own.
_LONG_SQL_CHARS = 16 * 1024


def _compile_once(sql: str, schema: pa.Schema, extra_columns: tuple[str, ...],
                  ) -> tuple[pc.Expression, tuple[str, ...]]:
    expr, compiler = _compile(sql, schema, extra_columns)
    return expr, tuple(name for name in compiler.schema.names if name in compiler.columns)


_compiled = functools.lru_cache(maxsize=512)(_compile_once)
_compiled_long = functools.lru_cache(maxsize=4)(_compile_once)


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
    tree = parse_filter(sql, literal_lists=True)
    coerce = target_type if is_sql_literal(tree) else None
    node = compiler.compile(tree, resolve=True, coerce_to=coerce)
    columns = [name for name in compiler.schema.names if name in compiler.columns]
    return node.expr, compiler.infer(node.expr), columns


def column_path(
    sql: str, schema: pa.Schema, extra_columns: Sequence[str] = ROW_ADDRESS_COLUMNS
) -> list[str] | None:
    """``[column, child, ...]`` when ``sql`` is just a reference to a column or to a struct
    field of one (``a``, ``s.x``, ``s['x']``), resolved against ``schema`` as filters resolve
    names; ``None`` for any other expression. Unknown names raise :class:`InvalidInputError`.
    """
    tree = parse_filter(sql)
    if not is_column_ref(tree):
        return None
    return Compiler(schema, extra_columns).path(tree)


def expression_nullable(
    sql: str, schema: pa.Schema, extra_columns: Sequence[str] = ROW_ADDRESS_COLUMNS
) -> bool:
    """Whether the value of ``sql`` may be NULL, judged from the schema as Lance (DataFusion)
    judges it: a column reference is nullable when the column or a struct on its path is;
    a non-NULL literal is not; ``IS [NOT] NULL`` never is; CAST and operators are nullable
    when an operand is; ``coalesce`` when every argument is; other functions and list
    indexing always are. ``extra_columns`` not in ``schema`` count as nullable.
    """
    compiler = Compiler(schema, extra_columns)

    def nullable(node: exp.Expression) -> bool:
        node = unparen(node)
        if is_column_ref(node):
            path = compiler.path(node)
            field = compiler.schema.field(path[0])
            maybe = field.nullable
            for name in path[1:]:
                field = field.type.field(name)
                maybe = maybe or field.nullable
            return maybe
        if isinstance(node, exp.Null):
            return True
        if is_sql_literal(node):
            return False
        if isinstance(node, exp.Is):
            return False
        if isinstance(node, exp.Coalesce):
            return all(nullable(arg) for arg in node.iter_expressions())
        if isinstance(node, exp.Cast):
            return nullable(node.this)
        if isinstance(node, (exp.Func, exp.Bracket, exp.Dot)):
            return True
        return any(nullable(child) for child in node.iter_expressions())

    return nullable(parse_filter(sql))


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

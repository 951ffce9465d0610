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
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError

from alance.errors import InvalidInputError

__all__ = [
    "ROW_ADDRESS_COLUMNS",
    "as_expression",
    "compile_filter",
    "compile_filter_and_columns",
    "filter_columns",
]

#: Virtual columns pylance lets filters use although they are not in the schema (uint64).
ROW_ADDRESS_COLUMNS: tuple[str, ...] = ("_rowid", "_rowaddr")


class _LanceSql(Dialect):
    """sqlglot dialect matching Lance's filter grammar quirks."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS: ClassVar = ["`"]
        QUOTES: ClassVar = ["'", '"']
        STRING_ESCAPES: ClassVar = ["'"]  # backslashes stay in the literal (LIKE uses them)


_NOTHING = object()


@dataclass(frozen=True)
class _Node:
    """A compiled sub-expression with its Arrow type."""

    expr: pc.Expression
    type: pa.DataType
    literal: object = _NOTHING  # the Python value, for plain SQL literals only


_INT_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1),
    pa.uint64(): (0, 2**64 - 1),
}

_SIMPLE_TYPES: dict[Any, pa.DataType] = {
    exp.DataType.Type.TEXT: pa.string(),
    exp.DataType.Type.BINARY: pa.binary(),
    exp.DataType.Type.VARBINARY: pa.binary(),
    exp.DataType.Type.FLOAT: pa.float32(),
    exp.DataType.Type.DOUBLE: pa.float64(),
    exp.DataType.Type.BOOLEAN: pa.bool_(),
    exp.DataType.Type.TINYINT: pa.int8(),
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.UTINYINT: pa.uint8(),
    exp.DataType.Type.USMALLINT: pa.uint16(),
    exp.DataType.Type.UINT: pa.uint32(),
    exp.DataType.Type.UBIGINT: pa.uint64(),
    exp.DataType.Type.DATE: pa.date32(),
}
_TIME_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}

_COMPARISONS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.EQ: pc.equal,
    exp.NEQ: pc.not_equal,
    exp.LT: pc.less,
    exp.LTE: pc.less_equal,
    exp.GT: pc.greater,
    exp.GTE: pc.greater_equal,
}
_ARITHMETIC: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.Add: pc.add,
    exp.Sub: pc.subtract,
    exp.Mul: pc.multiply,
    exp.Div: pc.divide,  # integer inputs give truncating integer division
    exp.Mod: pc.remainder,  # sign of the dividend, like Rust's %
}
_UNARY_FUNCS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.Lower: pc.utf8_lower,
    exp.Upper: pc.utf8_upper,
    exp.Abs: pc.abs,
}
_PATTERN_FUNCS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.StartsWith: pc.starts_with,
    exp.EndsWith: pc.ends_with,
    exp.RegexpLike: pc.match_substring_regex,
    exp.Contains: pc.match_substring,
}


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _is_sql_literal(node: exp.Expression) -> bool:
    node = _unparen(node)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return not node.this.is_string
    return isinstance(node, (exp.Literal, exp.Boolean, exp.Null))


def _is_column_ref(node: exp.Expression) -> bool:
    node = _unparen(node)
    if isinstance(node, exp.Column):
        return True
    if isinstance(node, exp.Dot):
        return _is_column_ref(node.this)
    if isinstance(node, exp.Bracket):
        keys = node.expressions
        return (
            len(keys) == 1
            and isinstance(keys[0], exp.Literal)
            and keys[0].is_string
            and (_is_column_ref(node.this))
        )
    return False


def _coerce_value(value: object, value_type: pa.DataType, target: pa.DataType) -> pa.Scalar | None:
    """Convert a literal to ``target`` the way Lance does, or None if it does not fit."""
    if pa.types.is_dictionary(target):  # compare with the dictionary's values
        target = target.value_type
    if value is None:
        return pa.scalar(None, target)
    if pa.types.is_integer(value_type):
        assert isinstance(value, int)
        if target in _INT_RANGES:
            low, high = _INT_RANGES[target]
            return pa.scalar(value, target) if low <= value <= high else None
        if pa.types.is_float32(target) or pa.types.is_float64(target):
            return pa.scalar(float(value), target)
        if pa.types.is_decimal(target):
            try:
                return pa.scalar(decimal.Decimal(value), target)
            except (pa.ArrowInvalid, ValueError):
                return None
        return None
    if pa.types.is_floating(value_type):
        if pa.types.is_float32(target) or pa.types.is_float64(target):
            return pa.scalar(value, target)
        return None
    if pa.types.is_string(value_type):
        if pa.types.is_string(target) or pa.types.is_large_string(target):
            return pa.scalar(value, target)
        return None
    if pa.types.is_boolean(value_type) and pa.types.is_boolean(target):
        return pa.scalar(value, target)
    return None


def _plain(node: _Node) -> pc.Expression:
    """The node's expression with dictionary encoding removed (string kernels need it)."""
    if pa.types.is_dictionary(node.type):
        return node.expr.cast(node.type.value_type)
    return node.expr


def _common_numeric(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type two different numeric operands are widened to for arithmetic, if any."""
    if a == b or not all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in (a, b)):
        return None
    if pa.types.is_floating(a) or pa.types.is_floating(b):
        return pa.float64()
    if pa.types.is_signed_integer(a) == pa.types.is_signed_integer(b):
        return a if a.bit_width >= b.bit_width else b
    signed, unsigned = (a, b) if pa.types.is_signed_integer(a) else (b, a)
    if unsigned.bit_width < signed.bit_width:
        return signed
    return (
        pa.int64()
        if unsigned.bit_width >= 32
        else pa.int32()
        if unsigned.bit_width == 16
        else pa.int16()
    )


def _needs_cast_to(source: pa.DataType, other: pa.DataType) -> bool:
    if pa.types.is_null(source):
        return not pa.types.is_null(other)
    if pa.types.is_timestamp(other) and other.tz is not None:
        return pa.types.is_date(source) or (pa.types.is_timestamp(source) and source.tz is None)
    return False


def _number(text: str, negative: bool) -> _Node:
    text = f"-{text}" if negative else text
    try:
        value: int | float = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise InvalidInputError(f"{text!r} is not a supported number") from None
        return _literal(value, pa.float64())
    if -(2**63) <= value < 2**63:
        return _literal(value, pa.int64())
    if 0 <= value < 2**64:
        return _literal(value, pa.uint64())
    return _literal(float(value), pa.float64())


def _literal(value: object, type_: pa.DataType) -> _Node:
    return _Node(pc.scalar(pa.scalar(value, type_)), type_, value)


def _sql_type(node: exp.DataType) -> pa.DataType:
    kind = node.this
    params = [int(p.this.this) for p in node.expressions if isinstance(p, exp.DataTypeParam)]
    if kind in _SIMPLE_TYPES and not params:
        return _SIMPLE_TYPES[kind]
    if kind in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME):
        precision = params[0] if params else 6
        if precision not in _TIME_UNITS or len(params) > 1:
            raise InvalidInputError(f"unsupported timestamp precision {params}")
        return pa.timestamp(_TIME_UNITS[precision])
    if kind == exp.DataType.Type.DECIMAL and len(params) == 2:
        return pa.decimal128(params[0], params[1])
    raise InvalidInputError(
        f"unsupported type in CAST: {node.sql()} (use int/bigint/tinyint/smallint [unsigned], "
        "float, double, string, binary, boolean, date, timestamp(p), decimal(p, s))"
    )


def _string_to_timestamp(text: str, target: pa.DataType) -> pa.Scalar:
    """Parse a timestamp literal; values with a zone offset are converted to UTC."""
    candidates = [
        target,
        pa.timestamp(target.unit, "UTC"),
        pa.timestamp("ns"),
        pa.timestamp("ns", "UTC"),
    ]
    for candidate in candidates:
        try:
            parsed = pa.scalar(text).cast(candidate)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        opts = pc.CastOptions(target, allow_time_truncate=True)
        return pc.cast(parsed.cast(pa.timestamp(candidate.unit)), options=opts)
    raise InvalidInputError(f"cannot parse {text!r} as a timestamp")


class _Compiler:
    def __init__(self, schema: pa.Schema, extra_columns: Iterable[str]) -> None:
        fields = list(schema)
        names = {f.name for f in fields}
        fields += [pa.field(name, pa.uint64()) for name in extra_columns if name not in names]
        self.schema = pa.schema(fields)
        self.columns: dict[str, None] = {}
        self._empty: pa.Table | None = None

    # -- helpers -------------------------------------------------------------------------

    def infer(self, expr: pc.Expression) -> pa.DataType:
        """Bind ``expr`` against the schema (on zero rows) and return its result type."""
        if self._empty is None:
            self._empty = self.schema.empty_table()
        try:
            result = pads.dataset(self._empty).to_table(columns={"v": expr})
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise InvalidInputError(f"unsupported operand types: {exc}") from exc
        return result.schema.field(0).type

    def column(self, node: exp.Expression) -> _Node:
        node = _unparen(node)
        path: list[str] = []
        while not isinstance(node, exp.Column):
            if isinstance(node, exp.Dot):
                path.append(node.expression.name)
            else:  # Bracket with a string key
                path.append(node.expressions[0].this)
            node = _unparen(node.this)
        parts = node.parts
        quoted_single = len(parts) == 1 and bool(parts[0].args.get("quoted"))
        path = [p.name for p in parts] + path[::-1]
        top = self._top_level(path[0], exact=quoted_single)
        field = self.schema.field(top)
        for name in path[1:]:
            if not pa.types.is_struct(field.type):
                raise InvalidInputError(f"{field.name!r} is not a struct; cannot access {name!r}")
            index = field.type.get_field_index(name)
            if index < 0:
                raise InvalidInputError(f"struct {field.name!r} has no field {name!r}")
            field = field.type.field(index)
        self.columns.setdefault(top, None)
        return _Node(pc.field(top, *path[1:]), field.type)

    def _top_level(self, name: str, exact: bool) -> str:
        names = self.schema.names
        if name in names:
            return name
        if not exact:
            for candidate in names:
                if candidate.lower() == name.lower():
                    return candidate
        raise InvalidInputError(f"no column named {name!r}; columns are {names}")

    # -- dispatch ------------------------------------------------------------------------

    def compile(
        self, node: exp.Expression, resolve: bool = False, coerce_to: pa.DataType | None = None
    ) -> _Node:
        """Compile ``node``.

        ``resolve`` marks positions where Lance checks column-vs-literal types (the top
        of the filter and operands of AND/OR). ``coerce_to`` asks for literals in this
        subtree (through arithmetic and comparisons) to be converted to that type.
        """
        if isinstance(node, exp.Paren):
            return self.compile(node.this, resolve, coerce_to)
        if _is_sql_literal(node):
            lit = self.literal(node)
            if coerce_to is None:
                return lit
            scalar = _coerce_value(lit.literal, lit.type, coerce_to)
            if scalar is None:
                raise InvalidInputError(
                    f"literal {node.sql()} cannot be converted to the column type {coerce_to}"
                )
            return _Node(pc.scalar(scalar), scalar.type, lit.literal)
        if _is_column_ref(node):
            return self.column(node)
        if isinstance(node, (exp.And, exp.Or)):
            left = self.boolean(self.compile(node.this, resolve))
            right = self.boolean(self.compile(node.expression, resolve))
            fn = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
            return _Node(fn(left, right), pa.bool_())
        if isinstance(node, exp.Not):
            inner = _unparen(node.this)
            keep = resolve and isinstance(inner, (exp.In, exp.Between, exp.Like, exp.ILike))
            return _Node(pc.invert(self.boolean(self.compile(inner, keep))), pa.bool_())
        if type(node) in _COMPARISONS or type(node) in _ARITHMETIC:
            return self.binary(node, resolve, coerce_to)
        if type(node) in _UNARY_FUNCS or type(node) in _PATTERN_FUNCS:
            return self.function(node)
        handler = getattr(self, f"on_{type(node).__name__.lower()}", None)
        if handler is None:
            raise InvalidInputError(f"unsupported SQL in filter: {node.sql()!r}")
        result: _Node = handler(node, resolve)
        return result

    def literal(self, node: exp.Expression) -> _Node:
        node = _unparen(node)
        if isinstance(node, exp.Null):
            return _Node(pc.scalar(None), pa.null(), None)
        if isinstance(node, exp.Boolean):
            return _literal(bool(node.this), pa.bool_())
        if isinstance(node, exp.Neg):
            return _number(node.this.this, negative=True)
        if node.is_string:
            return _literal(node.this, pa.string())
        return _number(node.this, negative=False)

    def boolean(self, node: _Node) -> pc.Expression:
        if pa.types.is_null(node.type):
            return node.expr.cast(pa.bool_())
        return node.expr

    def binary(self, node: exp.Expression, resolve: bool, coerce_to: pa.DataType | None) -> _Node:
        left_ast, right_ast = node.this, node.expression
        left_hint = right_hint = coerce_to
        if resolve and coerce_to is None:
            if _is_column_ref(left_ast):
                col_type = self.column(left_ast).type
                bare = _unparen(right_ast)
                if _is_sql_literal(bare) or type(bare) in _COMPARISONS or type(bare) in _ARITHMETIC:
                    right_hint = col_type
            elif _is_column_ref(right_ast) and _is_sql_literal(left_ast):
                left_hint = self.column(right_ast).type
        left = self.compile(left_ast, coerce_to=left_hint)
        right = self.compile(right_ast, coerce_to=right_hint)
        if type(node) in _COMPARISONS:
            return _Node(self.apply(_COMPARISONS[type(node)], left, right), pa.bool_())
        common = _common_numeric(left.type, right.type)
        if common is not None:  # widen explicitly: Arrow would narrow literals instead
            left = _Node(left.expr.cast(common), common)
            right = _Node(right.expr.cast(common), common)
        expr = self.apply(_ARITHMETIC[type(node)], left, right)
        return _Node(expr, self.infer(expr))

    # -- other node kinds (looked up by class name) -----------------------------------------

    def on_nullsafeneq(self, node: exp.Expression, resolve: bool) -> _Node:
        """``a IS DISTINCT FROM b``: like ``<>`` but NULL counts as an ordinary value."""
        left, right = self.compile(node.this), self.compile(node.expression)
        differs = self.apply(pc.not_equal, left, right)
        null_differs = pc.not_equal(pc.is_null(left.expr), pc.is_null(right.expr))
        return _Node(pc.coalesce(differs, null_differs), pa.bool_())

    def on_nullsafeeq(self, node: exp.Expression, resolve: bool) -> _Node:
        """``a IS NOT DISTINCT FROM b``."""
        return _Node(pc.invert(self.on_nullsafeneq(node, resolve).expr), pa.bool_())

    def on_neg(self, node: exp.Neg, resolve: bool) -> _Node:
        inner = self.compile(node.this)
        return _Node(pc.negate(inner.expr), inner.type)

    def on_is(self, node: exp.Is, resolve: bool) -> _Node:
        inner = self.compile(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return _Node(pc.is_null(inner.expr), pa.bool_())
        if isinstance(target, exp.Boolean):
            if not (pa.types.is_boolean(inner.type) or pa.types.is_null(inner.type)):
                raise InvalidInputError(f"IS TRUE/FALSE needs a boolean, got {inner.type}")
            value = self.boolean(inner)
            if not target.this:
                value = pc.invert(value)
            return _Node(pc.coalesce(value, pc.scalar(False)), pa.bool_())
        raise InvalidInputError(f"unsupported IS expression: {node.sql()!r}")

    def on_between(self, node: exp.Between, resolve: bool) -> _Node:
        hint = self.column(node.this).type if resolve and _is_column_ref(node.this) else None
        value = self.compile(node.this)
        low = self.compile(node.args["low"], coerce_to=hint)
        high = self.compile(node.args["high"], coerce_to=hint)
        lower = self.apply(pc.greater_equal, value, low)
        upper = self.apply(pc.less_equal, value, high)
        return _Node(pc.and_kleene(lower, upper), pa.bool_())

    @staticmethod
    def apply(fn: Callable[..., pc.Expression], a: _Node, b: _Node) -> pc.Expression:
        """Call a binary kernel after aligning operand types Arrow would not align itself.

        An untyped NULL takes the other operand's type, and a date or zone-less timestamp
        meeting a timestamp with a time zone is read as UTC (as Lance does).
        """
        a_expr, b_expr = a.expr, b.expr
        if _needs_cast_to(a.type, b.type):
            a_expr = a_expr.cast(b.type)
        elif _needs_cast_to(b.type, a.type):
            b_expr = b_expr.cast(a.type)
        return fn(a_expr, b_expr)

    def on_in(self, node: exp.In, resolve: bool) -> _Node:
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise InvalidInputError("subqueries are not supported in filters")
        target = _unparen(node.this)
        top_column = isinstance(target, exp.Column) and len(target.parts) == 1
        value = self.compile(target)
        hint = value.type if resolve and top_column else None
        items = [self.compile(item, coerce_to=hint) for item in node.expressions]
        if not items:
            raise InvalidInputError("IN requires at least one value")
        literals = [i for i in items if i.literal is not _NOTHING]
        set_type = value.type.value_type if pa.types.is_dictionary(value.type) else value.type
        if len(literals) == len(items) and all(
            i.type == set_type or i.literal is None for i in items
        ):
            present = [i.literal for i in items if i.literal is not None]
            found = pc.is_in(value.expr, value_set=pa.array(present, set_type), skip_nulls=True)
            found = pc.if_else(pc.is_null(value.expr), pa.scalar(None, pa.bool_()), found)
            if len(present) < len(items):  # a NULL in the list turns "not found" into NULL
                found = pc.if_else(found, True, pa.scalar(None, pa.bool_()))
            return _Node(found, pa.bool_())
        result: pc.Expression | None = None
        for item in items:
            eq = self.apply(pc.equal, value, item)
            result = eq if result is None else pc.or_kleene(result, eq)
        assert result is not None
        return _Node(result, pa.bool_())

    def on_like(self, node: exp.Like, resolve: bool) -> _Node:
        return self._like(node, ignore_case=False)

    def on_ilike(self, node: exp.ILike, resolve: bool) -> _Node:
        return self._like(node, ignore_case=True)

    def on_escape(self, node: exp.Escape, resolve: bool) -> _Node:
        esc = node.expression
        if not (isinstance(esc, exp.Literal) and esc.is_string and esc.this == "\\"):
            raise InvalidInputError("LIKE only supports the backslash as escape character")
        if not isinstance(node.this, (exp.Like, exp.ILike)):
            raise InvalidInputError(f"unsupported SQL in filter: {node.sql()!r}")
        return self._like(node.this, ignore_case=isinstance(node.this, exp.ILike))

    def _like(self, node: exp.Expression, ignore_case: bool) -> _Node:
        value = self.compile(node.this)
        pattern = self._constant_string(node.expression, "LIKE pattern")
        if pattern is None:
            return _Node(pc.scalar(pa.scalar(None, pa.bool_())), pa.bool_())
        expr = pc.match_like(_plain(value), pattern=pattern, ignore_case=ignore_case)
        if node.args.get("negate"):  # sqlglot's form of NOT LIKE
            expr = pc.invert(expr)
        return _Node(expr, pa.bool_())

    def _constant_string(self, node: exp.Expression, what: str) -> str | None:
        node = _unparen(node)
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Literal) and node.is_string:
            return str(node.this)
        raise InvalidInputError(f"{what} must be a string literal, got {node.sql()!r}")

    def on_cast(self, node: exp.Cast, resolve: bool) -> _Node:
        target = _sql_type(node.args["to"])
        source = _unparen(node.this)
        if isinstance(source, exp.Literal) and source.is_string:
            # typed literals such as DATE '2024-01-01' are converted once, here
            text = str(source.this)
            try:
                if pa.types.is_timestamp(target):
                    scalar = _string_to_timestamp(text, target)
                elif pa.types.is_date(target):
                    scalar = pa.scalar(dt.date.fromisoformat(text.strip()), target)
                else:
                    scalar = pa.scalar(text).cast(target)
            except (pa.ArrowException, ValueError) as exc:
                raise InvalidInputError(f"cannot convert {text!r} to {target}: {exc}") from exc
            return _Node(pc.scalar(scalar), target)
        inner = self.compile(source)
        opts = pc.CastOptions(target, allow_float_truncate=True)
        expr = inner.expr.cast(options=opts)
        self.infer(expr)  # reject impossible casts now rather than at scan time
        return _Node(expr, target)

    def on_length(self, node: exp.Length, resolve: bool) -> _Node:
        inner = self.compile(node.this)
        value_type = inner.type.value_type if pa.types.is_dictionary(inner.type) else inner.type
        func = pc.binary_length if pa.types.is_binary(value_type) else pc.utf8_length
        expr = func(_plain(inner))
        return _Node(expr, self.infer(expr))

    def on_dpipe(self, node: exp.DPipe, resolve: bool) -> _Node:
        left, right = self.compile(node.this), self.compile(node.expression)
        expr = pc.binary_join_element_wise(_plain(left), _plain(right), "")
        return _Node(expr, self.infer(expr))

    def on_anonymous(self, node: exp.Anonymous, resolve: bool) -> _Node:
        name = str(node.this).lower()
        args = node.expressions
        if name == "is_valid" and len(args) == 1:
            return _Node(pc.is_valid(self.compile(args[0]).expr), pa.bool_())
        raise InvalidInputError(f"unsupported function in filter: {node.sql()!r}")

    def function(self, node: exp.Expression) -> _Node:
        if type(node) in _UNARY_FUNCS:
            inner = self.compile(node.this)
            expr = _UNARY_FUNCS[type(node)](_plain(inner))
            return _Node(expr, self.infer(expr))
        value = self.compile(node.this)
        pattern = self._constant_string(node.expression, f"{node.key}() pattern")
        if pattern is None:
            return _Node(pc.scalar(pa.scalar(None, pa.bool_())), pa.bool_())
        return _Node(_PATTERN_FUNCS[type(node)](_plain(value), pattern=pattern), pa.bool_())


def _parse(sql: str) -> exp.Expression:
    if not isinstance(sql, str):
        raise InvalidInputError(f"a filter must be a string, got {type(sql).__name__}")
    if not sql.strip():
        raise InvalidInputError("the filter is empty")
    try:
        parsed = sqlglot.parse(sql, dialect=_LanceSql)
    except SqlglotError as exc:
        raise InvalidInputError(f"cannot parse filter {sql!r}: {exc}") from exc
    if len(parsed) != 1 or parsed[0] is None:
        raise InvalidInputError(f"a filter must be a single expression: {sql!r}")
    node = parsed[0]
    assert isinstance(node, exp.Expression)
    return node


def _compile(
    sql: str, schema: pa.Schema, extra_columns: Iterable[str]
) -> tuple[pc.Expression, _Compiler]:
    compiler = _Compiler(schema, extra_columns)
    node = compiler.compile(_parse(sql), resolve=True)
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
    """:func:`compile_filter` and :func:`filter_columns` in one pass (parses once)."""
    expr, compiler = _compile(sql, schema, extra_columns)
    return expr, [name for name in compiler.schema.names if name in compiler.columns]


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

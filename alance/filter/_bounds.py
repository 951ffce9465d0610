"""The part of a filter that value bounds can decide: for pruning pages by their statistics.

:func:`bound_predicate` turns a SQL filter into a small tree of *range tests* on top-level
columns (``col < 5``, ``col BETWEEN 'a' AND 'f'``, ``col IN (1, 2)``, ``col IS NULL``...)
joined by AND/OR. Anything else (functions, arithmetic, NOT, struct fields, ``!=`` on
floats...) becomes :data:`UNKNOWN`, which never rules anything out. Literals are converted to
the column's type exactly as the filter compiler converts them; a literal that cannot be
represented exactly in the column's type makes its test UNKNOWN too.

The tree is only ever used to say "no row of this page can match": a page is skipped when its
test is false for every value inside the page's [min, max] bounds and null count.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from sqlglot import exp

from alance.errors import InvalidInputError
from alance.filter._compiler import Compiler
from alance.filter._sql import (
    LanceSql,
    LiteralList,
    flatten_chain,
    is_sql_literal,
    literal_list,
    parse_filter,
    unparen,
)
from alance.filter._values import coerce_value, literal_array

#: Values a predicate's ``repr`` shows (an IN list may hold hundreds of thousands).
_REPR_VALUES = 8


@dataclass(frozen=True, repr=False)
class RangeTest:
    """``column <op> values``; ops: eq, lt, le, gt, ge, in, is_null, not_null, and for list
    columns has_any / has_all (of the list's items)."""

    column: str
    op: str
    values: tuple[pa.Scalar, ...] = ()

    def __repr__(self) -> str:
        shown = ", ".join(repr(v) for v in self.values[:_REPR_VALUES])
        if len(self.values) > _REPR_VALUES:
            shown += f", ... ({len(self.values)} values)"
        elif len(self.values) == 1:
            shown += ","
        return f"RangeTest(column={self.column!r}, op={self.op!r}, values=({shown}))"


@dataclass(frozen=True)
class AllOf:
    """Every part must hold."""

    parts: tuple[BoundPredicate, ...]


@dataclass(frozen=True)
class AnyOf:
    """At least one part must hold."""

    parts: tuple[BoundPredicate, ...]


@dataclass(frozen=True)
class Unknown:
    """A condition statistics cannot decide."""


UNKNOWN = Unknown()
BoundPredicate = RangeTest | AllOf | AnyOf | Unknown

_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}
_OPS: dict[type[exp.Expression], str] = {
    exp.EQ: "eq", exp.LT: "lt", exp.LTE: "le", exp.GT: "gt", exp.GTE: "ge",
}


def _prunable_type(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_date(t) or pa.types.is_decimal(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


#: List membership functions (DataFusion's names) -> the test they make.
_MEMBERSHIP = {"array_has_any": "has_any", "list_has_any": "has_any",
               "array_has_all": "has_all", "list_has_all": "has_all",
               "array_contains": "has_any", "list_contains": "has_any",
               "array_has": "has_any", "list_has": "has_any"}


class _Builder:
    def __init__(self, schema: pa.Schema, list_tests: bool = False) -> None:
        self.schema = schema
        self.list_tests = list_tests
        self._one_row = pa.table({"__alance": pa.array([0], pa.int8())})
        self._literals = Compiler(schema, ())  # reads literals exactly as filters do

    def column(self, node: exp.Expression, *, lists: bool = False) -> pa.Field | None:
        """The top-level column ``node`` names (a list column with ``lists``, else one of a
        type page bounds order)."""
        node = unparen(node)
        if not isinstance(node, exp.Column) or node.table:
            return None
        ident = node.this
        name = ident.name
        if name in self.schema.names:
            field = self.schema.field(name)
        elif isinstance(ident, exp.Identifier) and not ident.quoted:
            matches = [f for f in self.schema if f.name.lower() == name.lower()]
            if len(matches) != 1:
                return None
            field = matches[0]
        else:
            return None
        if lists:
            return field if pa.types.is_list(field.type) or pa.types.is_large_list(
                field.type) else None
        return field if _prunable_type(field.type) else None

    def literal(self, node: exp.Expression, target: pa.DataType) -> pa.Scalar | None:
        """The literal as a scalar of ``target``, or None when that is not exact."""
        from alance.filter import compile_expression

        node = unparen(node)
        if is_sql_literal(node):  # directly, as the compiler converts it (no round trip)
            try:
                lit = self._literals.literal(node)
                scalar = coerce_value(lit.literal, lit.type, target)
            except (InvalidInputError, pa.ArrowException):
                return None
            if scalar is None or not scalar.is_valid or not scalar.type.equals(target):
                return None
            return scalar
        if not isinstance(node, exp.Cast):
            return None
        try:
            expr, _, columns = compile_expression(node.sql(dialect=LanceSql), self.schema, target)
            if columns:
                return None
            value = pads.dataset(self._one_row).to_table(columns={"v": expr}).column(0)[0]
        except (InvalidInputError, pa.ArrowInvalid, pa.ArrowNotImplementedError,
                pa.ArrowTypeError):
            return None
        if not value.is_valid:
            return None
        if value.type.equals(target):
            return value
        try:
            cast = value.cast(target, safe=True)
            if cast.cast(value.type, safe=True).equals(value):
                return cast
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        return None

    def build(self, node: exp.Expression) -> BoundPredicate:
        node = unparen(node)
        if isinstance(node, exp.And | exp.Or):
            # One level per chain (not per term): a 100,000-term chain is that deep a tree.
            built = [self.build(p) for p in flatten_chain(node)]
            if isinstance(node, exp.And):
                parts = tuple(p for p in built if not isinstance(p, Unknown))
                return AllOf(parts) if parts else UNKNOWN
            if any(isinstance(p, Unknown) for p in built):
                return UNKNOWN
            return AnyOf(_merge_equalities(built))
        op = _OPS.get(type(node))
        if op is not None:
            return self._compare(node.args["this"], node.args["expression"], op)
        if isinstance(node, exp.Between):
            field = self.column(node.this)
            if field is None:
                return UNKNOWN
            low = self.literal(node.args["low"], field.type)
            high = self.literal(node.args["high"], field.type)
            if low is None or high is None:
                return UNKNOWN
            parts = tuple(p for p in (_test(field, "ge", low), _test(field, "le", high))
                          if not isinstance(p, Unknown))
            return AllOf(parts) if parts else UNKNOWN
        if isinstance(node, exp.In) and not node.args.get("query"):
            field = self.column(node.this)
            if field is None:
                return UNKNOWN
            literals = literal_list(node)
            if literals is not None:
                return self._in_literals(field, literals)
            values = [self.literal(v, field.type) for v in node.expressions]
            if not values or any(v is None for v in values):
                return UNKNOWN
            return RangeTest(field.name, "in", tuple(v for v in values if v is not None))
        if isinstance(node, exp.Is) and isinstance(unparen(node.expression), exp.Null):
            field = self.column(node.this)
            return UNKNOWN if field is None else RangeTest(field.name, "is_null")
        if isinstance(node, exp.Not):
            inner = unparen(node.this)
            if isinstance(inner, exp.Is) and isinstance(unparen(inner.expression), exp.Null):
                field = self.column(inner.this)
                return UNKNOWN if field is None else RangeTest(field.name, "not_null")
        if self.list_tests:
            return self._membership(node)
        return UNKNOWN

    def _membership(self, node: exp.Expression) -> BoundPredicate:
        """``array_has_any(col, [...])`` / ``array_has_all`` / ``array_contains(col, v)``:
        a ``has_any`` / ``has_all`` test of a list column's items."""
        if isinstance(node, exp.ArrayContains):
            name, args = "array_contains", [node.this, node.expression]
        elif isinstance(node, exp.ArrayContainsAll):
            name, args = "array_has_all", [node.this, node.expression]
        elif isinstance(node, exp.Anonymous):
            name, args = str(node.this).lower(), list(node.expressions)
        else:
            return UNKNOWN
        op = _MEMBERSHIP.get(name)
        field = self.column(args[0], lists=True) if op and len(args) == 2 else None
        if field is None or op is None:
            return UNKNOWN
        given = unparen(args[1])
        items = given.expressions if isinstance(given, exp.Array) else [given]
        if isinstance(given, exp.Array) == name.endswith(("contains", "has")) or not items:
            return UNKNOWN
        values = [self.literal(i, field.type.value_type) for i in items]
        if any(v is None for v in values):
            return UNKNOWN
        return RangeTest(field.name, op, tuple(v for v in values if v is not None))

    def _in_literals(self, field: pa.Field, literals: LiteralList) -> BoundPredicate:
        """``column IN (literals)`` for a long list read without sqlglot (vectorised; the
        same values :meth:`literal` would give one by one)."""
        try:
            values = literal_array(literals.values, literals.types, field.type)
        except (InvalidInputError, pa.ArrowException):
            return UNKNOWN
        if not len(values) or values.null_count:
            return UNKNOWN
        return RangeTest(field.name, "in", tuple(values))

    def _compare(self, left: exp.Expression, right: exp.Expression, op: str,
                 ) -> BoundPredicate:
        field = self.column(left)
        other = right
        if field is None:
            field, other, op = self.column(right), left, _FLIP[op]
        if field is None:
            return UNKNOWN
        value = self.literal(other, field.type)
        if value is None:
            return UNKNOWN
        if pa.types.is_floating(field.type) and pc.is_nan(value).as_py():
            return UNKNOWN
        return _test(field, op, value)


def _merge_equalities(parts: list[BoundPredicate]) -> tuple[BoundPredicate, ...]:
    """OR-ed ``eq``/``in`` tests of one column as one ``in`` test (the same condition, but
    tested against page bounds in one vectorised step rather than one per term)."""
    values: dict[str, list[pa.Scalar]] = {}
    rest: list[BoundPredicate] = []
    for part in parts:
        if isinstance(part, RangeTest) and part.op in ("eq", "in"):
            values.setdefault(part.column, []).extend(part.values)
        else:
            rest.append(part)
    merged: list[BoundPredicate] = [RangeTest(column, "in" if len(vs) > 1 else "eq", tuple(vs))
                                    for column, vs in values.items()]
    return tuple(merged + rest)


def _test(field: pa.Field, op: str, value: pa.Scalar) -> BoundPredicate:
    """``field <op> value``; UNKNOWN for tests NaN passes (Lance orders NaN above every
    float, and float bounds leave NaN out)."""
    if pa.types.is_floating(field.type) and op in ("gt", "ge"):
        return UNKNOWN
    return RangeTest(field.name, op, (value,))


def bound_predicate(sql: str, schema: pa.Schema, *, list_tests: bool = False,
                    ) -> BoundPredicate:
    """The range tests of ``sql`` over ``schema`` (see the module docstring). With
    ``list_tests``, list membership functions become ``has_any`` / ``has_all`` tests of a
    list column's items (for label-list indices; page bounds cannot answer them).

    The filter must already compile (this does not report errors: anything unusual is
    UNKNOWN). Short filters are remembered (a service repeats its filters).
    """
    if len(sql) <= _CACHED_SQL_CHARS:
        return _bound_cached(sql, schema, list_tests)
    return _bound(sql, schema, list_tests)


#: Filters up to this long are remembered by :func:`bound_predicate`.
_CACHED_SQL_CHARS = 4096


def _bound(sql: str, schema: pa.Schema, list_tests: bool = False) -> BoundPredicate:
    try:
        return _Builder(schema, list_tests).build(parse_filter(sql, literal_lists=True))
    except InvalidInputError:
        return UNKNOWN


_bound_cached = functools.lru_cache(maxsize=512)(_bound)


def tested_columns(pred: BoundPredicate) -> set[str]:
    """Names of the columns the predicate's range tests look at."""
    if isinstance(pred, RangeTest):
        return {pred.column}
    if isinstance(pred, AllOf | AnyOf):
        return set().union(*(tested_columns(p) for p in pred.parts))
    return set()

"""Spark's pushed-down filters as pyarrow expressions over a dataset's columns.

Spark hands a Python data source the conjuncts of a query's WHERE clause it can express
(:mod:`pyspark.sql.datasource` ``Filter`` objects). A filter the source accepts is *not*
evaluated again by Spark, so a conversion must mean exactly what Spark means; anything whose
meaning could differ is left to Spark:

* comparisons on floating-point columns (Spark orders NaN above every number and treats
  NaN = NaN as true; Arrow does neither), and on timestamp columns (Spark hands over local
  wall-clock values);
* literals that do not convert exactly to the column's type (``uint32_col > -1``);
* ``IN`` lists holding NULL, and filters on nested paths through lists or maps.

Rows for which a predicate is NULL are dropped, as in Spark's WHERE.
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import datasource as sds


@dataclass(frozen=True)
class Converted:
    """A pushed filter: the expression and the top-level columns it reads."""

    expression: pc.Expression
    columns: frozenset[str]


class _Refused(Exception):
    """This filter stays with Spark."""


def _column(schema: pa.Schema, path: tuple[str, ...]) -> tuple[pc.Expression, pa.DataType]:
    if not path or path[0] not in schema.names:
        raise _Refused
    dtype = schema.field(path[0]).type
    for name in path[1:]:
        if not pa.types.is_struct(dtype) or dtype.get_field_index(name) < 0:
            raise _Refused
        dtype = dtype.field(name).type
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    return pc.field(*path), dtype


def _comparable(dtype: pa.DataType) -> bool:
    t = pa.types
    return (t.is_integer(dtype) or t.is_decimal(dtype) or t.is_string(dtype)
            or t.is_large_string(dtype) or t.is_binary(dtype) or t.is_large_binary(dtype)
            or t.is_boolean(dtype) or t.is_date(dtype))


def _literal(value: Any, dtype: pa.DataType) -> pc.Expression:
    if value is None or isinstance(value, (list, tuple, dict, dt.datetime)):
        raise _Refused
    if isinstance(value, float) and not pa.types.is_floating(dtype):
        raise _Refused
    if isinstance(value, bool) != pa.types.is_boolean(dtype):
        raise _Refused
    if isinstance(value, dt.date) != pa.types.is_date(dtype):
        raise _Refused
    if isinstance(value, decimal.Decimal) and not pa.types.is_decimal(dtype):
        raise _Refused
    try:
        scalar = pa.scalar(value, type=dtype)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        raise _Refused from None
    if scalar.as_py() != value:  # e.g. a decimal rounded to the column's scale
        raise _Refused
    return pc.scalar(scalar)


def _convert(f: sds.Filter, schema: pa.Schema) -> tuple[pc.Expression, set[str]]:
    if isinstance(f, sds.Not):
        inner, cols = _convert(f.child, schema)
        return ~inner, cols
    path = tuple(f.attribute)  # type: ignore[attr-defined]
    col, dtype = _column(schema, path)
    used = {path[0]}
    if isinstance(f, sds.IsNull):
        return col.is_null(), used
    if isinstance(f, sds.IsNotNull):
        return col.is_valid(), used
    if isinstance(f, (sds.StringStartsWith, sds.StringEndsWith, sds.StringContains)):
        if not (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)):
            raise _Refused
        fn = {sds.StringStartsWith: pc.starts_with, sds.StringEndsWith: pc.ends_with,
              sds.StringContains: pc.match_substring}[type(f)]
        return fn(col, pattern=f.value), used
    if not _comparable(dtype):
        raise _Refused
    if isinstance(f, sds.In):
        values = list(f.value)
        if not values or any(v is None for v in values):
            raise _Refused
        literals = [_literal(v, dtype) for v in values]
        expr = col == literals[0]
        for lit in literals[1:]:
            expr = expr | (col == lit)
        return expr, used
    if isinstance(f, sds.EqualNullSafe):
        if f.value is None:
            return col.is_null(), used
        return pc.coalesce(col == _literal(f.value, dtype), pc.scalar(False)), used
    ops = {sds.EqualTo: pc.equal, sds.GreaterThan: pc.greater,
           sds.GreaterThanOrEqual: pc.greater_equal, sds.LessThan: pc.less,
           sds.LessThanOrEqual: pc.less_equal}
    op = ops.get(type(f))
    if op is None:
        raise _Refused
    return op(col, _literal(f.value, dtype)), used  # type: ignore[attr-defined]


def convert_filter(f: sds.Filter, schema: pa.Schema) -> Converted | None:
    """``f`` as an expression over a dataset with Arrow schema ``schema``, or ``None`` when it
    must stay with Spark."""
    try:
        expr, cols = _convert(f, schema)
    except _Refused:
        return None
    return Converted(expr, frozenset(cols))


def combine(filters: list[Converted]) -> Converted | None:
    """The AND of converted filters (``None`` for none)."""
    if not filters:
        return None
    expr = filters[0].expression
    cols = set(filters[0].columns)
    for f in filters[1:]:
        expr = expr & f.expression
        cols |= f.columns
    return Converted(expr, frozenset(cols))

"""Typed values for filter compilation: compiled nodes, literals and type coercion.

These helpers decide which Arrow type a SQL literal gets, whether it fits the column it is
compared with (Lance's rules, not Arrow's casts), how mixed numeric operands are widened,
and which Arrow type a CAST target names.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from alance.errors import InvalidInputError

NOTHING = object()


@dataclass(frozen=True)
class Node:
    """A compiled sub-expression with its Arrow type."""

    expr: pc.Expression
    type: pa.DataType
    literal: object = NOTHING  # the Python value, for plain SQL literals only


INT_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint8(): (0, 2**8 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1),
    pa.uint64(): (0, 2**64 - 1),
}

SIMPLE_TYPES: dict[Any, pa.DataType] = {
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
TIME_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}


def coerce_value(value: object, value_type: pa.DataType, target: pa.DataType) -> pa.Scalar | None:
    """Convert a literal to ``target`` the way Lance does, or None if it does not fit."""
    if pa.types.is_dictionary(target):  # compare with the dictionary's values
        target = target.value_type
    if value is None:
        return pa.scalar(None, target)
    if pa.types.is_integer(value_type):
        assert isinstance(value, int)
        if target in INT_RANGES:
            low, high = INT_RANGES[target]
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
    if pa.types.is_binary(value_type):
        assert isinstance(value, bytes)
        if pa.types.is_binary(target) or pa.types.is_large_binary(target):
            return pa.scalar(value, target)
        if pa.types.is_fixed_size_binary(target):
            return pa.scalar(value, target) if len(value) == target.byte_width else None
        return None
    return None


def _literal_text(value: object) -> str:
    """A literal as it would be written in SQL (for messages)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    return str(value)


def literal_array(values: list[object], types: list[pa.DataType],
                  target: pa.DataType) -> pa.Array:
    """Literals converted to ``target`` exactly as :func:`coerce_value` converts each one,
    in one vectorised step for the common cases (SQL NULLs become nulls).

    Raises :class:`InvalidInputError` naming the first literal that does not fit.
    """
    shown = target
    if pa.types.is_dictionary(target):
        target = target.value_type
    kinds = set(types) - {pa.null()}
    try:
        if kinds <= {pa.int64(), pa.uint64()} and target in INT_RANGES:
            low, high = INT_RANGES[target]
            present = [v for v in values if v is not None]
            if not present or (low <= min(present) and max(present) <= high):  # type: ignore[type-var,operator]
                return pa.array(values, target)
        elif kinds <= {pa.int64(), pa.uint64(), pa.float64()} and (
                pa.types.is_float32(target) or pa.types.is_float64(target)):
            return pa.array([None if v is None else float(v) for v in values],  # type: ignore[arg-type]
                            target)
        elif kinds <= {pa.string()} and (pa.types.is_string(target)
                                         or pa.types.is_large_string(target)):
            return pa.array(values, target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass  # the value-by-value path below says which literal is at fault
    scalars = []
    for value, value_type in zip(values, types, strict=True):
        scalar = coerce_value(value, value_type, target)
        if scalar is None:
            raise InvalidInputError(f"literal {_literal_text(value)} cannot be converted to "
                                    f"the column type {shown}")
        scalars.append(scalar)
    return pa.array(scalars, target)


def plain(node: Node) -> pc.Expression:
    """The node's expression with dictionary encoding removed (string kernels need it)."""
    if pa.types.is_dictionary(node.type):
        return node.expr.cast(node.type.value_type)
    return node.expr


def common_numeric(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
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


def needs_cast_to(source: pa.DataType, other: pa.DataType) -> bool:
    """True if ``source`` must be cast to ``other`` before a binary kernel can combine them."""
    if pa.types.is_null(source):
        return not pa.types.is_null(other)
    if pa.types.is_timestamp(other) and other.tz is not None:
        return pa.types.is_date(source) or (pa.types.is_timestamp(source) and source.tz is None)
    return False


def number_literal(text: str, negative: bool) -> Node:
    """A numeric SQL literal as int64, uint64 (when too big for int64) or float64."""
    text = f"-{text}" if negative else text
    try:
        value: int | float = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise InvalidInputError(f"{text!r} is not a supported number") from None
        return make_literal(value, pa.float64())
    if -(2**63) <= value < 2**63:
        return make_literal(value, pa.int64())
    if 0 <= value < 2**64:
        return make_literal(value, pa.uint64())
    return make_literal(float(value), pa.float64())


def make_literal(value: object, type_: pa.DataType) -> Node:
    """A literal node holding ``value`` as a scalar of ``type_``."""
    return Node(pc.scalar(pa.scalar(value, type_)), type_, value)


def sql_type(node: exp.DataType) -> pa.DataType:
    """The Arrow type named by a CAST target, or InvalidInputError if unsupported."""
    kind = node.this
    params = [int(p.this.this) for p in node.expressions if isinstance(p, exp.DataTypeParam)]
    if kind in SIMPLE_TYPES and not params:
        return SIMPLE_TYPES[kind]
    if kind in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME):
        precision = params[0] if params else 6
        if precision not in TIME_UNITS or len(params) > 1:
            raise InvalidInputError(f"unsupported timestamp precision {params}")
        return pa.timestamp(TIME_UNITS[precision])
    if kind == exp.DataType.Type.DECIMAL and len(params) == 2:
        return pa.decimal128(params[0], params[1])
    raise InvalidInputError(
        f"unsupported type in CAST: {node.sql()} (use int/bigint/tinyint/smallint [unsigned], "
        "float, double, string, binary, boolean, date, timestamp(p), decimal(p, s))"
    )


def string_to_timestamp(text: str, target: pa.DataType) -> pa.Scalar:
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

"""Evaluating a range test (:class:`alance.filter.RangeTest`) on the values an index stores
(no IO)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.filter import RangeTest

#: Range-test ops that value-ordered indices (BTREE, BITMAP) answer exactly.
ORDERED_OPS = frozenset({"eq", "lt", "le", "gt", "ge", "in", "is_null", "not_null"})

_COMPARE = {"eq": pc.equal, "lt": pc.less, "le": pc.less_equal, "gt": pc.greater,
            "ge": pc.greater_equal}


def _value(test: RangeTest, target: pa.DataType) -> pa.Scalar:
    value = test.values[0]
    return value if value.type.equals(target) else value.cast(target)


def matches(values: pa.Array | pa.ChunkedArray, test: RangeTest) -> np.ndarray:
    """Which of ``values`` pass ``test`` (a boolean mask; null passes only ``is_null``)."""
    if test.op == "is_null":
        mask = pc.is_null(values)
    elif test.op == "not_null":
        mask = pc.is_valid(values)
    elif test.op == "in":
        wanted = pa.array([v.as_py() for v in test.values], type=values.type)
        mask = pc.is_in(values, value_set=wanted)
    else:
        mask = _COMPARE[test.op](values, _value(test, values.type))
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)


def may_overlap(lo: pa.Array, hi: pa.Array, null_count: np.ndarray,
                test: RangeTest) -> np.ndarray:
    """Which ``[lo, hi]`` value ranges (a null bound: unknown) may hold a value passing
    ``test``; ``null_count`` says which ranges hold nulls."""
    n = len(lo)
    if test.op == "is_null":
        return np.asarray(null_count, dtype=np.int64) > 0
    if test.op == "not_null":
        return np.ones(n, dtype=bool)

    def holds(cmp: object, bound: pa.Array, value: pa.Scalar) -> np.ndarray:
        out = cmp(bound, value)  # type: ignore[operator]
        return np.asarray(pc.fill_null(out, True).to_numpy(zero_copy_only=False), dtype=bool)

    def in_range(value: pa.Scalar) -> np.ndarray:
        return holds(pc.less_equal, lo, value) & holds(pc.greater_equal, hi, value)

    if test.op == "in":
        mask = np.zeros(n, dtype=bool)
        for v in test.values:
            mask |= in_range(v if v.type.equals(lo.type) else v.cast(lo.type))
        return mask
    value = _value(test, lo.type)
    if test.op == "eq":
        return in_range(value)
    if test.op == "lt":
        return holds(pc.less, lo, value)
    if test.op == "le":
        return holds(pc.less_equal, lo, value)
    if test.op == "gt":
        return holds(pc.greater, hi, value)
    return holds(pc.greater_equal, hi, value)

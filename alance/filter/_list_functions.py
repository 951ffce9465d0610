"""List membership in filters: ``array_has_any``, ``array_has_all``, ``array_contains`` /
``array_has`` (DataFusion's names, as pylance's filters take them).

Arrow's compute functions have no per-row list membership, so these are pyarrow scalar UDFs
(registered once per list type and name) that filters call like any other function: the
list column, then the values as one list scalar. A null list gives null; a null item never
matches.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["list_membership"]

_KINDS = ("any", "all")
_REGISTERED: dict[tuple[str, str, str], str] = {}
_LOCK = threading.Lock()


def _kernel(kind: str) -> Any:
    def run(ctx: Any, lists: Any, values: Any) -> pa.Array:
        if isinstance(lists, pa.Scalar):
            lists = pa.array([lists.as_py()], lists.type)
        wanted = values.values if isinstance(values, pa.Scalar) else values[0].values
        wanted = pa.array([], lists.type.value_type) if wanted is None else wanted.drop_null()
        flat = pc.list_flatten(lists)
        parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
        hit = pc.fill_null(pc.is_in(flat, value_set=wanted), False).to_numpy(
            zero_copy_only=False)
        n = len(lists)
        if kind == "any":
            out = np.bincount(parents[hit], minlength=n) > 0
        else:  # every wanted value appears in the row's list
            out = np.ones(n, bool)
            for value in wanted.unique():
                match = pc.fill_null(pc.equal(flat, value), False).to_numpy(
                    zero_copy_only=False)
                out &= np.bincount(parents[match], minlength=n) > 0
        return pa.array(out, pa.bool_(), mask=np.asarray(lists.is_null()))
    return run


def list_membership(kind: str, lists: pc.Expression, list_type: pa.DataType,
                    values: pa.Scalar) -> pc.Expression:
    """``lists`` (of ``list_type``) holding any / all of the list scalar ``values``."""
    if kind not in _KINDS:
        raise ValueError(kind)
    values = values.cast(pa.list_(list_type.value_type))
    key = (kind, str(list_type), str(values.type))
    with _LOCK:
        name = _REGISTERED.get(key)
        if name is None:
            name = f"alance_array_has_{kind}_{len(_REGISTERED)}"
            pc.register_scalar_function(
                _kernel(kind), name,
                {"summary": f"list holds {kind} of the values",
                 "description": "alance filter function (see alance.filter)"},
                {"lists": list_type, "values": values.type}, pa.bool_())
            _REGISTERED[key] = name
    return pc.Expression._call(name, [lists, pc.scalar(values)])

"""Vector helpers (pylance's ``lance.vector``): tables of fixed-size float32 vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from alance.errors import InvalidInputError

__all__ = ["vec_to_table"]


def vec_to_table(data: dict[Any, Any] | Sequence[Any] | np.ndarray,
                 names: str | Sequence[str] | None = None, ndim: int | None = None,
                 check_ndim: bool = True) -> pa.Table:
    """A table of vectors as ``fixed_size_list<float32, ndim>``.

    ``data``: a dict (keys become an ``id`` column, values the vectors), a list of vectors,
    or a 2-d array (one vector per row). ``names``: the two column names for a dict
    (default ``["id", "vector"]``), else the vector column's name (default ``"vector"``).
    ``ndim``: the dimension (default: the first vector's); ``check_ndim``: refuse vectors of
    another length.
    """
    if isinstance(data, dict):
        column_names = list(names) if names is not None else ["id", "vector"]
        if isinstance(names, str) or len(column_names) != 2:
            raise InvalidInputError("for a dict, names must be two column names")
        ids = list(data.keys())
        vectors = _vectors(list(data.values()), ndim, check_ndim)
        return pa.table({column_names[0]: ids, column_names[1]: vectors})
    if names is not None and not isinstance(names, str):
        raise InvalidInputError("for a list or an array, names is the vector column's name")
    rows = list(data) if not isinstance(data, np.ndarray) else data
    return pa.table({names or "vector": _vectors(rows, ndim, check_ndim)})


def _vectors(rows: Any, ndim: int | None, check_ndim: bool) -> pa.FixedSizeListArray:
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        matrix = rows.astype(np.float32, copy=False)
        width = matrix.shape[1]
        if ndim is not None and width != ndim:
            raise InvalidInputError(f"vectors have {width} dimensions, not {ndim}")
    else:
        arrays = [np.asarray(r, dtype=np.float32).reshape(-1) for r in rows]
        width = ndim if ndim is not None else (len(arrays[0]) if arrays else 0)
        if check_ndim:
            bad = [i for i, a in enumerate(arrays) if len(a) != width]
            if bad:
                raise InvalidInputError(f"vector {bad[0]} has {len(arrays[bad[0]])} "
                                        f"dimensions, not {width}")
        matrix = (np.stack(arrays) if arrays else np.zeros((0, width), np.float32))
    flat = pa.array(np.ascontiguousarray(matrix).reshape(-1), pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, int(width))

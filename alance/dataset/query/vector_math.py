"""Vector arithmetic shared by the flat and indexed nearest-neighbour searches: the query as
an array, a fixed-size-list column as a matrix, Lance's distances (no IO)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from alance.errors import InvalidInputError

#: The name of the distance column.
DISTANCE = "_distance"


def query_vector(q: Any) -> np.ndarray:
    """The query as a 1-d float32 array (a list, numpy array, pyarrow array or scalar)."""
    if isinstance(q, pa.ExtensionScalar):
        q = q.value
    if isinstance(q, pa.Scalar):
        q = q.as_py()
    if isinstance(q, pa.Array | pa.ChunkedArray):
        q = q.to_numpy(zero_copy_only=False)
    try:
        vector = np.asarray(q, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"nearest: the query is not a vector of numbers: {exc}") from exc
    if not len(vector):
        raise InvalidInputError("nearest: the query vector is empty")
    return vector


def distances(vectors: np.ndarray, query: np.ndarray, metric: str) -> np.ndarray:
    """Distance of every row of ``vectors`` (n x dim) to ``query`` (float32)."""
    if metric == "l2":
        diff = vectors - query
        return np.einsum("ij,ij->i", diff, diff)
    dots = vectors @ query
    if metric == "dot":
        return (1.0 - dots).astype(np.float32)
    wide = vectors.astype(np.float64)
    norms = np.linalg.norm(wide, axis=1) * np.linalg.norm(query.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        cosine = np.clip(1.0 - (wide @ query.astype(np.float64)) / norms, 0.0, 2.0)
    return cosine.astype(np.float32)


def _matrix(column: pa.Array | pa.ChunkedArray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The vectors of a fixed-size-list column as (n x dim float32, validity)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    if not pa.types.is_fixed_size_list(column.type):
        raise InvalidInputError(f"nearest: the column is {column.type}, not a fixed-size list "
                                "of numbers")
    if column.type.list_size != dim:
        raise InvalidInputError(f"nearest: the query has {dim} dimensions, the column "
                                f"{column.type.list_size}")
    valid = np.ones(len(column), bool) if column.null_count == 0 else \
        np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool)
    # Every slot's values (null rows' too), whatever the array's offset and length.
    values = column.values.slice(column.offset * dim, len(column) * dim)
    if values.null_count:
        values = values.fill_null(np.nan)
    flat = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return flat.reshape(len(column), dim), valid

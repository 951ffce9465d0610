"""``optimize_indices``: extend indices over the fragments they do not cover yet (pylance's
``ds.optimize.optimize_indices``).

For each index (or those named), the fragments no segment covers are indexed:

* ``num_indices_to_merge=0`` adds a *delta* segment covering just them (as pylance does with
  that argument): scalar segments are built from the column's values; IVF_FLAT / IVF_PQ deltas
  keep the index's model, assigning the new vectors to its centroids and encoding them with its
  PQ codebook (``index.idx`` is the index's own, copied);
* otherwise (the default merges every segment) the newest ``num_indices_to_merge`` segments and
  the new fragments become one segment covering all their fragments, built the same way.

The new segments and the replaced ones go in one CreateIndex commit. Kinds alance cannot build
(full-text, HNSW...) are left as they are. ``retrain=True`` rebuilds an index from scratch
(new model for vector indices), replacing every segment.
"""

from __future__ import annotations

import asyncio
import time
import uuid as _uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyroaring

from alance._proto import table_pb2
from alance.dataset.commit.loop import commit_transaction
from alance.dataset.maintenance.index_build import read_column, scalar_segment
from alance.dataset.maintenance.index_remap import is_ivf_segment, write_ivf_segment
from alance.dataset.maintenance.inverted_build import params_options
from alance.dataset.maintenance.vector_index_build import encode_with, storage_table
from alance.dataset.query.indices import ivf
from alance.dataset.query.indices.describe import user_indices
from alance.dataset.query.indices.inverted_reader import open_segment as open_inverted
from alance.dataset.query.indices.ivf_reader import open_segment
from alance.dataset.query.indices.reader import index_reader
from alance.dataset.query.indices.types import SCALAR_KINDS, index_dir, type_url
from alance.dataset.query.vector_math import _matrix
from alance.errors import IndexNotFoundError, InvalidInputError
from alance.io.plans import decode_pool
from alance.transaction.indices import read_bitmap, write_bitmap
from alance.transaction.operations import new_create_index

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset

Index = table_pb2.IndexMetadata
Fragment = table_pb2.DataFragment
_KINDS = {url: kind for kind, url in SCALAR_KINDS.items()}


async def _vector_segment(ds: LanceDataset, column: str, model_of: Index, name: str,
                          fragments: Sequence[Fragment], covers: Iterable[int]) -> Index:
    """An IVF segment over ``fragments`` sharing ``model_of``'s centroids and codebook."""
    reader = index_reader(ds._ctx)
    seg = await open_segment(reader, model_of)
    values, ids = await read_column(ds, column, fragments, row_ids=True)
    vectors, valid = _matrix(values, seg.dimension)
    keep = valid & np.isfinite(vectors).all(axis=1)
    vectors, ids = vectors[keep], ids[keep]
    data = ivf.normalized(vectors) if seg.metric == "cosine" else vectors.astype(np.float32)
    search = ivf.search_metric(seg.metric)
    book = seg.pq.codebook if seg.pq is not None else None
    model = await asyncio.get_running_loop().run_in_executor(
        decode_pool(), encode_with, data, seg.model.centroids, search, book)
    storage = await reader.open(model_of, ivf.STORAGE_FILE)
    flat = storage.schema.field(ivf.FLAT).type if ivf.FLAT in storage.schema.names else None
    table = storage_table(ids, model, nbits=seg.pq.nbits if seg.pq else 8,
                          transposed=seg.pq.transposed if seg.pq else True, flat_type=flat)
    meta = Index()
    meta.CopyFrom(model_of)
    for name_ in ("base_id", "created_at"):
        meta.ClearField(name_)  # type: ignore[arg-type]
    meta.uuid.uuid = _uuid.uuid4().bytes
    meta.name = name
    meta.dataset_version = ds.version
    write_bitmap(meta, pyroaring.BitMap(covers))
    del meta.files[:]
    for fname, size in await write_ivf_segment(reader, model_of, table, model["lengths"],
                                               index_dir(meta)):
        meta.files.add(path=fname, size_bytes=size)
    meta.created_at = int(time.time() * 1000)
    return meta


async def _options(ds: LanceDataset, index: Index, kind: str) -> dict[str, Any] | None:
    """The build options that rebuild ``index`` alike (an INVERTED index's analyzer)."""
    if kind != "INVERTED":
        return None
    segment = await open_inverted(index_reader(ds._ctx), index)
    return params_options(segment.params)


async def _optimize_one(ds: LanceDataset, segments: list[Index], merge: int | None,
                        ) -> tuple[list[Index], list[Index]]:
    """``(new segments, replaced segments)`` for one index (both empty: nothing to do)."""
    fragments = list(ds._snapshot.fragments)
    covered = pyroaring.BitMap()
    for ix in segments:
        covered |= read_bitmap(ix) or pyroaring.BitMap()
    fresh = [f for f in fragments if int(f.id) not in covered]
    count = len(segments) if merge is None else max(0, min(merge, len(segments)))
    merged = segments[len(segments) - count:]
    if not fresh and len(merged) <= 1:
        return [], []
    first = segments[-1]
    names = {int(f.id): f.name for f in ds._snapshot.schema.fields}
    if len(first.fields) != 1 or int(first.fields[0]) not in names:
        return [], []
    column = names[int(first.fields[0])]
    covers = pyroaring.BitMap(int(f.id) for f in fresh)
    for ix in merged:
        covers |= read_bitmap(ix) or pyroaring.BitMap()
    rows = [f for f in fragments if int(f.id) in covers]
    if type_url(first) in _KINDS:
        kind = _KINDS[type_url(first)]
        new = await scalar_segment(ds, kind, column, first.name, rows, covers,
                                   await _options(ds, first, kind))
    elif ivf.is_vector_index(first) and await is_ivf_segment(index_reader(ds._ctx), first):
        new = await _vector_segment(ds, column, first, first.name, rows, covers)
    else:
        return [], []  # a kind alance does not build
    return [new], merged


async def optimize_indices(ds: LanceDataset, *, index_names: Sequence[str] | None = None,
                           num_indices_to_merge: int | None = None,
                           retrain: bool = False) -> LanceDataset:
    """Index the fragments the indices do not cover (see the module docstring); returns the
    new version (``ds`` itself when there was nothing to do)."""
    if num_indices_to_merge is not None and (isinstance(num_indices_to_merge, bool)
                                             or num_indices_to_merge < 0):
        raise InvalidInputError("num_indices_to_merge must be a non-negative integer, not "
                                f"{num_indices_to_merge!r}")
    indices = user_indices(ds._snapshot.manifest_file.indices)
    names = list(indices) if index_names is None else list(index_names)
    missing = [n for n in names if n not in indices]
    if missing:
        raise IndexNotFoundError(f"no index named {missing[0]!r}")
    if retrain:
        return await _retrain(ds, names, indices)
    added: list[Index] = []
    removed: list[Index] = []
    for name in names:
        new, old = await _optimize_one(ds, indices[name], num_indices_to_merge)
        added += new
        removed += old
    if not added:
        return ds
    txn = new_create_index(ds.version, added, removed)
    snap = await commit_transaction(ds._store, ds._handler, ds._snapshot, txn,
                                    data_storage_version=ds.data_storage_version)
    return type(ds)(ds._store, ds._handler, snap)


async def _retrain(ds: LanceDataset, names: list[str],
                   indices: dict[str, list[Index]]) -> LanceDataset:
    """Rebuild the named indices from scratch (one commit each, as their creation)."""
    fields = {int(f.id): f.name for f in ds._snapshot.schema.fields}
    for name in names:
        first = indices[name][0]
        column = fields.get(int(first.fields[0])) if len(first.fields) == 1 else None
        if column is None:
            continue
        if type_url(first) in _KINDS:
            kind = _KINDS[type_url(first)]
            ds = await ds.create_scalar_index(column, kind, name,
                                              **(await _options(ds, first, kind) or {}))
        elif ivf.is_vector_index(first) and ivf.vector_kind(first) in ("IVF_FLAT", "IVF_PQ"):
            seg = await open_segment(index_reader(ds._ctx), first)
            pq = seg.pq
            ds = await ds.create_index(column, seg.kind, name, seg.metric,
                                       num_partitions=seg.model.num_partitions,
                                       num_sub_vectors=pq.num_sub_vectors if pq else None,
                                       num_bits=pq.nbits if pq else 8)
    return ds


__all__ = ["optimize_indices"]

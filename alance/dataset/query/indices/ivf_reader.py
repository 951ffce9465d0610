"""Reading IVF vector index segments through the dataset's store (see :mod:`.ivf`) and
searching their partitions: the IO layer over :mod:`.ivf`.

A segment's model (centroids, partition rows, PQ codebook) is read once per read context;
partitions are read on demand (one row range of ``auxiliary.idx`` each, cached with the
index reader's tables).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2, vector_index_pb2
from alance.dataset.query.indices import ivf
from alance.dataset.query.indices.reader import IndexReader
from alance.dataset.query.indices.types import index_dir, uuid_text
from alance.errors import CorruptFileError, UnsupportedFeatureError
from alance.io.plans import decode_pool


@dataclass(frozen=True)
class IvfSegment:
    """One opened IVF segment."""

    index: table_pb2.IndexMetadata
    kind: str                      # IVF_PQ / IVF_FLAT
    metric: str                    # l2 / cosine / dot
    model: ivf.IvfModel
    pq: ivf.PqModel | None
    storage: dict[str, Any]        # storage parameters

    @property
    def dimension(self) -> int:
        """Vector dimension."""
        return int(self.model.centroids.shape[1])


async def open_segment(reader: IndexReader, index: table_pb2.IndexMetadata) -> IvfSegment:
    """Read (once per read context) the model of one IVF segment."""
    cache: dict[bytes, IvfSegment] = reader.__dict__.setdefault("_ivf_segments", {})
    key = bytes(index.uuid.uuid)
    found = cache.get(key)
    if found is not None:
        return found
    head, storage = await asyncio.gather(reader.open(index, ivf.INDEX_FILE),
                                         reader.open(index, ivf.STORAGE_FILE))
    head_meta = dict(head.schema.metadata or {})
    storage_meta = dict(storage.schema.metadata or {})
    kind, metric = ivf.index_metric(head_meta)
    if kind not in ("IVF_PQ", "IVF_FLAT"):
        raise UnsupportedFeatureError(f"index {index.name!r}: {kind} indices are not "
                                      "searched by alance yet")
    head_buf, storage_buf = await asyncio.gather(
        head.read_global_buffer(ivf.buffer_number(head_meta)),
        storage.read_global_buffer(ivf.buffer_number(storage_meta)))
    model = ivf.ivf_model(ivf.parse_ivf(head_buf), ivf.parse_ivf(storage_buf))
    params = ivf.storage_params(storage_meta)
    pq = None
    if kind == "IVF_PQ":
        raw = await storage.read_global_buffer(int(params["codebook_position"]))
        tensor = vector_index_pb2.Tensor()
        try:
            tensor.ParseFromString(raw)
        except Exception as exc:
            raise CorruptFileError(f"index {index.name!r}: bad PQ codebook") from exc
        pq = ivf.pq_model(params, tensor)
    if int(model.lengths.sum()) != storage.num_rows():
        raise CorruptFileError(f"index {index.name!r}: partitions hold "
                               f"{int(model.lengths.sum())} rows, storage {storage.num_rows()}")
    segment = IvfSegment(index, kind, metric, model, pq, params)
    cache[key] = segment
    return segment


async def partition(reader: IndexReader, segment: IvfSegment, part: int) -> pa.Table:
    """The storage rows (``_rowid`` and codes or vectors) of one partition."""
    start = int(segment.model.offsets[part])
    length = int(segment.model.lengths[part])
    if not length:
        return pa.table({ivf.ROW_ID: pa.array([], pa.uint64())})
    return await reader.table(segment.index, ivf.STORAGE_FILE, None, (start, start + length))


def _vectors(column: pa.ChunkedArray, dim: int) -> np.ndarray:
    arr = column.combine_chunks()
    values = arr.values.slice(arr.offset * dim, len(arr) * dim)
    return values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, dim)


def _codes(column: pa.ChunkedArray, width: int) -> np.ndarray:
    arr = column.combine_chunks()
    return arr.values.slice(arr.offset * width, len(arr) * width).to_numpy(
        zero_copy_only=False)


def score_partition(segment: IvfSegment, table: pa.Table, part: int,
                    query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(row ids, distances)`` of one partition's rows to the query (normalized for
    cosine): exact for IVF_FLAT, PQ estimates for IVF_PQ (CPU work; run off the loop)."""
    ids = table.column(ivf.ROW_ID).to_numpy().astype(np.uint64)
    if not len(ids):
        return ids, np.zeros(0, np.float32)
    metric = ivf.search_metric(segment.metric)
    if segment.pq is None:
        vectors = _vectors(table.column(ivf.FLAT), segment.dimension)
        if segment.metric == "cosine":  # l2 between unit vectors is twice the cosine distance
            dist = ivf.pairwise(ivf.normalized(vectors), query, "l2") / np.float32(2)
            return ids, dist.astype(np.float32)
        return ids, ivf.pairwise(vectors, query, metric)
    pq = segment.pq
    key = query
    if metric == "l2":  # codes quantize the residual to the partition centroid
        key = (query - segment.model.centroids[part]).astype(np.float32)
    dtable = ivf.distance_table(pq, key, segment.metric)
    codes = ivf.unpack_codes(pq, _codes(table.column(ivf.PQ_CODE), pq.code_bytes), len(ids))
    return ids, ivf.pq_distances(pq, dtable, codes, segment.metric)


async def search_partitions(reader: IndexReader, segment: IvfSegment, parts: np.ndarray,
                            query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row ids and distances of every row of the given partitions."""
    tables = await asyncio.gather(*(partition(reader, segment, int(p)) for p in parts))
    loop = asyncio.get_running_loop()

    def work() -> tuple[np.ndarray, np.ndarray]:
        found = [score_partition(segment, t, int(p), query) for p, t in zip(parts, tables,
                                                                           strict=True)]
        if not found:
            return np.zeros(0, np.uint64), np.zeros(0, np.float32)
        return (np.concatenate([f[0] for f in found]),
                np.concatenate([f[1] for f in found]))

    rows = sum(t.num_rows for t in tables)
    per_row = segment.dimension if segment.pq is None else segment.pq.num_sub_vectors
    if rows * per_row <= INLINE_SCORE_WORK:
        return work()  # less work than handing it to a thread and waking the loop again
    return await loop.run_in_executor(decode_pool(), work)


#: Partitions are scored on the event loop when rows x (dimensions, or PQ sub-vectors) is at
#: most this (well under a millisecond of numpy); more goes to a decoding thread.
INLINE_SCORE_WORK = 1 << 19


async def segment_stats(reader: IndexReader, index: table_pb2.IndexMetadata) -> dict[str, Any]:
    """pylance's statistics of one IVF segment."""
    seg = await open_segment(reader, index)
    root = reader.ctx.store.uri.rstrip("/")
    return ivf.segment_statistics(seg.kind, seg.metric, uuid_text(index),
                                  f"{root}/{index_dir(index)}/{ivf.INDEX_FILE}", seg.model,
                                  seg.storage)

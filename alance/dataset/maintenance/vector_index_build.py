"""Building IVF_FLAT / IVF_PQ vector indices in pylance's layout (see
:mod:`alance.dataset.query.indices.ivf`) and committing them.

k-means runs in numpy on a sample (at most 256 rows per centroid) with vectorised
assignment in bounded chunks, on the decode pool; every vector is then assigned to its
nearest centroid (the metric the search uses: l2, l2 on unit vectors for cosine, dot).
IVF_PQ trains one 256-centroid (or 16 for 4 bits) codebook per sub-vector on the residuals to
the partition centroid (l2 / cosine) or on the vectors (dot), and stores codes sub-vector-major
within each partition, as pylance does.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid as _uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyroaring

from alance._proto import table_pb2, vector_index_pb2
from alance.dataset.commit.loop import commit_transaction
from alance.dataset.maintenance.index_build import read_column
from alance.dataset.maintenance.index_files import write_index_file
from alance.dataset.query.indices import ivf
from alance.dataset.query.indices.describe import user_indices
from alance.dataset.query.indices.types import index_dir
from alance.dataset.query.vector_math import _matrix
from alance.errors import AlreadyExistsError, InvalidInputError
from alance.io.plans import decode_pool
from alance.transaction.indices import write_bitmap
from alance.transaction.operations import new_create_index

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset

_CHUNK = 8192
_VECTOR_URL = ivf.VECTOR_URLS[0]


def assign(vectors: np.ndarray, centroids: np.ndarray, metric: str) -> np.ndarray:
    """The nearest centroid of each row (search metric ``l2`` or ``dot``), in chunks."""
    out = np.empty(len(vectors), dtype=np.int64)
    norms = np.einsum("ij,ij->i", centroids, centroids)
    for start in range(0, len(vectors), _CHUNK):
        block = vectors[start:start + _CHUNK]
        dots = block @ centroids.T
        score = (norms[None, :] - 2 * dots) if metric == "l2" else -dots
        out[start:start + len(block)] = np.argmin(score, axis=1)
    return out


def kmeans(data: np.ndarray, k: int, metric: str, rng: np.random.Generator,
           iterations: int = 25) -> tuple[np.ndarray, float]:
    """``k`` centroids of ``data`` (float32) and the final loss (sum of squared distances)."""
    n = len(data)
    pick = rng.choice(n, size=k, replace=n < k)
    centroids = data[pick].astype(np.float32).copy()
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(iterations):
        labels = assign(data, centroids, metric)
        sums = np.zeros_like(centroids, dtype=np.float64)
        np.add.at(sums, labels, data)
        counts = np.bincount(labels, minlength=k)
        empty = counts == 0
        fresh = sums[~empty] / counts[~empty, None]
        if metric == "dot":
            norm = np.linalg.norm(fresh, axis=1, keepdims=True)
            fresh = np.where(norm > 0, fresh / np.maximum(norm, 1e-12), fresh)
        moved = centroids.copy()
        moved[~empty] = fresh.astype(np.float32)
        if empty.any():  # restart empty clusters at random rows
            moved[empty] = data[rng.choice(n, size=int(empty.sum()))]
        if np.allclose(moved, centroids, atol=1e-6):
            centroids = moved
            break
        centroids = moved
    diff = data - centroids[labels]
    return centroids, float(np.einsum("ij,ij->", diff, diff))


def _sample(data: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    return data if len(data) <= size else data[np.sort(rng.choice(len(data), size, False))]


def encode_with(data: np.ndarray, centroids: np.ndarray, search: str,
                codebook: np.ndarray | None) -> dict[str, Any]:
    """Assign (already normalized for cosine) vectors to the nearest of ``centroids`` and,
    with a PQ ``codebook`` (sub-vectors, centroids, width), encode their residuals (l2) or
    themselves (dot): the rows in partition order (``order``), their ``labels``, the
    partitions' ``lengths`` and ``codes`` or ``vectors`` (CPU work; run off the loop)."""
    labels = assign(data, centroids, search)
    order = np.argsort(labels, kind="stable")
    out: dict[str, Any] = {"order": order, "labels": labels[order],
                           "lengths": np.bincount(labels, minlength=len(centroids))}
    if codebook is None:
        out["vectors"] = data[order]
        return out
    residual = data - centroids[labels] if search == "l2" else data
    residual = residual[order].astype(np.float32)
    width = codebook.shape[2]
    codes = np.empty((len(residual), codebook.shape[0]), dtype=np.uint8)
    for m in range(codebook.shape[0]):
        codes[:, m] = assign(residual[:, m * width:(m + 1) * width], codebook[m], "l2")
    out["codes"] = codes
    return out


def build_model(vectors: np.ndarray, kind: str, metric: str, partitions: int,
                sub_vectors: int, nbits: int, seed: int = 0) -> dict[str, Any]:
    """Train the index and encode every vector (CPU work; run off the loop)."""
    rng = np.random.default_rng(seed)
    search = ivf.search_metric(metric)
    data = ivf.normalized(vectors) if metric == "cosine" else vectors.astype(np.float32)
    centroids, loss = kmeans(_sample(data, 256 * partitions, rng), partitions, search, rng)
    books = None
    if kind == "IVF_PQ":
        labels = assign(data, centroids, search)
        residual = (data - centroids[labels] if search == "l2" else data).astype(np.float32)
        width = data.shape[1] // sub_vectors
        count = 1 << nbits
        train = _sample(residual, 256 * count, rng)
        books = np.empty((sub_vectors, count, width), dtype=np.float32)
        for m in range(sub_vectors):
            books[m], _ = kmeans(train[:, m * width:(m + 1) * width], count, "l2", rng,
                                 iterations=15)
    out = encode_with(data, centroids, search, books)
    out.update(centroids=centroids, loss=loss)
    if books is not None:
        out["codebook"] = books
    return out


def storage_table(ids: np.ndarray, model: dict[str, Any], *, nbits: int = 8,
                  transposed: bool = True, flat_type: pa.DataType | None = None) -> pa.Table:
    """``auxiliary.idx``'s rows for an encoded model (:func:`encode_with`): ``_rowid`` and
    the vectors (``flat``) or the PQ codes (sub-vector-major within each partition when
    ``transposed``), partition by partition."""
    row_ids = pa.array(np.asarray(ids)[model["order"]], pa.uint64())
    if "vectors" in model:
        vectors = model["vectors"]
        dim = vectors.shape[1]
        flat = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)
        field = pa.field("flat", flat_type or pa.list_(pa.float32(), dim), nullable=False)
        return pa.table([row_ids, flat.cast(field.type)],
                        schema=pa.schema([pa.field("_rowid", pa.uint64()), field]))
    codes = model["codes"]
    width = codes.shape[1] // 2 if nbits == 4 else codes.shape[1]
    packed = np.empty((len(codes), width), dtype=np.uint8)
    start = 0
    for n in model["lengths"].tolist():
        packed[start:start + n] = ivf.pack_codes(nbits, codes[start:start + n], transposed)
        start += n
    code = pa.FixedSizeListArray.from_arrays(pa.array(packed.reshape(-1)), width)
    return pa.table([row_ids, code], schema=pa.schema([
        pa.field("_rowid", pa.uint64()), pa.field(ivf.PQ_CODE, pa.list_(pa.uint8(), width))]))


def _ivf_message(model: dict[str, Any], *, with_centroids: bool) -> bytes:
    msg = vector_index_pb2.IVF()
    lengths = model["lengths"]
    if with_centroids:
        c = model["centroids"].astype("<f4")
        msg.centroids_tensor.data_type = vector_index_pb2.Tensor.FLOAT32
        msg.centroids_tensor.shape.extend(c.shape)
        msg.centroids_tensor.data = c.tobytes()
        msg.loss = model["loss"]
        msg.offsets.extend([0] * len(lengths))
        msg.lengths.extend([0] * len(lengths))
    else:
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        msg.offsets.extend(offsets.tolist())
        msg.lengths.extend(lengths.tolist())
    return msg.SerializeToString()


async def create_vector_index(ds: LanceDataset, column: str, index_type: str,
                              name: str | None = None, metric: str = "l2", *,
                              replace: bool = True, num_partitions: int | None = None,
                              num_sub_vectors: int | None = None, num_bits: int = 8,
                              ) -> LanceDataset:
    """Build an IVF_FLAT / IVF_PQ index on ``column`` and commit it."""
    kind = index_type.strip().upper()
    if kind not in ("IVF_FLAT", "IVF_PQ"):
        raise InvalidInputError(f"unsupported vector index type {index_type!r}; alance builds "
                                "IVF_FLAT and IVF_PQ")
    metric = {"euclidean": "l2"}.get(metric.lower(), metric.lower())
    if metric not in ("l2", "cosine", "dot"):
        raise InvalidInputError(f"unsupported metric {metric!r} (l2, cosine, dot)")
    field = next((f for f in ds.lance_schema.fields if f.name == column), None)
    if field is None:
        raise InvalidInputError(f"column {column!r} is not in the dataset")
    name = name or f"{column}_idx"
    existing = user_indices(ds._snapshot.manifest_file.indices).get(name, [])
    if existing and not replace:
        raise AlreadyExistsError(f"Index name '{name}' already exists")
    values, ids = await read_column(ds, column, row_ids=True)
    t = values.type.storage_type if isinstance(values.type, pa.ExtensionType) else values.type
    if not pa.types.is_fixed_size_list(t):
        raise InvalidInputError(f"a vector index needs a fixed-size list column, {column!r} "
                                f"is {values.type}")
    dim = t.list_size
    vectors, valid = _matrix(values, dim)
    keep = valid & np.isfinite(vectors).all(axis=1)
    vectors, ids = vectors[keep], ids[keep]
    partitions = int(num_partitions or max(1, int(np.sqrt(max(len(vectors), 1)))))
    if len(vectors) < partitions:
        raise InvalidInputError(f"{len(vectors)} vectors cannot make {partitions} partitions")
    subs = int(num_sub_vectors or max(1, dim // 8)) if kind == "IVF_PQ" else 0
    if kind == "IVF_PQ" and (dim % subs or num_bits not in (4, 8)
                             or (num_bits == 4 and subs % 2)):
        raise InvalidInputError(f"IVF_PQ: {dim} dimensions cannot make {subs} sub-vectors "
                                f"of {num_bits} bits")
    model = await asyncio.get_running_loop().run_in_executor(
        decode_pool(), build_model, vectors, kind, metric, partitions, subs, num_bits)
    meta = table_pb2.IndexMetadata()
    meta.fields.append(int(field.id))
    meta.uuid.uuid = _uuid.uuid4().bytes
    meta.name = name
    meta.dataset_version = ds.version
    directory = index_dir(meta)
    storage = storage_table(ids, model, nbits=num_bits)
    if kind == "IVF_FLAT":
        params: dict[str, Any] = {"dim": dim}
        buffers = [_ivf_message(model, with_centroids=False)]
    else:
        params = {"codebook_position": 2, "nbits": num_bits, "num_sub_vectors": subs,
                  "dimension": dim, "codebook_tensor": [], "transposed": True}
        book = vector_index_pb2.Tensor(data_type=vector_index_pb2.Tensor.FLOAT32,
                                       shape=[1 << num_bits, dim],
                                       data=model["codebook"].astype("<f4").tobytes())
        buffers = [_ivf_message(model, with_centroids=False), book.SerializeToString()]
    storage_size = await write_index_file(
        ds._store, f"{directory}/{ivf.STORAGE_FILE}", storage,
        metadata={"lance:ivf": "1", "distance_type": metric,
                  "storage_metadata": json.dumps([json.dumps(params, separators=(",", ":"))])},
        buffers=buffers)
    head = pa.schema([pa.field("__flat_marker", pa.uint64(), nullable=False)]).empty_table()
    head_size = await write_index_file(
        ds._store, f"{directory}/{ivf.INDEX_FILE}", head,
        metadata={"lance:index": json.dumps({"type": kind, "distance_type": metric},
                                            separators=(",", ":")),
                  "lance:ivf": "1", "lance:flat": json.dumps([""] * partitions)},
        buffers=[_ivf_message(model, with_centroids=True)])
    details = vector_index_pb2.VectorIndexDetails()
    details.metric_type = ivf.metric_number(metric)  # type: ignore[assignment]
    if kind == "IVF_PQ":
        details.product_quantization.num_bits = num_bits
        details.product_quantization.num_sub_vectors = subs
    else:
        details.flat.SetInParent()
    meta.index_details.type_url = _VECTOR_URL
    meta.index_details.value = details.SerializeToString()
    meta.index_version = 1
    meta.created_at = int(time.time() * 1000)
    write_bitmap(meta, pyroaring.BitMap(int(f.id) for f in ds._snapshot.fragments))
    meta.files.add(path=ivf.STORAGE_FILE, size_bytes=storage_size)
    meta.files.add(path=ivf.INDEX_FILE, size_bytes=head_size)
    txn = new_create_index(ds.version, [meta], existing)
    snap = await commit_transaction(ds._store, ds._handler, ds._snapshot, txn,
                                    data_storage_version=ds.data_storage_version)
    return type(ds)(ds._store, ds._handler, snap)

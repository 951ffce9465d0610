"""IVF vector indices (IVF_FLAT, IVF_PQ) as pylance writes them: the format, no IO.

An index segment is two Lance files under ``_indices/{uuid}/``:

* ``index.idx`` has no rows; its schema metadata holds ``lance:index`` (JSON: the index type
  and distance type) and ``lance:ivf`` (the number of the global buffer holding the IVF
  model: the partition centroids as a tensor, and the k-means loss).
* ``auxiliary.idx`` holds the vectors' storage sorted by partition: ``_rowid`` and either
  ``flat`` (the vectors, normalized for cosine) or ``__pq_code`` (product-quantization codes
  of the vectors' residuals to their partition centroid for l2/cosine, of the vectors for
  dot). Its ``lance:ivf`` global buffer gives each partition's first row and row count,
  ``storage_metadata`` (JSON list with one JSON text) the storage parameters; for PQ the
  codebook is the global buffer ``codebook_position``, and ``transposed`` codes are stored
  sub-vector-major within each partition.

Distances are Lance's: ``l2`` squared euclidean, ``cosine`` as l2 between normalized
vectors (the search) and ``dot`` as ``1 - x.y``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2, vector_index_pb2
from alance.errors import CorruptFileError, UnsupportedFeatureError

#: Type URLs of vector index details (pylance 14 writes the first).
VECTOR_URLS = ("/lance.index.pb.VectorIndexDetails", "/lance.table.VectorIndexDetails")
INDEX_FILE = "index.idx"
STORAGE_FILE = "auxiliary.idx"
ROW_ID = "_rowid"
PQ_CODE = "__pq_code"
FLAT = "flat"
_METRIC_NAMES = {0: "l2", 1: "cosine", 2: "dot", 3: "hamming"}
_METRIC_NUMBERS = {v: k for k, v in _METRIC_NAMES.items()}
_DTYPES = {1: np.float16, 2: np.float32, 3: np.float64, 4: np.uint8, 5: np.uint16,
           6: np.uint32, 7: np.uint64}


def is_vector_index(index: table_pb2.IndexMetadata) -> bool:
    """Whether the manifest entry is a vector index."""
    return index.HasField("index_details") and index.index_details.type_url in VECTOR_URLS


def details_of(index: table_pb2.IndexMetadata) -> vector_index_pb2.VectorIndexDetails:
    """The index's vector details (empty for old indices that record none)."""
    out = vector_index_pb2.VectorIndexDetails()
    try:
        out.ParseFromString(index.index_details.value)
    except Exception as exc:  # protobuf's DecodeError
        raise CorruptFileError(f"index {index.name!r}: bad vector index details") from exc
    return out


def kind_of_details(details: vector_index_pb2.VectorIndexDetails) -> str | None:
    """``IVF_PQ`` / ``IVF_FLAT`` from the details, ``None`` when they do not say."""
    if details.HasField("product_quantization"):
        return "IVF_PQ"
    if details.HasField("flat"):
        return "IVF_FLAT"
    return None


def vector_kind(index: table_pb2.IndexMetadata) -> str | None:
    """The vector index type pylance reports (``IVF_PQ``...), if the manifest says."""
    if not is_vector_index(index):
        return None
    return kind_of_details(details_of(index))


def metric_name(number: int) -> str:
    """``l2`` / ``cosine`` / ``dot`` for the details' metric number."""
    return _METRIC_NAMES.get(int(number), "l2")


def metric_number(name: str) -> int:
    """The details' metric number of a metric name."""
    return _METRIC_NUMBERS[name]


def tensor_array(tensor: vector_index_pb2.Tensor) -> np.ndarray:
    """A tensor as a numpy array of its shape."""
    dtype = _DTYPES.get(int(tensor.data_type))
    if dtype is None:
        raise UnsupportedFeatureError(f"tensor of data type {tensor.data_type} is not supported")
    flat = np.frombuffer(tensor.data, dtype=np.dtype(dtype).newbyteorder("<"))
    shape = tuple(int(s) for s in tensor.shape)
    if int(np.prod(shape)) != len(flat):
        raise CorruptFileError(f"tensor of shape {shape} holds {len(flat)} values")
    return flat.reshape(shape)


@dataclass(frozen=True)
class IvfModel:
    """Partition centroids and each partition's rows in the storage file."""

    centroids: np.ndarray          # (partitions, dim) float32
    offsets: np.ndarray            # first storage row of each partition
    lengths: np.ndarray            # rows of each partition
    loss: float | None

    @property
    def num_partitions(self) -> int:
        """Number of partitions."""
        return len(self.centroids) if len(self.centroids) else len(self.lengths)


def parse_ivf(data: bytes) -> vector_index_pb2.IVF:
    """The IVF message of a ``lance:ivf`` global buffer."""
    msg = vector_index_pb2.IVF()
    try:
        msg.ParseFromString(data)
    except Exception as exc:
        raise CorruptFileError("bad IVF model in a vector index file") from exc
    return msg


def ivf_model(centroid_msg: vector_index_pb2.IVF, storage_msg: vector_index_pb2.IVF,
              ) -> IvfModel:
    """The model from ``index.idx``'s IVF message (centroids) and ``auxiliary.idx``'s
    (partition rows)."""
    if centroid_msg.HasField("centroids_tensor"):
        centroids = tensor_array(centroid_msg.centroids_tensor).astype(np.float32)
    else:
        raw = np.asarray(centroid_msg.centroids, dtype=np.float32)
        centroids = raw.reshape(len(storage_msg.lengths), -1) if len(raw) else raw
    lengths = np.asarray(storage_msg.lengths, dtype=np.int64)
    offsets = np.asarray(storage_msg.offsets, dtype=np.int64)
    if len(offsets) != len(lengths) or (len(centroids) and len(centroids) != len(lengths)):
        raise CorruptFileError(f"IVF model: {len(centroids)} centroids, {len(offsets)} "
                               f"offsets, {len(lengths)} lengths")
    loss = centroid_msg.loss if centroid_msg.HasField("loss") else None
    return IvfModel(centroids, offsets, lengths, loss)


@dataclass(frozen=True)
class PqModel:
    """Product quantization: ``codebook[m, c]`` is centroid ``c`` of sub-vector ``m``."""

    codebook: np.ndarray           # (num_sub_vectors, 2**nbits, dim / num_sub_vectors)
    nbits: int
    num_sub_vectors: int
    dimension: int
    transposed: bool

    @property
    def code_bytes(self) -> int:
        """Bytes of one row's code."""
        return self.num_sub_vectors // 2 if self.nbits == 4 else self.num_sub_vectors


def storage_params(metadata: dict[bytes, bytes]) -> dict[str, Any]:
    """The storage parameters of ``auxiliary.idx`` (its ``storage_metadata``)."""
    raw = metadata.get(b"storage_metadata")
    if raw is None:
        raise CorruptFileError("vector index storage has no storage_metadata")
    try:
        items = json.loads(raw)
        return dict(json.loads(items[0])) if items else {}
    except (ValueError, TypeError, IndexError) as exc:
        raise CorruptFileError("bad storage_metadata in a vector index") from exc


def pq_model(params: dict[str, Any], codebook: vector_index_pb2.Tensor) -> PqModel:
    """The PQ model from the storage parameters and the codebook tensor."""
    nbits = int(params.get("nbits", 8))
    m = int(params["num_sub_vectors"])
    dim = int(params["dimension"])
    if nbits not in (4, 8) or not m or dim % m:
        raise UnsupportedFeatureError(f"PQ with {nbits} bits, {m} sub-vectors of {dim} "
                                      "dimensions is not supported")
    flat = tensor_array(codebook).astype(np.float32).reshape(-1)
    centroids = 1 << nbits
    if len(flat) != centroids * dim:
        raise CorruptFileError(f"PQ codebook holds {len(flat)} values, not {centroids * dim}")
    return PqModel(flat.reshape(m, centroids, dim // m), nbits, m, dim,
                   bool(params.get("transposed", False)))


def index_metric(metadata: dict[bytes, bytes]) -> tuple[str, str]:
    """``(type, distance type)`` from ``index.idx``'s ``lance:index``."""
    raw = metadata.get(b"lance:index")
    if raw is None:
        raise CorruptFileError("vector index file has no lance:index metadata")
    try:
        info = json.loads(raw)
    except ValueError as exc:
        raise CorruptFileError("bad lance:index metadata") from exc
    return str(info.get("type", "")), str(info.get("distance_type", "l2")).lower()


def buffer_number(metadata: dict[bytes, bytes], key: bytes = b"lance:ivf") -> int:
    """The global buffer a metadata key points at."""
    raw = metadata.get(key)
    if raw is None:
        raise CorruptFileError(f"vector index file has no {key.decode()} metadata")
    try:
        return int(raw)
    except ValueError as exc:
        raise CorruptFileError(f"bad {key.decode()} metadata {raw!r}") from exc


# -- the search arithmetic ---------------------------------------------------------------------
def normalized(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(norms > 0, v / norms, v)
    return out.astype(np.float32, copy=False)


def search_metric(metric: str) -> str:
    """The metric partitions and storage are searched with (cosine is l2 on unit vectors)."""
    return "l2" if metric == "cosine" else metric


def pairwise(vectors: np.ndarray, query: np.ndarray, metric: str) -> np.ndarray:
    """Distances of rows to one query with a search metric (``l2`` or ``dot``)."""
    if metric == "dot":
        return (1.0 - vectors @ query).astype(np.float32)
    diff = vectors - query
    return np.einsum("ij,ij->i", diff, diff).astype(np.float32)


def find_partitions(model: IvfModel, query: np.ndarray, metric: str, count: int) -> np.ndarray:
    """The ``count`` partitions nearest to the (already normalized for cosine) query."""
    dist = pairwise(model.centroids, query, search_metric(metric))
    order = np.argsort(dist, kind="stable")
    return order[: max(0, min(count, len(order)))]


def distance_table(pq: PqModel, query: np.ndarray, metric: str) -> np.ndarray:
    """(num_sub_vectors, 2**nbits) distances of each query sub-vector to each centroid."""
    sub = query.astype(np.float32).reshape(pq.num_sub_vectors, 1, -1)
    if search_metric(metric) == "dot":
        return (1.0 - np.einsum("mcd,mld->mc", pq.codebook, sub)).astype(np.float32)
    diff = pq.codebook - sub
    return np.einsum("mcd,mcd->mc", diff, diff).astype(np.float32)


def unpack_codes(pq: PqModel, raw: np.ndarray, rows: int) -> np.ndarray:
    """(rows, num_sub_vectors) centroid numbers from one partition's code bytes."""
    flat = np.asarray(raw, dtype=np.uint8).reshape(-1)
    codes = (flat.reshape(pq.code_bytes, rows).T if pq.transposed
             else flat.reshape(rows, pq.code_bytes))
    if pq.nbits == 4:
        out = np.empty((rows, pq.num_sub_vectors), dtype=np.uint8)
        out[:, 0::2] = codes & 0x0F
        out[:, 1::2] = codes >> 4
        return out
    return codes


def pq_distances(pq: PqModel, table: np.ndarray, codes: np.ndarray, metric: str) -> np.ndarray:
    """Approximate distances of coded rows (from :func:`unpack_codes`) to the query."""
    # Sub-vector by sub-vector, adding in order (0, 1, ...) as Lance sums a row's table
    # entries; each step is one lookup over a column of codes.
    by_sub = codes.T
    dist = table[0].astype(np.float32, copy=False)[by_sub[0]]
    for j in range(1, pq.num_sub_vectors):
        dist += table[j][by_sub[j]]
    if search_metric(metric) == "dot":
        dist = dist - np.float32(pq.num_sub_vectors - 1)
    return dist.astype(np.float32, copy=False)


def pack_codes(pq_nbits: int, codes: np.ndarray, transposed: bool) -> np.ndarray:
    """One partition's (rows, num_sub_vectors) codes as the bytes stored per row."""
    codes = np.asarray(codes, dtype=np.uint8)
    if pq_nbits == 4:
        codes = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    if transposed:
        return np.ascontiguousarray(codes.T).reshape(codes.shape)
    return codes


# -- what describe / statistics report ---------------------------------------------------------
_COMPRESSION_NAMES = {"IVF_PQ": "pq"}


def details_dict(details: vector_index_pb2.VectorIndexDetails) -> dict[str, Any]:
    """pylance's ``IndexDescription.details`` of a vector index."""
    out: dict[str, Any] = {"metric_type": {"l2": "L2", "cosine": "COSINE", "dot": "DOT",
                                           "hamming": "HAMMING"}[
                                               metric_name(details.metric_type)]}
    if details.HasField("product_quantization"):
        pq = details.product_quantization
        out["compression"] = {"type": "pq", "num_bits": int(pq.num_bits),
                              "num_sub_vectors": int(pq.num_sub_vectors)}
    if details.build_params:
        out["runtime_hints"] = dict(details.build_params)
    return out


def segment_statistics(kind: str, metric: str, uuid: str, uri: str, model: IvfModel,
                       storage: dict[str, Any]) -> dict[str, Any]:
    """pylance's statistics of one IVF segment."""
    sub = {k: v for k, v in storage.items()
           if k not in ("codebook_position", "codebook", "codebook_tensor")}
    if kind == "IVF_PQ":
        sub["index_type"] = "PQ"
        sub["metric_type"] = search_metric(metric)
    else:
        sub["index_type"] = "FLAT"
        sub["metric_type"] = metric
    return {"index_type": kind, "uuid": uuid, "uri": uri, "metric_type": metric,
            "num_partitions": model.num_partitions, "sub_index": sub,
            "partitions": [{"size": int(n)} for n in model.lengths],
            "centroids": model.centroids.astype(np.float64).tolist(),
            "loss": model.loss, "index_file_version": "V3"}


# -- remapping storage after compaction ---------------------------------------------------------
def remap_storage(table: pa.Table, lengths: np.ndarray,
                  remap: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
                  transposed: bool) -> tuple[pa.Table, np.ndarray]:
    """``auxiliary.idx`` rows with ``_rowid`` passed through ``remap`` (new ids, and whether
    each row still exists), rows that no longer exist dropped, partitions kept in order;
    ``transposed`` PQ codes (sub-vector-major within each partition) are laid out again for
    the partitions' new sizes. Returns the table and the new partition lengths."""
    lengths = np.asarray(lengths, dtype=np.int64)
    new_ids, kept = remap(table.column(ROW_ID).to_numpy().astype(np.uint64))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    new_lengths = np.asarray([int(kept[s:s + n].sum()) for s, n in zip(
        starts.tolist(), lengths.tolist(), strict=True)], dtype=np.int64)
    out = table.filter(pa.array(kept))
    out = out.set_column(out.schema.get_field_index(ROW_ID), out.schema.field(ROW_ID),
                         pa.array(new_ids[kept], pa.uint64()))
    if transposed and PQ_CODE in table.column_names:
        column = table.column(PQ_CODE).combine_chunks()
        width = column.type.list_size
        flat = column.values.slice(column.offset * width, len(column) * width).to_numpy(
            zero_copy_only=False)
        parts = []
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True):
            rows = flat[s * width:(s + n) * width].reshape(width, n).T[kept[s:s + n]]
            parts.append(np.ascontiguousarray(rows.T).reshape(-1))
        codes = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        field = out.schema.field(PQ_CODE)
        out = out.set_column(out.schema.get_field_index(PQ_CODE), field,
                             pa.FixedSizeListArray.from_arrays(pa.array(codes, pa.uint8()),
                                                               type=field.type))
    return out, new_lengths


def with_partition_lengths(message: vector_index_pb2.IVF, lengths: np.ndarray) -> bytes:
    """The storage IVF message with new partition lengths (and the offsets they imply)."""
    out = vector_index_pb2.IVF()
    out.CopyFrom(message)
    lengths = np.asarray(lengths, dtype=np.int64)
    del out.offsets[:]
    del out.lengths[:]
    out.offsets.extend(np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64).tolist())
    out.lengths.extend(lengths.tolist())
    return out.SerializeToString()

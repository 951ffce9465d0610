"""Rewriting rows that hold blob columns: from the descriptors data files store to the bytes
the file writer takes.

Paths that rewrite rows (compaction, update) read a blob column as its descriptors
(:func:`read_fields`); :func:`with_blob_bytes` then finds each row's bytes
(:func:`alance.format.v2.blob.locate`), fetches them with range reads of the store and
hands the rows on with the blob columns in the form writers accept (blob v2: the
``data``/``uri``/``position``/``size`` storage struct with ``data`` set; blob v1: binary).
Memory stays bounded: a batch is cut into slices of at most ``max_bytes`` blob bytes
(one row alone may be larger), and only one slice's bytes are held at a time.

External blobs (a URI outside the dataset) are refused: alance's writer only writes bytes
it holds (UnsupportedFeatureError).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2
from alance.dataset.fragments.read import TOMBSTONE_FIELD_ID, ReadContext
from alance.errors import CorruptFileError, NotFoundError, UnsupportedFeatureError
from alance.format.manifest import DATA_DIR
from alance.format.schema import LanceField, LanceSchema
from alance.format.v2.blob import BlobLocation, blob_version, descriptor_field, locate
from alance.format.v2.kernels import range_indices
from alance.io.store import DatasetStore

#: Blob bytes fetched and handed on per slice (as many as the writer takes per call).
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: Ranges of one object closer than this are fetched as one span.
_GAP = 8 * 1024
#: Objects read from at once.
_CONCURRENCY = 8


def blob_fields(schema: LanceSchema) -> list[LanceField]:
    """The top-level blob columns (blob v1 or v2) of ``schema``."""
    return [f for f in schema.fields if blob_version(f) is not None]


def read_fields(schema: LanceSchema) -> list[LanceField]:
    """The fields to read for rewriting every column of ``schema``: blob columns as their
    descriptors, the others as they are."""
    return [descriptor_field(f) if blob_version(f) is not None else f for f in schema.fields]


def _owner(fragment: table_pb2.DataFragment, field: LanceField) -> table_pb2.DataFile | None:
    ids = {g.id for g in field.walk()}
    for f in fragment.files:
        if any(i in ids and i != TOMBSTONE_FIELD_ID for i in f.fields):
            return f
    return None


def _split(addresses: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(fragment id, positions in ``addresses``) for every fragment the addresses name."""
    frag_ids = (addresses >> np.uint64(32)).astype(np.int64)
    return [(int(fid), np.flatnonzero(frag_ids == fid)) for fid in np.unique(frag_ids)]


async def descriptors_at(ctx: ReadContext, fields: Sequence[LanceField],
                         addresses: np.ndarray) -> list[pa.Array]:
    """The descriptors of blob columns ``fields`` at row ``addresses`` (any order), in the
    order given: one array per field."""
    addresses = np.asarray(addresses, np.uint64)
    desc = [descriptor_field(f) for f in fields]
    by_id = {int(f.id): f for f in ctx.snapshot.fragments}
    parts: list[tuple[np.ndarray, pa.RecordBatch]] = []
    for fid, where in _split(addresses):
        frag = by_id.get(fid)
        if frag is None:
            raise CorruptFileError(f"row address names fragment {fid}, which is not in "
                                   f"version {ctx.snapshot.version}")
        offsets = (addresses[where] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        uniq, inverse = np.unique(offsets, return_inverse=True)
        batch = await ctx.fragment(frag).read_rows(desc, uniq)
        parts.append((where, batch.take(pa.array(inverse.ravel()))))
    if not parts:
        return [pa.array([], f.to_arrow().type) for f in desc]
    positions = np.concatenate([w for w, _ in parts])
    back = pa.array(np.argsort(positions, kind="stable"))
    return [pa.concat_arrays([b.column(i) for _, b in parts]).take(back)
            for i in range(len(desc))]


def _locations(ctx: ReadContext, field: LanceField, descriptors: pa.Array,
               addresses: np.ndarray) -> list[BlobLocation | None]:
    """Where every row's blob is (``None``: null), rows grouped by their fragment."""
    by_id = {int(f.id): f for f in ctx.snapshot.fragments}
    out: list[BlobLocation | None] = [None] * len(addresses)
    v2 = blob_version(field) == 2
    for fid, where in _split(addresses):
        data_file = _owner(by_id[fid], field)
        if data_file is None:
            continue  # no data file holds the column in this fragment: nulls
        version = (data_file.file_major_version, data_file.file_minor_version)
        found = locate(descriptors.take(pa.array(where)),
                       [f"{DATA_DIR}/{data_file.path}"] * len(where), v2=v2,
                       v1_null_marker=version in ((2, 0), (0, 3)))
        for slot, loc in zip(where.tolist(), found, strict=True):
            out[slot] = loc
    return out


async def _read_spans(store: DatasetStore, path: str, starts: np.ndarray, ends: np.ndarray,
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Bytes ``[starts[i], ends[i])`` of object ``path``, fetched as few spans: returns the
    spans' bytes concatenated and where each range starts in them."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > reach[:-1] + _GAP))
    span_of = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:], [len(s)])) - 1
    span_start, span_end = s[first], reach[last]
    try:
        bufs = await store.get_ranges(path, list(zip(span_start.tolist(), span_end.tolist(),
                                                     strict=True)))
    except NotFoundError as exc:
        raise CorruptFileError(f"blob file {path} is missing: {exc}") from exc
    except CorruptFileError as exc:
        raise CorruptFileError(f"blob file {path} is shorter than its descriptors say: "
                               f"{exc}") from exc
    joined = np.frombuffer(bufs[0], np.uint8) if len(bufs) == 1 else \
        np.concatenate([np.frombuffer(b, np.uint8) for b in bufs])
    base = np.concatenate(([0], np.cumsum(span_end - span_start)[:-1]))
    at = np.empty(len(s), np.int64)
    at[order] = base[span_of] + (s - span_start[span_of])
    return joined, at


async def fetch_blob_bytes(store: DatasetStore, locations: Sequence[BlobLocation | None],
                           ) -> pa.LargeBinaryArray:
    """The bytes of the blobs at ``locations`` as a binary array (null where the location is
    ``None``), fetched as few range reads of each object as their places allow."""
    n = len(locations)
    valid = np.fromiter((loc is not None for loc in locations), bool, n)
    external = [loc for loc in locations if loc is not None and loc.path is None]
    if external:
        raise UnsupportedFeatureError(
            f"an external blob ({external[0].uri}) cannot be rewritten: alance writes only "
            "blob bytes stored in the dataset")
    paths = [loc.path if loc is not None else "" for loc in locations]
    pos = np.fromiter((loc.position if loc is not None else 0 for loc in locations),
                      np.int64, n)
    size = np.fromiter((loc.size or 0 if loc is not None else 0 for loc in locations),
                       np.int64, n)
    wanted = size > 0
    if not wanted.any():
        return _assemble(np.zeros(0, np.uint8), np.zeros(n, np.int64), size, valid)
    names, path_idx = np.unique(np.array(paths, dtype=object), return_inverse=True)
    path_idx = path_idx.ravel()
    sem = asyncio.Semaphore(_CONCURRENCY)

    async def one(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = np.flatnonzero(wanted & (path_idx == k))
        async with sem:
            joined, at = await _read_spans(store, str(names[k]), pos[rows],
                                           pos[rows] + size[rows])
        return rows, joined, at

    groups = await asyncio.gather(*(one(k) for k in np.unique(path_idx[wanted]).tolist()))
    start = np.zeros(n, np.int64)
    shift = 0
    for rows, joined, at in groups:
        start[rows] = at + shift
        shift += len(joined)
    everything = groups[0][1] if len(groups) == 1 else np.concatenate([g[1] for g in groups])
    return _assemble(everything, start, size, valid)


def _assemble(data: np.ndarray, start: np.ndarray, size: np.ndarray, valid: np.ndarray,
              ) -> pa.LargeBinaryArray:
    """Row ``i``'s value is ``data[start[i]:start[i] + size[i]]`` (null where not
    ``valid``): cut ``data`` at every row's start and end into one binary array and take
    each row's piece (an Arrow take: no index per byte)."""
    n = len(size)
    used = valid & (size > 0)
    bounds = np.unique(np.concatenate(([0, len(data)], start[used], (start + size)[used])))
    piece = np.searchsorted(bounds, start)
    # a range that another row's boundary cuts (overlapping ranges): gather byte by byte
    cut = used & (bounds[np.minimum(piece + 1, len(bounds) - 1)] != start + size)
    if cut.any():
        data = data[range_indices(start[used], size[used])]
        start = np.zeros(n, np.int64)
        start[used] = np.concatenate(([0], np.cumsum(size[used])[:-1]))
        return _assemble(data, start, size, valid)
    # one extra empty piece at the end for empty values
    offsets = np.concatenate((bounds, [len(data)])).astype(np.int64)
    pieces = pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                   [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    idx = np.where(used, piece, len(offsets) - 2)
    out = pieces.take(pa.array(idx, mask=~valid))
    assert isinstance(out, pa.LargeBinaryArray)
    return out


def writer_input(field: LanceField, values: pa.LargeBinaryArray) -> pa.Array:
    """Blob ``values`` in the form the writer takes for ``field``: the blob v2 storage
    struct (``data`` set, the rest null; the row null where the value is) or blob v1
    binary."""
    target = field.to_arrow().type
    if blob_version(field) == 1:
        return values if values.type == target else values.cast(target)
    n = len(values)
    kids = [values] + [pa.nulls(n, t.type) for t in list(target)[1:]]
    mask = values.is_null() if values.null_count else None
    return pa.StructArray.from_arrays(kids, fields=list(target), mask=mask)


def _cuts(sizes: np.ndarray, max_bytes: int) -> list[tuple[int, int]]:
    """Consecutive row ranges holding at most ``max_bytes`` (at least one row each)."""
    n = len(sizes)
    if not n or int(sizes.sum()) <= max_bytes:
        return [(0, n)]
    csum = np.cumsum(sizes)
    out = []
    lo = 0
    while lo < n:
        base = int(csum[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(csum, base + max_bytes, side="right")), lo + 1)
        out.append((lo, hi))
        lo = hi
    return out


async def with_blob_bytes(ctx: ReadContext, schema: LanceSchema, batch: pa.RecordBatch,
                          addresses: np.ndarray, *, max_bytes: int | None = None,
                          ) -> AsyncIterator[pa.RecordBatch]:
    """``batch`` (blob columns of ``schema`` as descriptors, rows at ``addresses``) in
    slices of at most ``max_bytes`` (default :data:`DEFAULT_MAX_BYTES`) blob bytes, blob
    columns replaced by their values in the writer's input form (:func:`writer_input`).
    Other columns pass unchanged."""
    max_bytes = max_bytes or DEFAULT_MAX_BYTES
    fields = [f for f in blob_fields(schema) if f.name in batch.schema.names]
    if not fields or not batch.num_rows:
        if batch.num_rows or not fields:
            yield batch
        return
    addresses = np.asarray(addresses, np.uint64)
    located = [_locations(ctx, f, batch.column(f.name), addresses) for f in fields]
    sizes = np.zeros(batch.num_rows, np.int64)
    for locs in located:
        sizes += np.fromiter((loc.size or 0 if loc is not None else 0 for loc in locs),
                             np.int64, len(locs))
    for lo, hi in _cuts(sizes, max_bytes):
        piece = batch.slice(lo, hi - lo)
        columns = dict(zip(piece.schema.names, piece.columns, strict=True))
        types = {f.name: f.type for f in piece.schema}
        for f, locs in zip(fields, located, strict=True):
            values = writer_input(f, await fetch_blob_bytes(ctx.store, locs[lo:hi]))
            columns[f.name] = values
            types[f.name] = values.type
        yield pa.RecordBatch.from_arrays(
            list(columns.values()),
            schema=pa.schema([pa.field(n, types[n]) for n in columns]))


def scanned_columns(schema: LanceSchema) -> list[str]:
    """The columns a row-rewriting scan reads: all but the blob columns, whose descriptors
    :func:`complete_rows` reads for the selected rows only."""
    blobs = {f.name for f in blob_fields(schema)}
    return [n for n in schema.names if n not in blobs]


async def complete_rows(ctx: ReadContext, schema: LanceSchema, rows: pa.RecordBatch,
                        addresses: np.ndarray) -> AsyncIterator[pa.RecordBatch]:
    """Rows at ``addresses`` whose columns other than blob columns are ``rows``: every
    column of ``schema`` in order, blob columns with their bytes in the writer's input form,
    in slices of bounded blob bytes (see :func:`with_blob_bytes`)."""
    blobs = blob_fields(schema)
    if not blobs:
        yield rows
        return
    found = dict(zip([f.name for f in blobs], await descriptors_at(ctx, blobs, addresses),
                     strict=True))
    full = pa.RecordBatch.from_arrays(
        [found[n] if n in found else rows.column(n) for n in schema.names], names=schema.names)
    async for piece in with_blob_bytes(ctx, schema, full, addresses):
        yield piece


__all__ = ["DEFAULT_MAX_BYTES", "blob_fields", "complete_rows", "descriptors_at",
           "fetch_blob_bytes", "read_fields", "scanned_columns", "with_blob_bytes",
           "writer_input"]

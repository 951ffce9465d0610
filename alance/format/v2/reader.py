"""Reading 2.1+ data files through sans-IO plans (see :mod:`alance.format.legacy.plan`).

:func:`~alance.format.v2.container.open_file` reads the metadata; :class:`V2FileReader` plans
reads of row ranges and of selected rows. Every leaf column is read by its own plan and all
of them run in lockstep (:func:`gather`), so each step fetches the byte ranges of every
column at once. Page state that random access needs (mini-block chunk tables, dictionaries,
repetition indexes) is kept on the opened file and reused by later reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import (
    AlanceError,
    CorruptFileError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from alance.format.legacy.plan import Plan, coalesced, gather
from alance.format.schema import LanceField, LanceSchema
from alance.format.v2 import blob, fullzip, miniblock
from alance.format.v2.blocks import to_arrow
from alance.format.v2.compressive import block_values
from alance.format.v2.container import PageInfo, V2File
from alance.format.v2.leaf import (
    LeafData,
    build_array,
    concat_leaves,
    constant_block,
    empty_block,
    is_blob,
    leaves_of,
)
from alance.format.v2.levels import Layer, plan_levels, row_starts, unravel, visible_mask
from alance.format.v2.v20 import Rows20, read_field20

T = TypeVar("T")
#: Mini-block chunks of one page closer than this are fetched as one range (the page's
#: chunks are decoded together; the store may still merge further ranges by its own policy).
CHUNK_GAP = 0


class Rows:
    """Which page-local rows to read: a range, or sorted unique offsets."""

    def __init__(self, lo: int, hi: int, wanted: np.ndarray | None = None) -> None:
        self.lo, self.hi, self.wanted = lo, hi, wanted

    @property
    def count(self) -> int:
        """Rows selected."""
        return self.hi - self.lo if self.wanted is None else len(self.wanted)

    def whole(self, num_rows: int) -> bool:
        """Whether every row of a page of ``num_rows`` rows is selected."""
        return self.wanted is None and self.lo == 0 and self.hi == num_rows

    def array(self) -> np.ndarray:
        """The selected rows as an array."""
        return np.arange(self.lo, self.hi) if self.wanted is None else self.wanted


def _bytes(views: Sequence[bytes | memoryview]) -> list[np.ndarray]:
    return [np.frombuffer(v, dtype=np.uint8) for v in views]


def _read_miniblock(file: V2File, key: tuple[int, int], page: PageInfo,
                    layout: pb.MiniBlockLayout, rows: Rows) -> Plan[LeafData]:
    wide = layout.has_large_chunk
    state = file.page_state.get(key)
    whole = rows.whole(page.num_rows)
    prefetched = None
    if state is None:
        init = miniblock.init_buffers(layout, page.buffers)
        request = [(p, p + s) for p, s in init]
        if whole:
            p, s = page.buffers[1]
            request.append((p, p + s))
        got = yield request
        state = miniblock.build_state(layout, page.buffers, page.num_rows,
                                      list(got[: len(init)]), wide)
        file.page_state[key] = state
        if whole:
            prefetched = got[-1]
    n_chunks = len(state.counts)
    if whole:
        chunks = np.arange(n_chunks, dtype=np.int64)
    elif rows.wanted is None:
        chunks = miniblock.chunks_for_range(state, rows.lo, rows.hi)
    else:
        chunks = miniblock.chunks_for_rows(state, rows.wanted)
    if prefetched is not None:
        data = np.frombuffer(prefetched, dtype=np.uint8)
        starts = state.positions[chunks] - page.buffers[1][0]
    else:
        ranges = miniblock.chunk_ranges(state, chunks, CHUNK_GAP)
        got = yield ranges
        data, starts = miniblock.chunk_starts_in(_bytes(got), state, chunks,
                                                 CHUNK_GAP)
    rep, defs, values, row = miniblock.decode_chunks(layout, state, chunks, data, starts, wide,
                                                     rows.wanted)
    return miniblock.select_rows(layout, rep, defs, values, row, rows.wanted, rows.lo,
                                 rows.hi)


def _read_fullzip(file: V2File, key: tuple[int, int], page: PageInfo,
                  layout: pb.FullZipLayout, rows: Rows) -> Plan[LeafData]:
    base, size = page.buffers[0]
    sel = rows.array()
    stride = fullzip.row_stride(layout)
    if stride is not None and len(page.buffers) < 2:
        if stride * page.num_rows != size:
            raise CorruptFileError("full-zip page size does not match its rows")
        starts = base + sel * stride
        ends = starts + stride
    else:
        if len(page.buffers) < 2:
            raise CorruptFileError("variable full-zip page has no repetition index")
        width = fullzip.rep_index_width(page.buffers, page.num_rows)
        ipos = page.buffers[1][0]
        if rows.wanted is None:
            (raw,) = yield [(ipos + rows.lo * width, ipos + (rows.hi + 1) * width)]
            idx = fullzip.parse_rep_index(raw, width)
            starts, ends = base + idx[:-1], base + idx[1:]
        else:
            got = yield [(ipos + r * width, ipos + (r + 2) * width) for r in sel.tolist()]
            idx = fullzip.parse_rep_index(b"".join(bytes(g) for g in got), width)
            idx = idx.reshape(-1, 2)
            starts, ends = base + idx[:, 0], base + idx[:, 1]
    if len(sel) and (starts.min() < base or ends.max() > base + size
                     or (ends < starts).any()):
        raise CorruptFileError("full-zip repetition index points outside the page")
    # Merge adjacent rows into one request each.
    if len(sel) == 0:
        return fullzip.decode_rows(layout, np.zeros(0, np.uint8), starts - base, ends - base)
    brk = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    g_first = np.concatenate(([0], brk))
    g_last = np.concatenate((brk - 1, [len(sel) - 1]))
    ranges = list(zip(starts[g_first].tolist(), ends[g_last].tolist(), strict=True))
    got = yield ranges
    parts = _bytes(got)
    data = np.concatenate(parts) if len(parts) != 1 else parts[0]
    group = np.repeat(np.arange(len(g_first)), g_last - g_first + 1)
    lens = np.array([e - s for s, e in ranges], dtype=np.int64)
    group_base = np.concatenate(([0], np.cumsum(lens)[:-1]))
    rel = starts - starts[g_first][group] + group_base[group]
    return fullzip.decode_rows(layout, data, rel, rel + (ends - starts))


def _read_constant(page: PageInfo, layout: pb.ConstantLayout, rows: Rows,
                   dtype: pa.DataType) -> Plan[LeafData]:
    """A page whose items all hold one value (or are all null).

    Buffers: the value (a serialized scalar) when it is neither inline nor null, then the
    repetition and definition levels when the structure needs them (compressed as described
    in the layout, else plain u16).
    """
    plan = plan_levels(list(layout.layers))
    value = layout.inline_value if layout.HasField("inline_value") else None
    has_rep = layout.HasField("rep_compression")
    has_def = layout.HasField("def_compression")
    raw_rep = not has_rep and plan.max_rep > 0
    raw_def = not has_def and not has_rep and plan.max_def > 0
    nlev = int(has_rep or raw_rep) + int(has_def or raw_def)
    bufs = list(page.buffers)
    value_buf = None
    if value is None and len(bufs) > nlev:
        value_buf = bufs[0]
        bufs = bufs[1:]
    if len(bufs) > nlev:
        # Raw levels may come as a repetition buffer then a definition buffer, the unused one
        # stored empty (pylance 14 does this for a flat nullable column).
        bufs = [b for b in bufs if b[1] > 0]
    if len(bufs) < nlev:
        if raw_def and not raw_rep and not bufs:
            nlev, raw_def = 0, False  # nothing stored: every item is null
        else:
            raise CorruptFileError("constant page is missing its level buffers")
    fetch = ([value_buf] if value_buf else []) + bufs[:nlev]
    got: Sequence[bytes | memoryview] = []
    if fetch:
        got = yield [(p, p + s) for p, s in fetch]
    if value_buf is not None:
        value = bytes(got[0])
        got = got[1:]
    rep = defs = None
    k = 0
    if has_rep or raw_rep:
        rep = (_level_block(layout.rep_compression, got[k], int(layout.num_rep_values))
               if has_rep else np.frombuffer(got[k], "<u2").astype(np.uint16))
        k += 1
    if has_def or raw_def:
        defs = (_level_block(layout.def_compression, got[k], int(layout.num_def_values))
                if has_def else np.frombuffer(got[k], "<u2").astype(np.uint16))
    if rep is not None or defs is not None:
        n_items = len(rep) if rep is not None else len(defs)  # type: ignore[arg-type]
        if rep is not None and defs is not None and len(rep) != len(defs):
            raise CorruptFileError("constant page level counts differ")
        starts = row_starts(rep, plan, n_items)
        if len(starts) != page.num_rows:
            raise CorruptFileError("constant page levels disagree with its row count")
        is_start = np.zeros(n_items, dtype=np.int64)
        is_start[starts] = 1
        row = np.cumsum(is_start) - 1
        if rows.wanted is None:
            keep = (row >= rows.lo) & (row < rows.hi)
        else:
            keep = np.isin(row, rows.wanted)
        rep = None if rep is None else rep[keep]
        defs = None if defs is None else defs[keep]
        n = int(np.count_nonzero(keep))
    else:
        n = rows.count
        if value is None and plan.max_def > 0:
            first_null = next(lv for lv in plan.null_level if lv)
            defs = np.full(n, first_null, dtype=np.uint16)
    layers = unravel(rep, defs, plan, n)
    vis = visible_mask(defs, plan)
    n_vis = n if vis is None else int(np.count_nonzero(vis))
    values = (constant_block(dtype, n_vis, value) if value is not None
              else empty_block(dtype, n_vis))
    return LeafData(layers, values)


def _level_block(enc: pb.CompressiveEncoding, raw: bytes | memoryview, n: int) -> np.ndarray:
    block = block_values(enc, np.frombuffer(raw, np.uint8), n)
    vals = getattr(block, "values", None)
    if vals is None or len(vals) != n:
        raise CorruptFileError("constant page levels are malformed")
    return np.asarray(vals).astype(np.uint16)


def read_leaf(file: V2File, column: int, dtype: pa.DataType, rows: Rows) -> Plan[LeafData]:
    """Plan reading the given file rows of one leaf column."""
    info = file.column(column)
    parts: list[LeafData] = []
    if rows.wanted is None:
        pages = info.pages_for(rows.lo, rows.hi)
    else:
        which = np.searchsorted(info.page_starts, rows.wanted, side="right") - 1
        pages = range(0, 0) if len(which) == 0 else range(int(which[0]), int(which[-1]) + 1)
    plans: list[Plan[LeafData]] = []
    for p in pages:
        page = info.pages[p]
        lo, hi = page.first_row, page.first_row + page.num_rows
        if rows.wanted is None:
            local = Rows(max(rows.lo, lo) - lo, min(rows.hi, hi) - lo)
        else:
            a, b = np.searchsorted(rows.wanted, [lo, hi])
            if a == b:
                continue
            local = Rows(0, 0, rows.wanted[a:b] - lo)
        if local.count == 0:
            continue
        plans.append(_read_page(file, (column, p), page, local, dtype))
    parts = yield from gather(plans)
    if not parts:
        raise CorruptFileError(f"column {column} has no pages for the requested rows")
    return concat_leaves(parts)


def _read_page(file: V2File, key: tuple[int, int], page: PageInfo, rows: Rows,
               dtype: pa.DataType) -> Plan[LeafData]:
    enc: pb.PageLayout = page.encoding
    which = enc.WhichOneof("layout")
    if which == "mini_block_layout":
        return (yield from _read_miniblock(file, key, page, enc.mini_block_layout, rows))
    if which == "full_zip_layout":
        return (yield from _read_fullzip(file, key, page, enc.full_zip_layout, rows))
    if which == "constant_layout":
        return (yield from _read_constant(page, enc.constant_layout, rows, dtype))
    if which == "blob_layout":
        return (yield from _read_blob_page(file, key, page, enc.blob_layout, rows, dtype))
    raise UnsupportedFeatureError(f"page layout {which!r} is not supported yet")


def _read_blob_page(file: V2File, key: tuple[int, int], page: PageInfo,
                    layout: pb.BlobLayout, rows: Rows, dtype: pa.DataType) -> Plan[LeafData]:
    """A 2.1 blob v1 page: packed (position, size) descriptors in an inner layout, nulls
    marked inside them (see :mod:`alance.format.v2.blob`)."""
    if dtype != blob.STORED_V1:
        raise CorruptFileError("a blob page in a column that is not a blob column")
    inner = PageInfo(page.num_rows, page.first_row, page.buffers, layout.inner_layout)
    data = yield from _read_page(file, key, inner, rows, dtype)
    if len(data.layers) != 1:
        raise UnsupportedFeatureError("nested blob columns are not supported")
    valid = blob.v1_validity_from_smuggled(to_arrow(data.values, dtype, None))
    layer = Layer(None if valid.all() else valid, None, data.layers[0].size)
    return LeafData([layer], data.values)


def _read_blob_column(file: V2File, column: int, field: LanceField,
                      rows: Rows) -> Plan[pa.Array]:
    """The descriptors of a blob column (``field`` from :func:`blob.descriptor_field`)."""
    stored_type = blob.stored_type(field)
    data = yield from read_leaf(file, column, stored_type, rows)
    if len(data.layers) != 1:
        raise UnsupportedFeatureError("nested blob columns are not supported")
    stored = to_arrow(data.values, stored_type, None)
    return blob.descriptor_array(field, stored, data.layers[0].valid)


#: Low-level errors that, raised while decoding, can only mean the bytes are malformed.
_DECODE_ERRORS = (ValueError, IndexError, OverflowError, MemoryError, TypeError,
                  pa.ArrowException)


def _guarded(plan: Plan[T]) -> Plan[T]:
    """Run ``plan``, turning stray low-level decoding errors into CorruptFileError."""
    try:
        return (yield from plan)
    except AlanceError:
        raise
    except _DECODE_ERRORS as exc:
        raise CorruptFileError(f"malformed 2.x data: {type(exc).__name__}: {exc}") from exc


def _empty_batch(fields: list[LanceField]) -> pa.RecordBatch:
    schema = pa.schema([f.to_arrow() for f in fields])
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


class V2FileReader:
    """Plans reads of an opened 2.1+ file for a schema (ids and types of the dataset).

    ``columns`` maps leaf field ids to column indices (``DataFile.column_indices`` of the
    manifest); by default leaf fields are numbered in schema order.
    """

    def __init__(self, file: V2File, schema: LanceSchema | None = None, *,
                 columns: Mapping[int, int] | None = None) -> None:
        """Bind an opened file to the schema used to interpret it."""
        schema = schema if schema is not None else file.schema
        if schema is None:
            raise InvalidInputError("no schema: pass one")
        self.file = file
        self.schema = schema
        if columns is None and file.version == (2, 0):
            columns = {f.id: i for i, f in enumerate(schema.walk())}
        elif columns is None:
            leaves = [leaf for f in schema.fields for leaf in leaves_of(f)]
            columns = {leaf.id: i for i, leaf in enumerate(leaves)}
        self.columns = dict(columns)

    @property
    def num_rows(self) -> int:
        """Rows in the file."""
        return self.file.num_rows

    def _wrap(self, plan: Plan[T]) -> Plan[T]:
        return coalesced(_guarded(plan), file_size=self.file.file_size)

    def _project(self, projection: LanceSchema | Sequence[int] | None) -> list[LanceField]:
        if projection is None:
            return list(self.schema.fields)
        if isinstance(projection, LanceSchema):
            return list(projection.fields)
        wanted = set(projection)
        ids = [g.id for f in self.schema.walk() if f.id in wanted for g in f.walk()]
        return list(self.schema.with_ids(ids).fields)

    def _plan(self, fields: list[LanceField], rows: Rows) -> Plan[pa.RecordBatch]:
        for f in fields:
            nested = next((g for g in f.walk() if g is not f and is_blob(g)), None)
            if nested is not None and not blob.is_descriptor_field(f):
                raise UnsupportedFeatureError(
                    f"column {f.name!r} holds blob column {nested.name!r}; blob columns "
                    "inside other columns are not supported")
            if is_blob(f) and not blob.is_descriptor_field(f):
                raise UnsupportedFeatureError(
                    f"column {f.name!r} is a blob column: datasets return its descriptors "
                    "and take_blobs its bytes; operations that rewrite rows of blob columns "
                    "are not supported")
        if rows.count == 0:
            return _empty_batch(fields)
        if self.file.version == (2, 0):
            return (yield from self._plan20(fields, rows))
        plans: list[Plan[Any]] = []
        ids: list[int] = []
        blobs: dict[int, int] = {}  # field id -> index in plans
        for f in fields:
            if blob.is_descriptor_field(f):
                col = self.columns.get(f.id)
                if col is None or col < 0:
                    raise CorruptFileError(f"blob field {f.name!r} (id {f.id}) has no column "
                                           "in the data file")
                blobs[f.id] = len(plans)
                plans.append(_read_blob_column(self.file, col, f, rows))
                continue
            for leaf in leaves_of(f):
                col = self.columns.get(leaf.id)
                if col is None or col < 0:
                    raise CorruptFileError(f"field {leaf.name!r} (id {leaf.id}) has no column "
                                           "in the data file")
                ids.append(leaf.id)
                plans.append(read_leaf(self.file, col, leaf.data_type, rows))
        datas = yield from gather(plans)
        blob_arrays = {fid: datas[i] for fid, i in blobs.items()}
        datas = [d for i, d in enumerate(datas) if i not in set(blobs.values())]
        leaves: dict[int, Any] = dict(zip(ids, datas, strict=True))
        arrays = [blob_arrays[f.id] if f.id in blob_arrays else build_array(f, leaves)
                  for f in fields]
        schema = pa.schema([f.to_arrow() for f in fields])
        if not fields:
            return pa.RecordBatch.from_arrays([pa.nulls(rows.count)], ["_"]).select([])
        for a in arrays:
            if len(a) != rows.count:
                raise CorruptFileError(f"decoded {len(a)} rows, expected {rows.count}")
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _plan20(self, fields: list[LanceField], rows: Rows) -> Plan[pa.RecordBatch]:
        sel = Rows20(rows.lo, rows.hi, rows.wanted)
        # Blob descriptors are a packed (position, size) struct in 2.0 files.
        read_as = [replace(f, metadata={**f.metadata, blob.PACKED_META_KEY: b"true"},
                           children=[replace(c, nullable=False) for c in f.children])
                   if blob.is_descriptor_field(f) else f for f in fields]
        arrays = yield from gather([read_field20(self.file, f, self.columns, sel)
                                    for f in read_as])
        arrays = [blob.descriptor_array(f, a, None) if blob.is_descriptor_field(f) else a
                  for f, a in zip(fields, arrays, strict=True)]
        for a in arrays:
            if len(a) != rows.count:
                raise CorruptFileError(f"decoded {len(a)} rows, expected {rows.count}")
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([f.to_arrow()
                                                                    for f in fields]))

    def read_range(self, start: int, stop: int,
                   projection: LanceSchema | Sequence[int] | None = None,
                   ) -> Plan[pa.RecordBatch]:
        """Plan reading rows ``start..stop`` of the file."""
        if not 0 <= start <= stop <= self.num_rows:
            raise InvalidInputError(f"rows {start}..{stop} out of range 0..{self.num_rows}")
        return self._wrap(self._plan(self._project(projection), Rows(start, stop)))

    def take(self, rows: Sequence[int] | np.ndarray,
             projection: LanceSchema | Sequence[int] | None = None) -> Plan[pa.RecordBatch]:
        """Plan reading the given rows (file row offsets, in the order given)."""
        idx = np.asarray(rows, dtype=np.int64).ravel()
        if len(idx) and (idx.min() < 0 or idx.max() >= self.num_rows):
            raise InvalidInputError(f"row offsets out of range 0..{self.num_rows}")
        return self._wrap(self._take_plan(self._project(projection), idx))

    def _take_plan(self, fields: list[LanceField], idx: np.ndarray) -> Plan[pa.RecordBatch]:
        uniq, inverse = np.unique(idx, return_inverse=True)
        batch = yield from self._plan(fields, Rows(0, 0, uniq))
        if len(uniq) != len(idx) or not np.array_equal(uniq, idx):
            batch = batch.take(pa.array(inverse.ravel()))
        return batch


__all__ = ["CHUNK_GAP", "Rows", "V2FileReader", "read_leaf"]

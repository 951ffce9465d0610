"""Scans: projection, filter, limit/offset and system columns over a dataset version.

A scan is cut into *chunks* (runs of whole row groups of one fragment, about ``chunk_rows``
rows, at least ``batch_size``). Up to ``read_ahead`` chunks are read concurrently while results
stream out in dataset order; a scan that stops early (limit reached, consumer gone) cancels
what is still in flight. A scan into one table (:meth:`Scanner.to_table`) is cut into larger
chunks on local disk (the store's ``table_chunk_bytes``): it keeps every row anyway, and fewer
chunks mean fewer decoding steps.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.dataset.fragments.data_file import V2_ROW_STEP, chunk_rows_for
from alance.dataset.fragments.read import FragmentReader, ReadContext, live_rows
from alance.dataset.fragments.zone_maps import learnable
from alance.dataset.query import plan_text
from alance.dataset.query.indices.planner import (
    describe_plan,
    plan_filter,
)
from alance.dataset.query.indices.planner import (
    evaluate as index_evaluate,
)
from alance.dataset.query.indices.planner import (
    runs as index_runs,
)
from alance.dataset.query.projection import (
    ROW_OFFSET,
    SCAN_SYSTEM_COLUMNS,
    Columns,
    Projection,
    row_offsets,
)
from alance.dataset.query.pruning import ScanStats, make_pruner
from alance.dataset.query.row_ids import ROW_ADDRESS, ROW_ID, SYSTEM_COLUMNS, system_columns
from alance.dataset.query.selection import matching_rows, select_rows
from alance.dataset.query.take_pages import read_fragment_rows
from alance.errors import InvalidInputError
from alance.filter import compile_filter_and_columns
from alance.format.schema import LanceField, as_schema, with_extension_type
from alance.io.plans import DECODE_WORKERS, decode_pool, offloading

__all__ = ["ROW_ADDRESS", "ROW_ID", "SYSTEM_COLUMNS", "Scanner", "row_addresses"]
DEFAULT_BATCH_SIZE = 8192
#: Environment variable that changes the default batch size (pylance's name).
BATCH_SIZE_ENV = "LANCE_DEFAULT_BATCH_SIZE"


def default_batch_size() -> int:
    """Rows per batch when a scan names none: ``$LANCE_DEFAULT_BATCH_SIZE`` or 8192."""
    raw = os.environ.get(BATCH_SIZE_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_BATCH_SIZE
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInputError(f"{BATCH_SIZE_ENV}={raw!r} is not an integer") from None
    if value < 1:
        raise InvalidInputError(f"{BATCH_SIZE_ENV} must be positive, not {value}")
    return value
DEFAULT_READ_AHEAD = 4
DEFAULT_CHUNK_ROWS = 64 * 1024
#: Gathers of at least this many rows (the non-filter columns of a filtered scan) run on a
#: worker thread (Arrow's take releases the GIL), not on the event loop.
_OFFLOAD_TAKE_ROWS = 16 * 1024
T = TypeVar("T")
#: Pieces of a filtered chunk's other columns read ahead of the one being finished.
_REST_READ_AHEAD = 1


def row_addresses(fragment_id: int, offsets: np.ndarray) -> pa.Array:
    """Row addresses ``fragment_id << 32 | offset`` as a uint64 array."""
    return pa.array((np.uint64(fragment_id) << np.uint64(32)) | offsets.astype(np.uint64),
                    pa.uint64())




#: Chunks with at least this many rows are filtered on a decode thread, not on the event loop
#: (Acero releases the GIL: the filter then runs next to decoding and the loop stays free).
_OFFLOAD_FILTER_ROWS = 64 * 1024


def _select(head: pa.RecordBatch, expression: pc.Expression, shown: pa.RecordBatch,
            base: int = 0) -> tuple[np.ndarray, pa.RecordBatch]:
    """The positions of the rows of ``head`` that pass ``expression`` (plus ``base``), and
    those rows of ``shown`` (the columns of ``head`` that are output)."""
    positions = matching_rows(head, expression)
    selected = select_rows(shown, positions)
    if base:
        positions += base  # (in place: the array is fresh, and a copy costs page faults)
    return positions, selected


@lru_cache(maxsize=128)
def _spans(bounds: bytes, chunk_rows: int, rows: int) -> tuple[tuple[int, int], ...]:
    """A fragment's rows as chunks of whole row groups (``bounds``: the int64 group bounds),
    each of at least ``chunk_rows`` rows but the last: worked out once per file layout (a
    legacy file may have thousands of groups; fragments written alike share a layout, and
    128 layouts of even 10,000 groups hold about 10 MB)."""
    spans: list[tuple[int, int]] = []
    cuts = np.frombuffer(bounds, np.int64).tolist()
    start = 0
    for i in range(1, len(cuts)):
        end = cuts[i]
        if end - start >= chunk_rows or i == len(cuts) - 1:
            if end > start:
                spans.append((start, end))
            start = end
    if start < rows:  # rows past the first file's groups (defensive)
        spans.append((start, rows))
    return tuple(spans)


async def _in_order(jobs: Sequence[Callable[[], Awaitable[T]]], ahead: int) -> list[T]:
    """Run ``jobs`` with up to ``ahead`` started ahead of the one awaited; results in order.
    Whatever is still running when this is cancelled or fails is cancelled too."""
    out: list[T] = []
    pending: list[asyncio.Future[T]] = []
    try:
        for job in jobs:
            pending.append(asyncio.ensure_future(job()))
            if len(pending) > ahead:
                out.append(await pending.pop(0))
        while pending:
            out.append(await pending.pop(0))
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    return out


#: :func:`_per_worker` cuts nothing into pieces of fewer decoded bytes than this: they cost
#: more in hand-offs than a second decoding thread saves.
SPLIT_MIN_BYTES = 1 << 20


def _per_worker(rows: int, chunk_rows: int, fields: Sequence[LanceField]) -> int:
    """Rows per piece for reading ``rows`` rows of ``fields`` in chunks of ``chunk_rows``:
    ``chunk_rows`` when that makes a chunk for every decoding thread; else a piece per thread,
    if each piece holds at least :data:`SPLIT_MIN_BYTES` decoded and decoding may leave the
    event loop (otherwise ``chunk_rows`` still)."""
    if rows >= DECODE_WORKERS * chunk_rows or not offloading():
        return chunk_rows
    per = -(-rows // DECODE_WORKERS)
    return per if per >= chunk_rows_for(fields, V2_ROW_STEP, SPLIT_MIN_BYTES) else chunk_rows


def _joined(head: pa.RecordBatch, tail: pa.RecordBatch) -> pa.RecordBatch:
    """``head`` with the columns of ``tail`` (same rows) appended."""
    return pa.RecordBatch.from_arrays([*head.columns, *tail.columns],
                                      schema=pa.schema([*head.schema, *tail.schema]))


@dataclass(frozen=True)
class _Chunk:
    fragment: FragmentReader
    start: int
    end: int
    #: The row ranges to read inside ``start..end`` when statistics left several (else all).
    parts: tuple[tuple[int, int], ...] | None = None

    def rows(self) -> np.ndarray:
        """The physical rows the chunk reads."""
        if self.parts is None:
            return np.arange(self.start, self.end, dtype=np.uint64)
        return np.concatenate([np.arange(a, b, dtype=np.uint64) for a, b in self.parts])

    async def read(self, fields: list[LanceField]) -> pa.RecordBatch:
        """The chunk's rows of ``fields`` (deleted rows included)."""
        if self.parts is None:
            return await self.fragment.read_range(fields, self.start, self.end)
        # One read of every part (pages holding them), not one read per part.
        return await self.fragment.read_rows(fields, self.rows().astype(np.int64))


@dataclass(frozen=True)
class _Sizes:
    """How a scan cuts its rows (see :meth:`Scanner._sizes_for`)."""

    chunk_rows: int  # rows per chunk (whole row groups)
    rest_rows: int  # rows per read of a filtered chunk's other columns
    short: bool  # chunks of exactly ``chunk_rows`` rows (a limit shorter than a row group)


class Scanner:
    """A configured scan of one dataset version (see :meth:`LanceDataset.scanner`)."""

    def __init__(self, ctx: ReadContext, *, columns: Columns = None,
                 filter: str | pc.Expression | None = None, limit: int | None = None,
                 offset: int | None = None, batch_size: int | None = None,
                 with_row_id: bool = False, with_row_address: bool = False,
                 fragments: Sequence[Any] | None = None,
                 read_ahead: int = DEFAULT_READ_AHEAD,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, prune: bool = True,
                 strict_batch_size: bool = False, use_index: bool = True,
                 include_deleted_rows: bool = False) -> None:
        self.ctx = ctx
        schema = ctx.schema
        if limit is not None and limit < 0:
            raise InvalidInputError(f"Limit must be non-negative, got {limit}")
        if offset is not None and offset < 0:
            raise InvalidInputError(f"Offset must be non-negative, got {offset}")
        if batch_size is not None and batch_size < 1:
            raise InvalidInputError("batch_size must be >= 1")
        #: SQL expressions and struct field paths (alance.dataset.query.projection), computed from
        #: the inner columns (``_output_names``) as batches leave the scan; None for a list
        #: of top-level and system columns.
        self._final = Projection.parse(schema, columns, trailing=[ROW_ID] * with_row_id + [
            ROW_ADDRESS] * with_row_address)
        names = (self._final.inner if self._final is not None
                 else list(columns) if columns is not None else schema.names)
        # System columns (_rowid, _rowaddr, _rowoffset, _row_created_at_version,
        # _row_last_updated_at_version) may be projected by name, in any position.
        self.projection: list[LanceField] = (
            self._final.fields(schema) if self._final is not None
            else [schema.field(n) for n in names if n not in SCAN_SYSTEM_COLUMNS])
        self._output_names = list(dict.fromkeys(
            names + ([ROW_ID] if with_row_id else []) + ([ROW_ADDRESS] if with_row_address
                                                         else [])))
        if len(set(names)) != len(names):
            raise InvalidInputError(f"columns repeat a name: {names}")
        self.with_row_id = with_row_id
        if include_deleted_rows and not with_row_id:
            raise InvalidInputError("include_deleted_rows needs the row ids of the rows (deleted "
                                    "rows have a null _rowid), but with_row_id is false")
        #: Deleted rows are returned too, with a null ``_rowid`` (pylance's option).
        self.include_deleted_rows = include_deleted_rows
        self.with_row_address = with_row_address
        self.limit = limit
        self.offset = offset or 0
        self.batch_size = batch_size or default_batch_size()
        self._chunk_rows_arg = chunk_rows
        self.read_ahead = max(1, read_ahead)
        self.strict_batch_size = strict_batch_size
        arrow_schema = schema.to_arrow()
        self._filter_arg = filter
        self.filter: pc.Expression | None = None
        filter_names: list[str] = []
        if isinstance(filter, str) and filter.strip():
            self.filter, filter_names = compile_filter_and_columns(
                filter, arrow_schema, extra_columns=SYSTEM_COLUMNS)
        elif isinstance(filter, pc.Expression):
            self.filter = filter
            filter_names = list(schema.names) + list(SYSTEM_COLUMNS)
        elif filter is not None and not isinstance(filter, str):
            raise InvalidInputError("filter must be a SQL string or a pyarrow.compute.Expression")
        self._filter_system = [n for n in SYSTEM_COLUMNS if n in filter_names]
        self._filter_names = set(filter_names)
        if self._final is not None:  # a column the filter reads is read whole
            self.projection = [schema.field(f.name) if f.name in self._filter_names else f
                               for f in self.projection]
        extra = [schema.field(n) for n in filter_names
                 if n not in SYSTEM_COLUMNS and n not in names]
        self.read_fields = self.projection + extra
        #: The fields a filtered scan reads first (the rest only for rows that pass).
        self._filter_fields = extra + [f for f in self.projection if f.name in self._filter_names]
        #: A short ``limit`` (head(), a first page) reads no more than it returns: chunks of
        #: about the rows wanted (whole row groups still), scheduled only while needed.
        self._limit_chunks = (self.filter is None and limit is not None
                              and chunk_rows == DEFAULT_CHUNK_ROWS)
        if fragments is None:
            self.fragments: list[table_pb2.DataFragment] = ctx.snapshot.fragments
        else:
            wanted = {int(getattr(f, "fragment_id", getattr(f, "id", f))) for f in fragments}
            self.fragments = [f for f in ctx.snapshot.fragments if f.id in wanted]
        #: How streamed scans are cut (:meth:`to_table` cuts its own, see ``_table_sizes``).
        self._streamed = self._sizes_for(ctx.store.scan_chunk_bytes)
        # The scalar indices narrowing this filter (alance.dataset.query.indices.planner).
        self._index_plan = plan_filter(ctx, filter) if use_index else None
        self._index_rows: dict[int, Any] | None = None
        # Page pruning by statistics (alance.dataset.query.pruning); its counters in ``self.stats``.
        self.stats = ScanStats()
        self._pruner = make_pruner(ctx, filter, self.read_fields, self.stats) if prune else None
        #: Filter columns whose zone maps this scan learns (see alance.dataset.fragments.zone_maps).
        self._learn = ([(i, f) for i, f in enumerate(self._filter_fields)
                        if f.name in self._pruner.columns and learnable(f)]
                       if self._pruner is not None else [])

    def _sizes_for(self, chunk_bytes: int) -> _Sizes:
        """How to cut this scan for about ``chunk_bytes`` of decoded values a chunk."""
        default = self._chunk_rows_arg == DEFAULT_CHUNK_ROWS
        # Enough rows to amortise per-request costs, never fewer than a batch.
        rows = max(self.batch_size, self._chunk_rows_arg)
        if default and self.limit is None:  # narrow rows: bigger chunks
            rows = chunk_rows_for(self.read_fields, rows, chunk_bytes)
        rest = rows
        if self._limit_chunks:
            rows = max(1, min(rows, self.offset + (self.limit or 0)))
        short = self._limit_chunks and rows < 1024
        if self.filter is not None and default and self.limit is None and self._filter_fields:
            # The filter phase reads only the filter columns: size its chunks by those, so a
            # selective filter pays per-chunk costs (requests, plan steps, takes) few times.
            rows = max(rows, chunk_rows_for(self._filter_fields, rows, chunk_bytes))
        if self.filter is None and not self._limit_chunks and default:
            # A scan smaller than a chunk per decoding thread: a piece for each
            rows = _per_worker(sum(int(f.physical_rows) for f in self.fragments), rows,
                               self.read_fields)
        return _Sizes(rows, rest, short)

    def _table_sizes(self) -> _Sizes:
        """The cuts of :meth:`to_table`: chunks of the store's ``table_chunk_bytes`` (on local
        disk larger than a stream's, which bound its memory; a table holds every row it
        reads anyway) when the scan sizes its own chunks."""
        store = self.ctx.store
        if (self._chunk_rows_arg != DEFAULT_CHUNK_ROWS or self._limit_chunks
                or store.table_chunk_bytes == store.scan_chunk_bytes):
            return self._streamed
        return self._sizes_for(store.table_chunk_bytes)

    @property
    def dataset_schema(self) -> pa.Schema:
        """The schema of the dataset version scanned (every column)."""
        return self.ctx.snapshot.schema.to_arrow_with_extensions()

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the batches this scan yields (pylance's name for
        :attr:`output_schema`)."""
        return self.output_schema

    @property
    def output_schema(self) -> pa.Schema:
        """The schema of the batches this scan yields."""
        return self._final.schema if self._final is not None else self._inner_schema

    def write_source(self) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
        """The schema and batches a writer takes when this scan is passed as data."""
        return self.output_schema, self.to_batches()

    @property
    def _inner_schema(self) -> pa.Schema:
        """The columns read and system columns, before a projection computes the output."""
        data = {f.name: f for f in self.projection}
        return pa.schema([pa.field(n, pa.uint64(), True) if n in SCAN_SYSTEM_COLUMNS
                          else with_extension_type(data[n].to_arrow())
                          for n in self._output_names])

    # -- planning ----------------------------------------------------------------------------
    def _plan_fragments(self) -> tuple[list[table_pb2.DataFragment], int]:
        """The fragments to read and how many result rows the skipped ones held.

        Without a filter, fragments that lie wholly before ``offset`` are never read: the
        manifest's row counts say how many rows they would have produced.
        """
        if self.filter is not None:
            return self.fragments, 0
        skipped = 0
        for i, frag in enumerate(self.fragments):
            live = live_rows(frag)
            if skipped + live > self.offset:
                return self.fragments[i:], skipped
            skipped += live
        return [], skipped

    async def _chunks(self, fragments: list[table_pb2.DataFragment], sizes: _Sizes,
                      ) -> AsyncGenerator[_Chunk, None]:
        # Fragments an index covers: only the rows it selects.
        if self._index_plan is not None and self._index_rows is None:
            self._index_rows = await index_evaluate(self.ctx, self._index_plan)
        for frag in fragments:
            reader = self.ctx.fragment(frag)
            if self._index_rows is not None and frag.id in self._index_rows:
                for runs in index_runs(self._index_rows[frag.id], sizes.chunk_rows):
                    yield _Chunk(reader, runs[0][0], runs[-1][1], runs)
                continue
            bounds = await reader.row_group_bounds()
            maybe = await self._pruner.ranges(frag) if self._pruner is not None else None
            if sizes.short:  # a short limit: exactly the rows wanted, not whole row groups
                for start in range(0, reader.physical_rows, sizes.chunk_rows):
                    yield _Chunk(reader, start, min(start + sizes.chunk_rows,
                                                    reader.physical_rows))
                continue
            layout = np.asarray(bounds, np.int64).tobytes()
            for start, end in _spans(layout, sizes.chunk_rows, reader.physical_rows):
                parts = [(start, end)] if maybe is None or self._pruner is None else (
                    await self._pruner.split(reader, maybe, start, end))
                if len(parts) > 1:  # pieces of one span that statistics could not skip
                    yield _Chunk(reader, parts[0][0], parts[-1][1], tuple(parts))
                    continue
                for a, b in parts:
                    yield _Chunk(reader, a, b)

    async def _learn_zones(self, chunk: _Chunk, head: pa.RecordBatch) -> None:
        """Record the zone maps of the filter columns a chunk read whole."""
        for i, f in self._learn:
            owner = await self.ctx.owner_of(chunk.fragment.fragment, f)
            zones = owner.zone_maps if owner is not None else None
            if zones is not None and not zones.complete(f.id):
                zones.learn(f, chunk.start, head.column(i))

    async def _read_chunk(self, chunk: _Chunk, rest_rows: int) -> list[pa.RecordBatch]:
        """The result rows of one chunk (one or more batches, in order): deletions removed,
        filter applied, projected."""
        fragment = chunk.fragment
        deleted = await self.ctx.deleted_offsets(fragment.fragment)
        keep: np.ndarray | None = None
        # The chunk's physical row offsets, materialised only where they are used (a plain
        # range of a fragment without deletions needs none).
        offsets: np.ndarray | _Chunk = chunk
        num_rows = chunk.end - chunk.start if chunk.parts is None else len(chunk.rows())
        dead: np.ndarray | None = None  # include_deleted_rows: which rows are deleted ones
        if deleted is not None and len(deleted) and self.include_deleted_rows:
            dead = np.isin(chunk.rows(), deleted.astype(np.uint64), assume_unique=True)
            if not dead.any():
                dead = None
        elif deleted is not None and len(deleted):
            rows = chunk.rows()
            keep = ~np.isin(rows, deleted.astype(np.uint64), assume_unique=True)
            offsets = rows[keep]
        live = num_rows if isinstance(offsets, _Chunk) else len(offsets)
        self.stats.rows_scanned += live
        if self.filter is None:
            batch = await chunk.read(self.read_fields)
            if keep is not None:
                batch = batch.filter(pa.array(keep))
            return [await self._finish(batch, fragment, offsets, dead)]
        # Late materialisation: evaluate the filter on its own columns first, then fetch the
        # other projected columns only for the rows that pass (when few do).
        rest = [f for f in self.projection if f.name not in self._filter_names]
        head = await chunk.read(self._filter_fields)
        if self._learn and chunk.parts is None:
            await self._learn_zones(chunk, head)
        if keep is not None:
            head = head.filter(pa.array(keep))
        head = await self._with_system_columns(head, fragment, offsets, dead)
        names = self._output_names
        # Only the filter columns that are also output are gathered.
        shown = head.select([n for n in head.schema.names if n in names])
        # (a run of a chunk: the positions come back as row numbers of the fragment)
        base = chunk.start if isinstance(offsets, _Chunk) and chunk.parts is None else 0
        if head.num_rows >= _OFFLOAD_FILTER_ROWS and offloading():  # off the event loop
            positions, selected = await asyncio.get_running_loop().run_in_executor(
                decode_pool(), _select, head, self.filter, shown, base)
        else:
            positions, selected = _select(head, self.filter, shown, base)
        if not rest:
            return [selected.select(names)]
        if not selected.num_rows:
            for f in rest:
                selected = selected.append_column(f.to_arrow(), pa.nulls(0, f.data_type))
            return [selected.select(names)]
        if isinstance(offsets, _Chunk):
            physical = (positions if chunk.parts is None
                        else chunk.rows()[positions].astype(np.int64))
        else:
            physical = offsets[positions].astype(np.int64)
        step = rest_rows  # rows of the other columns per read: bounds memory
        jobs: list[Callable[[], Awaitable[pa.RecordBatch]]] = []

        def joined(lo: int, hi: int, tail: pa.RecordBatch) -> pa.RecordBatch:
            return _joined(selected.slice(lo, hi - lo), tail).select(names)

        if selected.num_rows * 4 < chunk.end - chunk.start:
            # Few rows pass: fetch just those rows of the other columns.
            async def by_rows(lo: int, hi: int) -> pa.RecordBatch:
                return joined(lo, hi, await read_fragment_rows(self.ctx, fragment.fragment,
                                                               rest, physical[lo:hi]))

            jobs = [partial(by_rows, lo, min(lo + step, len(physical)))
                    for lo in range(0, len(physical), step)]
        else:
            # Many pass: read the other columns by range, from the first row that passed to
            # the last (a piece per decoding thread when that is less than two reads), and
            # keep the rows that passed (in each range they are a run of ``selected``).
            async def by_range(start: int, end: int, lo: int, hi: int) -> pa.RecordBatch:
                tail = await fragment.read_range(rest, start, end)
                first = int(physical[lo])
                if int(physical[hi - 1]) - first == hi - lo - 1:  # a run: no copy
                    return joined(lo, hi, tail.slice(first - start, hi - lo))
                wanted = physical[lo:hi] - start
                if hi - lo >= _OFFLOAD_TAKE_ROWS:  # a big gather: off the event loop
                    picked = await asyncio.to_thread(tail.take, pa.array(wanted))
                    return joined(lo, hi, picked)
                return joined(lo, hi, tail.take(pa.array(wanted)))

            first, last = int(physical[0]), int(physical[-1]) + 1
            step = _per_worker(last - first, step, rest)
            for start in range(first, last, step):
                lo, hi = np.searchsorted(physical, [start, min(last, start + step)]).tolist()
                if lo < hi:
                    jobs.append(partial(by_range, int(physical[lo]), int(physical[hi - 1]) + 1,
                                        lo, hi))
        return await _in_order(jobs, _REST_READ_AHEAD)

    async def _with_system_columns(self, batch: pa.RecordBatch, fragment: FragmentReader,
                                   offsets: np.ndarray | _Chunk,
                                   dead: np.ndarray | None = None) -> pa.RecordBatch:
        wanted = [n for n in SCAN_SYSTEM_COLUMNS
                  if n in self._output_names or n in self._filter_system]
        if wanted:
            if isinstance(offsets, _Chunk):
                offsets = offsets.rows()
            extra = await system_columns(self.ctx, fragment.fragment, offsets,
                                         [n for n in wanted if n != ROW_OFFSET])
            if ROW_OFFSET in wanted:
                extra[ROW_OFFSET] = await row_offsets(self.ctx, fragment.fragment, offsets)
            if dead is not None and ROW_ID in extra:  # deleted rows have no row id
                ids = extra[ROW_ID]
                extra[ROW_ID] = pa.array(ids.to_numpy(zero_copy_only=False), pa.uint64(),
                                         mask=dead)
            arrays = [*batch.columns, *extra.values()]
            fields = [*batch.schema, *(pa.field(n, pa.uint64(), True) for n in extra)]
            # Rebuilt rather than appended to: a batch with no columns has no row count.
            batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
        return batch

    async def _finish(self, batch: pa.RecordBatch, fragment: FragmentReader,
                      offsets: np.ndarray | _Chunk,
                      dead: np.ndarray | None = None) -> pa.RecordBatch:
        batch = await self._with_system_columns(batch, fragment, offsets, dead)
        return batch.select(self._output_names)

    async def _filtered_batches(self, fragments: list[table_pb2.DataFragment], sizes: _Sizes,
                                need: int | None = None,
                                ) -> AsyncGenerator[pa.RecordBatch, None]:
        """Result batches in order, ``read_ahead`` chunks in flight. ``need``: the rows an
        unfiltered scan can use at most; chunks beyond those are not started (the
        consumer stops early), unless deletions left the ones read short."""
        pending: list[asyncio.Task[list[pa.RecordBatch]]] = []
        pending_rows: list[int] = []
        chunks = self._chunks(fragments, sizes)
        exhausted = False
        got = 0
        try:
            while True:
                while not exhausted and len(pending) < self.read_ahead and (
                        need is None or not pending or got + sum(pending_rows) < need):
                    chunk = await anext(chunks, None)
                    if chunk is None:
                        exhausted = True
                        break
                    pending.append(asyncio.ensure_future(self._read_chunk(chunk, sizes.rest_rows)))
                    pending_rows.append(len(chunk.rows()) if chunk.parts is not None
                                        else chunk.end - chunk.start)
                if not pending:
                    return
                pending_rows.pop(0)
                for batch in await pending.pop(0):
                    got += batch.num_rows
                    yield batch
        finally:
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            await chunks.aclose()

    # -- results -----------------------------------------------------------------------------
    async def to_batches(self) -> AsyncIterator[pa.RecordBatch]:
        """Stream the result as record batches of at most ``batch_size`` rows (exactly
        ``batch_size`` but for the last with ``strict_batch_size``)."""
        stream = self._batches()
        if self.strict_batch_size:
            stream = self._strict_batches(stream)
        try:
            async for batch in stream:
                yield batch
        finally:
            await stream.aclose()

    async def _strict_batches(self, stream: AsyncGenerator[pa.RecordBatch, None],
                              ) -> AsyncGenerator[pa.RecordBatch, None]:
        """``stream`` re-cut into batches of exactly ``batch_size`` rows (but the last)."""
        try:
            held: list[pa.RecordBatch] = []
            rows = 0
            async for batch in stream:
                held.append(batch)
                rows += batch.num_rows
                while rows >= self.batch_size:
                    joined = pa.Table.from_batches(held, schema=self.output_schema)
                    yield joined.slice(0, self.batch_size).combine_chunks().to_batches()[0]
                    rest = joined.slice(self.batch_size)
                    held = rest.combine_chunks().to_batches() if rest.num_rows else []
                    rows = rest.num_rows
            if rows:
                yield pa.Table.from_batches(held, schema=self.output_schema) \
                    .combine_chunks().to_batches()[0]
        finally:
            await stream.aclose()

    async def _batches(self, split: bool = True, sizes: _Sizes | None = None,
                       ) -> AsyncGenerator[pa.RecordBatch, None]:
        """The result in order; ``split``: in pieces of at most ``batch_size`` rows (else as
        read, for a caller that splits them itself); ``sizes``: how to cut the scan (default:
        as streamed)."""
        if sizes is None:
            sizes = self._streamed
        fragments, skipped = self._plan_fragments()
        skip = self.offset - skipped
        remaining = self.limit
        if remaining == 0:
            return
        need = (skip + remaining if self.filter is None and remaining is not None else None)
        if need is not None and self._limit_chunks:
            # Fragments before the offset were skipped unread: size chunks by the rows
            # still wanted from the rest, not by the dataset-wide offset.
            rows = max(1, min(sizes.chunk_rows, need))
            sizes = replace(sizes, chunk_rows=rows, short=rows < 1024)
        stream = self._filtered_batches(fragments, sizes, need)
        try:
            async for batch in stream:
                if skip:
                    if batch.num_rows <= skip:
                        skip -= batch.num_rows
                        continue
                    batch = batch.slice(skip)
                    skip = 0
                if remaining is not None:
                    if batch.num_rows >= remaining:
                        batch = batch.slice(0, remaining)
                        remaining = 0
                    else:
                        remaining -= batch.num_rows
                batch = (as_schema(batch, self.output_schema) if self._final is None
                         else self._final.apply(batch))
                if not split:
                    yield batch
                else:
                    for start in range(0, batch.num_rows, self.batch_size):
                        yield batch.slice(start, self.batch_size)
                if remaining == 0:
                    return
        finally:
            await stream.aclose()

    async def to_table(self) -> pa.Table:
        """The whole result as one table (in chunks of ``batch_size`` rows, as
        :meth:`to_batches` streams them)."""
        sizes = self._table_sizes()
        if self.strict_batch_size:
            batches = [b async for b in self._strict_batches(self._batches(sizes=sizes))]
        else:  # read batches cut up here, not passed on one by one through the stream
            step = self.batch_size
            stream = self._batches(split=False, sizes=sizes)
            try:
                batches = [b.slice(start, step) async for b in stream
                           for start in range(0, b.num_rows, step)]
            finally:
                await stream.aclose()
        return pa.Table.from_batches(batches, schema=self.output_schema)

    def explain(self) -> str:
        """What the scan reads and what page statistics let it skip (counters fill in as the
        scan runs: call after consuming it)."""
        names = [f.name for f in self.read_fields]
        head = (f"scan of {len(self.fragments)} fragments, columns {names}, filter: "
                f"{self._filter_arg if self.filter is not None else 'none'}\n")
        if self._index_plan is not None:
            head += f"scalar index: {describe_plan(self._index_plan)}\n"
        if self._pruner is None:
            return head + "pruning: none (no statistics apply)"
        return head + self.stats.describe()

    def explain_plan(self, verbose: bool = False) -> str:
        """The scan's plan as text, shaped like pylance's (see
        :mod:`alance.dataset.query.plan_text`)."""
        return plan_text.explain_plan(self, verbose)

    async def analyze_plan(self) -> str:
        """Run the scan and describe what it read (rows, bytes, ranges, requests)."""
        return await plan_text.analyze_plan(self)

    async def count_rows(self) -> int:
        """Number of result rows; without a filter this reads no data."""
        if self.filter is None:
            total = sum(live_rows(f) for f in self.fragments)
            total = max(0, total - self.offset)
            return total if self.limit is None else min(total, self.limit)
        counter = Scanner(self.ctx, columns=[], filter=self._filter_arg, limit=self.limit,
                          offset=self.offset, fragments=self.fragments,
                          use_index=self._index_plan is not None)
        count = 0
        async for batch in counter.to_batches():
            count += batch.num_rows
        return count

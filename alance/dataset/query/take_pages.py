"""Takes across many fragments: the rows of every fragment's pages fetched and decoded together.

:func:`take_columns` reads the columns it can through :mod:`alance.format.v2.page_take`: for
each column, the pages holding the wanted rows in every fragment are located (their chunk
tables loaded once and kept on the opened file), all their chunks fetched in one round (one
request batch per data file, all files at once), and all their rows decoded as one array.
That replaces one read plan per fragment and column, whose fixed cost dominated takes that
touch many fragments. 2.0 pages are read by their row-by-row plans
(:mod:`alance.format.v2.v20_rows`), all pages of all files in lockstep. Columns it cannot read
this way (nested, nullable with levels in 2.1+, legacy files, other encodings, JSON text) are
left to the caller's ordinary path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2
from alance.dataset.fragments.data_file import (
    INLINE_TAKE_ROWS,
    TAKE_OFFLOAD_BYTES,
    DataFileReader,
)
from alance.dataset.fragments.read import ReadContext
from alance.errors import AlanceError, CorruptFileError
from alance.format.arrow_buffers import pooled_concatenate
from alance.format.legacy.plan import JoinedRanges
from alance.format.schema import LanceField
from alance.format.v2 import miniblock, page_take, v20_rows
from alance.format.v2.blocks import concat_blocks, to_arrow
from alance.format.v2.container import V2File
from alance.format.v2.v20 import check_fits
from alance.io.plans import decode_pool, offloading
from alance.io.store import MIN_COALESCE_GAP, DatasetStore

#: The kind of 2.0 pages this path reads (:func:`alance.format.v2.v20_rows.supported`).
_V20: page_take.Kind = ("2.0 by row",)

#: From this many ranges on, a plan step whose ranges it joins anyway is read from a local
#: file straight into one buffer (no buffer or view per range).
JOIN_MIN_RANGES = 16

#: Low-level errors that, raised while decoding, can only mean the bytes are malformed
#: (CorruptFileError among them: the ordinary path then reads, and names the damaged file).
_DECODE_ERRORS = (ValueError, IndexError, OverflowError, TypeError, pa.ArrowException)


@dataclass
class _Page:
    """One page of one column of one data file, and the rows wanted from it."""

    reader: DataFileReader
    file: V2File
    key: tuple[int, int]  # (column, page) in the file
    rows: np.ndarray  # page-local rows
    encoding: Any  # the page's mini-block layout (2.1+), or its 2.0 array encoding


async def read_parts(ctx: ReadContext,
                     parts: Sequence[tuple[table_pb2.DataFragment, np.ndarray]],
                     fields: Sequence[LanceField]) -> dict[int, pa.Array | pa.ChunkedArray]:
    """The given top-level fields for the rows of every part (a fragment and its sorted,
    unique physical offsets), parts in order, by field id: through :func:`take_columns` where
    it can, the rest fragment by fragment."""
    taken: dict[int, pa.Array | pa.ChunkedArray] = dict(await take_columns(ctx, parts, fields))
    rest = [f for f in fields if f.id not in taken]
    if rest:
        reads = [ctx.fragment(frag).read_rows(rest, local) for frag, local in parts]
        batches = [await reads[0]] if len(reads) == 1 else list(await asyncio.gather(*reads))
        table = pa.Table.from_batches(batches, schema=pa.schema([f.to_arrow() for f in rest]))
        for f in rest:
            taken[f.id] = table.column(f.name)
    return taken


async def read_fragment_rows(ctx: ReadContext, fragment: table_pb2.DataFragment,
                             fields: Sequence[LanceField], offsets: np.ndarray,
                             ) -> pa.RecordBatch:
    """:meth:`FragmentReader.read_rows` through :func:`read_parts`: the rows at sorted,
    unique physical ``offsets`` of one fragment."""
    got = await read_parts(ctx, [(fragment, offsets)], fields)
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
              for a in (got[f.id] for f in fields)]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema([f.to_arrow() for f in fields]))


async def take_columns(ctx: ReadContext,
                       parts: Sequence[tuple[table_pb2.DataFragment, np.ndarray]],
                       fields: Sequence[LanceField]) -> dict[int, pa.Array]:
    """Arrays of the given top-level fields for the rows of every part (a fragment and its
    sorted, unique physical offsets), parts in order: those fields this path can read, by
    field id. The others are missing from the result."""
    by_id = {f.id: f for f in fields}
    plans: dict[int, list[_Page]] = {f.id: [] for f in fields
                                     if not f.children and not ctx.reads_json_text(f)}
    kinds: dict[int, page_take.Kind] = {}
    for fragment, rows in parts:
        if not plans:
            return {}
        for fid in list(plans):
            reader = await ctx.owner_of(fragment, by_id[fid])
            pages = None if reader is None else _pages_of(reader, fid, rows)
            if pages is None or any(kinds.setdefault(fid, k) != k for _, k in pages):
                del plans[fid]
            else:
                plans[fid].extend(p for p, _ in pages)
    if not plans:
        return {}
    n_rows = sum(len(rows) for _, rows in parts)
    v20 = {fid: pages for fid, pages in plans.items() if kinds[fid] == _V20
           and _fits(pages, by_id[fid])}
    mini = {fid: pages for fid, pages in plans.items() if kinds[fid] != _V20}
    try:
        out = await _take_v20(v20, by_id, n_rows) if v20 else {}
        if mini:
            out.update(await _take_miniblock(mini, by_id, n_rows))
    except CorruptFileError:
        # Damaged data somewhere in these files: the page-by-page path finds which file and
        # column, and says so.
        return {}
    # Nulls in a column the schema says is not nullable: the page-by-page path refuses them
    # naming the file.
    return {fid: arr for fid, arr in out.items() if by_id[fid].nullable or not arr.null_count}


def _fits(pages: list[_Page], field: LanceField) -> bool:
    """Whether every 2.0 page's encoding can hold the field's type (those that cannot are
    left to the page-by-page path, which refuses them naming the file)."""
    try:
        for page in pages:
            check_fits(page.encoding, field.data_type, page.key[0])
    except CorruptFileError:
        return False
    return True


async def _take_miniblock(plans: dict[int, list[_Page]], by_id: dict[int, LanceField],
                          n_rows: int) -> dict[int, pa.Array]:
    """Mini-block pages (2.1+): located together, fetched in one round, decoded together."""
    await _load_states([p for pages in plans.values() for p in pages])
    # Chunks closer than the store always reads through are asked for as one range.
    located = {fid: page_take.locate([p.encoding for p in pages],
                                     [p.file.page_state[p.key] for p in pages],
                                     [p.rows for p in pages],
                                     gap=min(pages[0].reader.store.coalesce_bytes,
                                             MIN_COALESCE_GAP))
               for fid, pages in plans.items()}
    data = await _fetch({fid: (plans[fid], located[fid]) for fid in plans})
    jobs = [(located[fid], data[fid], by_id[fid].data_type) for fid in located]
    n_bytes = sum(len(d) for d in data.values())
    if (n_rows > INLINE_TAKE_ROWS or n_bytes >= TAKE_OFFLOAD_BYTES) and offloading():
        loop = asyncio.get_running_loop()
        arrays = await loop.run_in_executor(decode_pool(), _decode_all, jobs)
    else:
        arrays = _decode_all(jobs)
    return dict(zip(located, arrays, strict=True))


async def _take_v20(plans: dict[int, list[_Page]], by_id: dict[int, LanceField],
                    n_rows: int) -> dict[int, pa.Array]:
    """2.0 pages: every page's row-by-row read plan (:mod:`alance.format.v2.v20_rows`) run
    in lockstep, each step's ranges of every file fetched in one round; then one Arrow array
    per column."""
    items = [(fid, page) for fid, pages in plans.items() for page in pages]
    # Rows closer than the store always reads through are asked for as one range.
    results = await _drive([(page.reader, v20_rows.read_rows(
        page.encoding, page.file.column(page.key[0]).pages[page.key[1]].buffers, page.rows,
        gap=min(page.reader.store.coalesce_bytes, MIN_COALESCE_GAP)))
                            for _, page in items], offload=n_rows > INLINE_TAKE_ROWS)
    out: dict[int, pa.Array] = {}
    for fid in plans:
        parts = [r for (f, _), r in zip(items, results, strict=True) if f == fid]
        try:
            block = concat_blocks([b for b, _ in parts]) if len(parts) > 1 else parts[0][0]
            valid = None
            if any(v is not None for _, v in parts):
                valid = np.concatenate([np.ones(len(b), bool) if v is None else v
                                        for b, v in parts])
            out[fid] = to_arrow(block, by_id[fid].data_type,
                                None if valid is None or valid.all() else valid)
        except _DECODE_ERRORS as exc:
            raise CorruptFileError(f"malformed 2.0 data: {exc}") from exc
    return out


async def _drive(plans: list[tuple[DataFileReader, Generator[Any, Any, Any]]],
                 offload: bool) -> list[Any]:
    """Run read plans over several files in lockstep: each round fetches what every plan
    asked for (one request batch per file) and resumes them all (on a decoding thread when
    ``offload``). Their results, in order."""
    out: list[Any] = [None] * len(plans)
    pending: dict[int, list[tuple[int, int]]] = {}

    def resume(batch: list[tuple[int, Any]]) -> None:
        for i, data in batch:
            try:
                pending[i] = plans[i][1].send(data)
            except StopIteration as stop:
                out[i] = stop.value
            except _DECODE_ERRORS as exc:
                raise CorruptFileError(f"malformed 2.0 data: {exc}") from exc

    try:
        resume([(i, None) for i in range(len(plans))])
        loop = asyncio.get_running_loop()
        while pending:
            # Many small ranges a plan joins anyway: read into place in one buffer each.
            joined = [i for i, r in pending.items() if isinstance(r, JoinedRanges)
                      and len(r) >= JOIN_MIN_RANGES and plans[i][0].store.joins_ranges]
            alone = set(joined)
            order = [i for i in pending if i not in alone]
            requests: dict[str, list[tuple[int, int]]] = {}
            at: list[tuple[str, int, int]] = []
            for i in order:
                path = plans[i][0].path
                bucket = requests.setdefault(path, [])
                at.append((path, len(bucket), len(pending[i])))
                bucket.extend(pending[i])
            got: dict[str, list[Any]] = {}
            if order:
                store = plans[order[0]][0].store
                paths = list(requests)
                got = dict(zip(paths, await store.get_ranges_many(
                    [(p, requests[p]) for p in paths]), strict=True))
            whole = await asyncio.gather(*(plans[i][0].store.get_ranges_joined(
                plans[i][0].path, [s for s, _ in pending[i]], [e for _, e in pending[i]])
                for i in joined))
            pending.clear()
            batch = [(i, got[path][first: first + count])
                     for i, (path, first, count) in zip(order, at, strict=True)]
            batch += [(i, [data]) for i, data in zip(joined, whole, strict=True)]
            if offload and offloading():
                await loop.run_in_executor(decode_pool(), resume, batch)
            else:
                resume(batch)
    finally:
        for _, plan in plans:
            plan.close()
    return out


def _pages_of(reader: DataFileReader, field_id: int, rows: np.ndarray,
              ) -> list[tuple[_Page, page_take.Kind]] | None:
    """The pages holding a leaf field's wanted rows in one data file, with their kinds; None
    when the file or a page is not one this path reads."""
    v2 = reader.v2_file
    column = reader.column_of(field_id)
    if v2 is None or column is None:
        return None
    info = v2.column(column)
    if len(info.pages) == 1:
        spans = [(0, 0, len(rows))]
    else:
        which = np.searchsorted(info.page_starts, rows, side="right") - 1
        cut = np.flatnonzero(which[1:] != which[:-1]) + 1
        spans = [(int(which[a]), a, b) for a, b in
                 zip(np.concatenate(([0], cut)).tolist(),
                     np.concatenate((cut, [len(rows)])).tolist(), strict=True)]
    out = []
    for p, a, b in spans:
        kind = _kind(v2, column, p)
        if kind is None:
            return None
        page = info.pages[p]
        local = rows[a:b] if not page.first_row else rows[a:b] - page.first_row
        encoding = page.encoding if kind == _V20 else page.encoding.mini_block_layout
        out.append((_Page(reader, v2, (column, p), local, encoding), kind))
    return out


def _kind(file: V2File, column: int, page: int) -> page_take.Kind | None:
    """:func:`page_take.kind_of` of a page, remembered on the opened file."""
    key = ("take-kind", column, page)
    if key in file.page_state:
        return file.page_state[key]  # type: ignore[no-any-return]
    encoding = file.column(column).pages[page].encoding
    if file.version == (2, 0):
        kind: page_take.Kind | None = _V20 if v20_rows.supported(encoding) else None
    else:
        kind = (page_take.kind_of(encoding.mini_block_layout)
                if encoding.WhichOneof("layout") == "mini_block_layout" else None)
    file.page_state[key] = kind
    return kind


async def _load_states(pages: list[_Page]) -> None:
    """Read the chunk tables of the pages whose files do not know them yet."""
    missing: dict[tuple[int, tuple[int, int]], _Page] = {}
    for p in pages:
        if p.key not in p.file.page_state:
            missing.setdefault((id(p.file), p.key), p)

    async def load(p: _Page) -> None:
        page = p.file.column(p.key[0]).pages[p.key[1]]
        layout = p.encoding
        init = miniblock.init_buffers(layout, page.buffers)
        got = await p.reader.store.get_ranges(p.reader.path, [(s, s + n) for s, n in init])
        try:
            state = miniblock.build_state(layout, page.buffers, page.num_rows, list(got),
                                          layout.has_large_chunk)
        except AlanceError as exc:
            raise CorruptFileError(f"{p.reader.path}: {exc}") from exc
        p.file.page_state[p.key] = state

    await asyncio.gather(*(load(p) for p in missing.values()))


async def _fetch(work: dict[int, tuple[list[_Page], page_take.Located]],
                 ) -> dict[int, np.ndarray]:
    """The bytes of every column's located ranges, concatenated in order, all at once.

    From local files each run of ranges of one file is read back to back into one buffer
    (no per-range buffers: a take may touch thousands of chunks); from other stores the
    ranges of all columns are asked for in one request batch per file (coalesced there).
    """
    runs: list[tuple[int, DatasetStore, str, list[int], list[int]]] = []
    for fid, (pages, located) in work.items():
        for page, start, end in located.ranges:
            reader = pages[page].reader
            if not runs or runs[-1][0] != fid or runs[-1][2] != reader.path:
                runs.append((fid, reader.store, reader.path, [], []))
            runs[-1][3].append(start)
            runs[-1][4].append(end)
    joined = [r for r in runs if r[1].joins_ranges]
    batched = [r for r in runs if not r[1].joins_ranges]
    from_batches, from_joins = await asyncio.gather(_batched(batched), _joined(joined))
    data = from_batches | from_joins
    parts: dict[int, list[np.ndarray]] = {fid: [] for fid in work}
    for run in runs:
        parts[run[0]].append(np.frombuffer(data[id(run)], dtype=np.uint8))
    # (joined in Arrow's pool: a big take's pages are hundreds of MB, which numpy would
    # take from fresh kernel memory every time)
    return {fid: (pooled_concatenate(chunks) if chunks else np.zeros(0, np.uint8))
            for fid, chunks in parts.items()}


async def _joined(runs: list[tuple[int, DatasetStore, str, list[int], list[int]]],
                  ) -> dict[int, bytes | memoryview]:
    """The bytes of each run (by ``id``): every file's runs read straight into one buffer,
    which each run then views."""
    by_path: dict[str, list[tuple[int, DatasetStore, str, list[int], list[int]]]] = {}
    for run in runs:
        by_path.setdefault(run[2], []).append(run)
    groups = list(by_path.values())
    got = await asyncio.gather(*(
        group[0][1].get_ranges_joined(group[0][2], [s for r in group for s in r[3]],
                                      [e for r in group for e in r[4]])
        for group in groups))
    out: dict[int, bytes | memoryview] = {}
    for group, data in zip(groups, got, strict=True):
        view, pos = memoryview(data), 0
        for run in group:
            n = sum(run[4]) - sum(run[3])
            out[id(run)] = view[pos: pos + n]
            pos += n
    return out


async def _batched(runs: list[tuple[int, DatasetStore, str, list[int], list[int]]],
                   ) -> dict[int, bytes | memoryview]:
    """The bytes of each run (by ``id``), every file's ranges asked for in one batch."""
    by_path: dict[str, list[tuple[int, int]]] = {}
    stores: dict[str, DatasetStore] = {}
    for _, store, path, starts, ends in runs:
        by_path.setdefault(path, []).extend(zip(starts, ends, strict=True))
        stores[path] = store
    got: dict[str, list[Any]] = {}
    for store in {id(st): st for st in stores.values()}.values():
        paths = [p for p in by_path if stores[p] is store]
        results = await store.get_ranges_many([(p, by_path[p]) for p in paths])
        got.update(zip(paths, results, strict=True))
    out: dict[int, bytes | memoryview] = {}
    taken: dict[str, int] = {}
    for run in runs:
        path, n = run[2], len(run[3])
        first = taken.get(path, 0)
        taken[path] = first + n
        pieces = got[path][first: first + n]
        out[id(run)] = pieces[0] if n == 1 else b"".join(pieces)
    return out


def _decode_all(jobs: list[tuple[page_take.Located, np.ndarray, pa.DataType]],
                ) -> list[pa.Array]:
    try:
        return [page_take.decode(located, data, dtype) for located, data, dtype in jobs]
    except _DECODE_ERRORS as exc:
        raise CorruptFileError(f"malformed 2.x data: {type(exc).__name__}: {exc}") from exc


__all__ = ["read_fragment_rows", "read_parts", "take_columns"]

"""Takes across many fragments: the rows of every fragment's pages fetched and decoded together.

:func:`take_columns` reads the columns it can through :mod:`alance.format.v2.page_take`: for
each column, the pages holding the wanted rows in every fragment are located (their chunk
tables loaded once and kept on the opened file), all their chunks fetched in one round (one
request batch per data file, all files at once), and all their rows decoded as one array.
That replaces one read plan per fragment and column, whose fixed cost dominated takes that
touch many fragments. Columns it cannot read this way (nested, nullable with levels, 2.0 or
legacy files, other encodings, JSON text) are left to the caller's ordinary path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from alance._proto import encodings_v2_1_pb2 as pb
from alance._proto import table_pb2
from alance.dataset.data_file import (
    INLINE_TAKE_ROWS,
    TAKE_OFFLOAD_BYTES,
    DataFileReader,
    decode_pool,
)
from alance.dataset.read import ReadContext
from alance.errors import AlanceError, CorruptFileError
from alance.format.schema import LanceField
from alance.format.v2 import miniblock, page_take
from alance.format.v2.container import V2File

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
    layout: pb.MiniBlockLayout


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
    await _load_states([p for pages in plans.values() for p in pages])
    located = {fid: page_take.locate([p.layout for p in pages],
                                     [p.file.page_state[p.key] for p in pages],
                                     [p.rows for p in pages])
               for fid, pages in plans.items()}
    data = await _fetch({fid: (plans[fid], located[fid]) for fid in plans})
    jobs = [(located[fid], data[fid], by_id[fid].data_type) for fid in located]
    n_rows = len(next(iter(located.values())).item)
    n_bytes = sum(len(d) for d in data.values())
    try:
        if n_rows > INLINE_TAKE_ROWS or n_bytes >= TAKE_OFFLOAD_BYTES:
            loop = asyncio.get_running_loop()
            arrays = await loop.run_in_executor(decode_pool(), _decode_all, jobs)
        else:
            arrays = _decode_all(jobs)
    except CorruptFileError:
        # Damaged data somewhere in these files: the page-by-page path finds which file and
        # column, and says so.
        return {}
    return dict(zip(located, arrays, strict=True))


def _pages_of(reader: DataFileReader, field_id: int, rows: np.ndarray,
              ) -> list[tuple[_Page, page_take.Kind]] | None:
    """The pages holding a leaf field's wanted rows in one data file, with their kinds; None
    when the file or a page is not one this path reads."""
    v2 = reader.v2_file
    column = reader.column_of(field_id)
    if v2 is None or column is None or v2.version < (2, 1):
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
        out.append((_Page(reader, v2, (column, p), local, page.encoding.mini_block_layout),
                    kind))
    return out


def _kind(file: V2File, column: int, page: int) -> page_take.Kind | None:
    """:func:`page_take.kind_of` of a page, remembered on the opened file."""
    key = ("take-kind", column, page)
    if key in file.page_state:
        return file.page_state[key]  # type: ignore[no-any-return]
    encoding = file.column(column).pages[page].encoding
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
        layout = p.layout
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
    """The bytes of every column's located ranges, concatenated in order: one request batch
    per data file, all files at once."""
    by_path: dict[str, list[tuple[int, int]]] = {}
    stores = {}
    slots: list[tuple[int, str, int]] = []  # field, path, index in that path's batch
    for fid, (pages, located) in work.items():
        for page, start, end in located.ranges:
            reader = pages[page].reader
            bucket = by_path.setdefault(reader.path, [])
            slots.append((fid, reader.path, len(bucket)))
            bucket.append((start, end))
            stores[reader.path] = reader.store
    got: dict[str, list[Any]] = {}
    for store in {id(st): st for st in stores.values()}.values():
        paths = [p for p in by_path if stores[p] is store]
        results = await store.get_ranges_many([(p, by_path[p]) for p in paths])
        got.update(zip(paths, results, strict=True))
    parts: dict[int, list[Any]] = {fid: [] for fid in work}
    for fid, path, i in slots:
        parts[fid].append(got[path][i])
    return {fid: np.frombuffer(b"".join(chunks), dtype=np.uint8)
            for fid, chunks in parts.items()}


def _decode_all(jobs: list[tuple[page_take.Located, np.ndarray, pa.DataType]],
                ) -> list[pa.Array]:
    try:
        return [page_take.decode(located, data, dtype) for located, data, dtype in jobs]
    except _DECODE_ERRORS as exc:
        raise CorruptFileError(f"malformed 2.x data: {type(exc).__name__}: {exc}") from exc


__all__ = ["read_parts", "take_columns"]

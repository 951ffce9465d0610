"""Reading index files through the dataset's async store, and answering range tests with
them: the IO layer over the format modules.

Tables read from index files are kept per read context (one dataset version), so repeated
queries on one dataset object read each index page once: at most :data:`INDEX_CACHE_BYTES`
of them (least recently used first out), and concurrent queries that need the same table
share one read.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np
import pyarrow as pa
import pyroaring

from alance._proto import table_pb2
from alance.dataset.fragments.read import ReadContext
from alance.dataset.query.indices import bitmap, btree, zonemap
from alance.dataset.query.indices.predicates import matches
from alance.dataset.query.indices.rowaddr import (
    RowAddrMap,
    addresses_of_map,
    decode_row_addr_map,
    map_of_addresses,
)
from alance.dataset.query.indices.types import (
    BITMAP_URL,
    BTREE_URL,
    LABEL_LIST_URL,
    index_dir,
    type_url,
)
from alance.dataset.query.row_ids import row_addresses_of, uses_stable_row_ids
from alance.errors import CorruptFileError, UnsupportedFeatureError
from alance.file import LanceFileReader
from alance.filter import RangeTest
from alance.format.v2.container import open_file
from alance.io.plans import run_plan

#: A set of rows: fragment id -> offsets within it.
Rows = dict[int, pyroaring.BitMap]
#: Bytes of index tables one read context keeps (pages, partitions, bitmaps).
INDEX_CACHE_BYTES = 256 * 1024 * 1024


class IndexReader:
    """Index files of one dataset version, opened and read on demand (cached)."""

    def __init__(self, ctx: ReadContext) -> None:
        self.ctx = ctx
        self._files: dict[str, LanceFileReader] = {}
        self._tables: OrderedDict[tuple[str, Any], pa.Table] = OrderedDict()
        self._cached_bytes = 0
        self._loading: dict[tuple[str, Any], asyncio.Future[pa.Table]] = {}
        #: Bytes of index data read (files opened and rows read), for explain/analyze.
        self.bytes_read = 0

    async def open(self, index: table_pb2.IndexMetadata, name: str) -> LanceFileReader:
        """The reader of one file of ``index``."""
        path = f"{index_dir(index)}/{name}"
        found = self._files.get(path)
        if found is not None:
            return found
        store = self.ctx.store
        if index.HasField("base_id"):
            store, rooted = self.ctx.base_store(int(index.base_id), f"index {index.name}")
            if not rooted:
                path = f"{index_dir(index).removeprefix('_indices/')}/{name}"
        size = next((int(f.size_bytes) for f in index.files if f.path == name and f.size_bytes),
                    None)
        if size is None:
            size = (await store.head(path)).size
        file = await run_plan(open_file(size, tail_size=store.tail_bytes), store, path)
        store.note_immutable(path, size)
        reader = LanceFileReader(store, path, file)
        self._files[path] = reader
        return reader

    async def table(self, index: table_pb2.IndexMetadata, name: str,
                    columns: tuple[str, ...] | None = None,
                    rows: tuple[int, int] | None = None) -> pa.Table:
        """Rows ``[start, end)`` (default all) of some columns of one index file."""
        key = (f"{index_dir(index)}/{name}", (columns, rows))
        cached = self._tables.get(key)
        if cached is not None:
            self._tables.move_to_end(key)
            return cached
        loading = self._loading.get(key)
        if loading is None:  # the first to ask reads it; the others wait for that read
            loading = asyncio.ensure_future(self._read_table(index, name, columns, rows, key))
            self._loading[key] = loading
            loading.add_done_callback(lambda f: self._loaded(key, f))
        return await asyncio.shield(loading)

    def _loaded(self, key: tuple[str, Any], done: asyncio.Future[pa.Table]) -> None:
        self._loading.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved: a failure reaches whoever waited, not the log

    async def _read_table(self, index: table_pb2.IndexMetadata, name: str,
                          columns: tuple[str, ...] | None, rows: tuple[int, int] | None,
                          key: tuple[str, Any]) -> pa.Table:
        reader = await self.open(index, name)
        if columns is not None:
            reader = LanceFileReader(reader._store, reader._name, reader._file, list(columns))
        if rows is None:
            table = await reader.read_all(batch_size=65536).to_table()
        else:
            table = await reader.read_range(rows[0], rows[1] - rows[0],
                                            batch_size=65536).to_table()
        self.bytes_read += table.nbytes
        self._tables[key] = table
        self._cached_bytes += table.nbytes
        while self._cached_bytes > INDEX_CACHE_BYTES and len(self._tables) > 1:
            _, old = self._tables.popitem(last=False)
            self._cached_bytes -= old.nbytes
        return table

    async def file_metadata(self, index: table_pb2.IndexMetadata,
                            name: str) -> dict[bytes, bytes]:
        """The schema metadata of one index file."""
        return dict((await self.open(index, name)).schema.metadata or {})

    # -- answering range tests ---------------------------------------------------------------
    async def search(self, index: table_pb2.IndexMetadata, test: RangeTest) -> np.ndarray:
        """Ids (row addresses) of the rows ``index``
        records as passing ``test``, ascending."""
        url = type_url(index)
        if url == BTREE_URL:
            return await self._btree(index, test)
        if url == BITMAP_URL:
            return await self._bitmap(index, test)
        if url == LABEL_LIST_URL:
            return await self._label_list(index, test)
        raise UnsupportedFeatureError(f"index {index.name!r}: cannot search {url!r}")

    async def zone_rows(self, index: table_pb2.IndexMetadata, test: RangeTest) -> Rows:
        """Per fragment, the rows of the zones a ZONEMAP index keeps for ``test``."""
        return zonemap.zone_rows(await self.table(index, zonemap.FILE), test)

    async def _btree(self, index: table_pb2.IndexMetadata, test: RangeTest) -> np.ndarray:
        lookup = await self.table(index, btree.LOOKUP_FILE)
        size = btree.page_size(lookup.schema.metadata)
        data = await self.open(index, btree.DATA_FILE)
        total = data.num_rows()
        pages = btree.pages_for(lookup, test)
        # Adjacent pages are read as one range.
        spans: list[list[int]] = []
        for p in pages:
            if spans and spans[-1][1] == p:
                spans[-1][1] = p + 1
            else:
                spans.append([p, p + 1])
        tables = await asyncio.gather(*(
            self.table(index, btree.DATA_FILE, None, (a * size, min(b * size, total)))
            for a, b in spans))
        found = []
        for t in tables:
            mask = matches(t.column("values"), test)
            found.append(t.column("ids").to_numpy()[mask])
        ids = np.concatenate(found) if found else np.zeros(0, dtype=np.uint64)
        return np.unique(ids.astype(np.uint64))

    async def _bitmap(self, index: table_pb2.IndexMetadata, test: RangeTest) -> np.ndarray:
        keys = (await self.table(index, bitmap.FILE, ("keys",))).column("keys")
        maps = await self._maps(index, np.flatnonzero(matches(keys, test)))
        return _ids_of_maps(maps, self._fragment_rows())

    async def _maps(self, index: table_pb2.IndexMetadata,
                    positions: np.ndarray) -> list[RowAddrMap]:
        """The row maps of some keys (by position) of a bitmap-style index file."""
        if not len(positions):
            return []
        reader = await self.open(index, bitmap.FILE)
        picked = LanceFileReader(reader._store, reader._name, reader._file, ["bitmaps"])
        table = await picked.take_rows(positions.tolist(), batch_size=65536).to_table()
        self.bytes_read += table.nbytes
        return [decode_row_addr_map(b.as_py()) for b in table.column("bitmaps")]

    async def _label_list(self, index: table_pb2.IndexMetadata,
                          test: RangeTest) -> np.ndarray:
        """Ids of the rows whose list holds any (``has_any``) or all (``has_all``) of the
        test's values: the union or intersection of those keys' bitmaps."""
        keys = (await self.table(index, bitmap.FILE, ("keys",))).column("keys")
        wanted = RangeTest(test.column, "in", test.values)
        positions = np.flatnonzero(matches(keys, wanted))
        rows = self._fragment_rows()
        if test.op == "has_any":
            return _ids_of_maps(await self._maps(index, positions), rows)
        distinct = {v.as_py() for v in test.values}
        if len(positions) < len(distinct):
            return np.zeros(0, dtype=np.uint64)  # some value is in no list
        found: np.ndarray | None = None
        for m in await self._maps(index, positions):
            ids = _ids_of_maps([m], rows)
            found = ids if found is None else np.intersect1d(found, ids, assume_unique=True)
        return found if found is not None else np.zeros(0, dtype=np.uint64)

    def _fragment_rows(self) -> dict[int, int]:
        return {int(f.id): int(f.physical_rows) for f in self.ctx.snapshot.fragments}

    async def rows_of_ids(self, index: table_pb2.IndexMetadata, ids: np.ndarray) -> Rows:
        """Rows, by fragment, of the ids an index records (see :func:`records_row_ids`)."""
        if records_row_ids(index, self.ctx.snapshot.manifest):
            addrs, found = await row_addresses_of(self.ctx, ids)
            ids = addrs[found]
        return rows_of_addresses(ids)

    async def index_stats(self, index: table_pb2.IndexMetadata) -> dict[str, Any]:
        """pylance's per-segment statistics of a scalar index."""
        url = type_url(index)
        if url == BTREE_URL:
            lookup = await self.table(index, btree.LOOKUP_FILE)
            if not lookup.num_rows:
                return {"min": "NULL", "max": "NULL", "num_pages": 0}
            return {"min": _scalar_text(lookup.column("min")[0]),
                    "max": _scalar_text(lookup.column("max")[lookup.num_rows - 1]),
                    "num_pages": lookup.num_rows}
        if url in (BITMAP_URL, "/lance.table.LabelListIndexDetails"):
            meta = await self.file_metadata(index, bitmap.FILE)
            raw = meta.get(bitmap.STATS_KEY.encode())
            if raw:
                try:
                    return dict(json.loads(raw))
                except ValueError as exc:
                    raise CorruptFileError(f"index {index.name!r}: bad index stats") from exc
            return {"num_bitmaps": (await self.open(index, bitmap.FILE)).num_rows()}
        if url == "/lance.table.ZoneMapIndexDetails":
            reader = await self.open(index, "zonemap.lance")
            meta = dict(reader.schema.metadata or {})
            return {"num_zones": reader.num_rows(),
                    "rows_per_zone": int(meta.get(b"rows_per_zone", b"0") or 0)}
        return {}


def records_row_ids(index: table_pb2.IndexMetadata, manifest: table_pb2.Manifest) -> bool:
    """Whether ``index`` records stable row ids rather than row addresses.

    Without stable row ids every index holds addresses. With them, pylance 14 writes BTREE
    indices with ``index_version`` 1 holding row addresses, and reads an ``index_version`` 0
    BTREE as holding row ids; its BITMAP indices (version 0) hold row ids.
    """
    if not uses_stable_row_ids(manifest):
        return False
    return not (type_url(index) == BTREE_URL and index.index_version >= 1)


def _scalar_text(value: pa.Scalar) -> str:
    """A value as pylance prints index bounds ("NULL" for null)."""
    return "NULL" if not value.is_valid else str(value.as_py())


def _ids_of_maps(maps: list[RowAddrMap], fragment_rows: dict[int, int]) -> np.ndarray:
    merged: dict[int, pyroaring.BitMap | None] = {}
    for m in maps:
        for frag, sel in m.items():
            if sel is None or (frag in merged and merged[frag] is None):
                merged[frag] = None
                continue
            have = merged.setdefault(frag, pyroaring.BitMap())
            if have is not None:
                have.update(sel)
    return addresses_of_map(merged, fragment_rows)


def rows_of_addresses(addrs: np.ndarray) -> Rows:
    """Row addresses grouped by fragment."""
    return {k: v for k, v in map_of_addresses(addrs).items() if v is not None}


_READERS: weakref.WeakKeyDictionary[ReadContext, IndexReader] = weakref.WeakKeyDictionary()


def index_reader(ctx: ReadContext) -> IndexReader:
    """The (cached) index reader of one read context."""
    found = _READERS.get(ctx)
    if found is None:
        found = _READERS[ctx] = IndexReader(ctx)
    return found

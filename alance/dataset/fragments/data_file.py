"""Async reading of one data file: runs the format layer's read plans against the store.

Each read is a format-layer *plan* run against the store by :func:`alance.io.plans.run_plan`;
this module opens data files (2.x and legacy), caches their metadata and pages, and cuts
reads into steps.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from alance.dataset.fragments.zone_maps import ZoneMaps
from alance.errors import CorruptFileError, InvalidInputError, PathOutsideDatasetError
from alance.format.legacy.reader import LegacyFileReader, open_file
from alance.format.schema import LanceSchema
from alance.format.v2.container import V2File
from alance.format.v2.container import open_file as open_v2_file
from alance.format.v2.reader import V2FileReader
from alance.io.plans import OFFLOAD_BYTES, run_plan
from alance.io.store import MIN_COALESCE_GAP, DatasetStore

T = TypeVar("T")


#: A take of at most this many rows decodes on the calling thread unless a step fetched more
#: than :data:`TAKE_OFFLOAD_BYTES`: it decodes only the rows it picks (microseconds each), so
#: a hand-off to a worker thread would cost more than it saves. (Cloud stores coalesce ranges
#: up to a MiB apart, so a few hundred rows can arrive as megabytes: those go to a thread.)
INLINE_TAKE_ROWS = 256
TAKE_OFFLOAD_BYTES = 1024 * 1024


class _LruCache:
    """A small thread-safe LRU map bounded by the total (estimated) bytes of its values."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Any, value: Any, size: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


#: Decoded bytes a scan chunk aims at when its rows are narrow (see :func:`chunk_rows_for`).
CHUNK_TARGET_BYTES = 8 * 1024 * 1024
#: Never more rows than this in one scan chunk.
MAX_CHUNK_ROWS = 1024 * 1024


def _row_bytes(dtype: pa.DataType) -> int:
    """A rough size of one value of ``dtype`` once decoded (variable widths guessed)."""
    if isinstance(dtype, pa.ExtensionType):
        dtype = dtype.storage_type
    if pa.types.is_struct(dtype):
        return sum(_row_bytes(f.type) for f in dtype) + 1
    if pa.types.is_fixed_size_list(dtype):
        return dtype.list_size * _row_bytes(dtype.value_type) + 1
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        return 64
    if pa.types.is_dictionary(dtype):
        return 8
    try:
        return max(1, dtype.bit_width // 8)
    except ValueError:  # variable width
        return 32


def chunk_rows_for(fields: Sequence[Any], least: int,
                   target_bytes: int = CHUNK_TARGET_BYTES) -> int:
    """Rows per scan chunk for reading ``fields`` (LanceFields): about ``target_bytes`` of
    decoded values, at least ``least`` rows, so narrow scans pay per-chunk costs (requests,
    plan steps) fewer times."""
    width = sum(_row_bytes(f.data_type) for f in fields)
    if width <= 0:
        return least
    return int(max(least, min(MAX_CHUNK_ROWS, target_bytes // width)))


#: Opened data file metadata (footer, metadata, page table, tail bytes), process-wide.
_FILE_CACHE = _LruCache(max_bytes=64 * 1024 * 1024)


#: Scan chunks of 2.x files start at multiples of this many rows (2.x files have no row
#: groups; mini-blocks usually hold 1024 or fewer values).
V2_ROW_STEP = 1024


class DataFileReader:
    """An opened data file of a dataset (v0.1/v0.2 or 2.x): row ranges and random access."""

    def __init__(self, store: DatasetStore, path: str,
                 reader: LegacyFileReader | V2FileReader) -> None:
        self.store = store
        self.path = path
        self._reader = reader
        if isinstance(reader, V2FileReader):
            n = reader.num_rows
            self.row_group_bounds: np.ndarray = np.append(
                np.arange(0, n, V2_ROW_STEP, dtype=np.int64), n)
        else:
            self.row_group_bounds = reader.file.batch_offsets

    @property
    def file_version(self) -> tuple[int, int] | None:
        """(major, minor) from a 2.x file's footer (2.0 for footer version 0.3); ``None`` for
        v0.1/v0.2 files."""
        if isinstance(self._reader, V2FileReader):
            return self._reader.file.version
        return None

    @classmethod
    async def open_v2(cls, store: DatasetStore, path: str, schema: LanceSchema,
                      size: int | None, columns: Mapping[int, int]) -> DataFileReader:
        """Open a 2.x data file (footer, offset tables, column metadata: usually one request).

        ``columns`` maps leaf field ids to the file's column indices. Opened files (and the
        page state later reads gather) are remembered process-wide.
        """
        key = ("v2", store.limiter_key, store.root, path, size)
        file = _FILE_CACHE.get(key)
        if file is None:
            if size is None:
                size = (await store.head(path)).size
            try:
                file = await run_plan(open_v2_file(size, tail_size=store.tail_bytes), store,
                                      path)
                store.note_immutable(path, size)
            except PathOutsideDatasetError:
                raise
            except InvalidInputError as exc:
                raise CorruptFileError(f"{path}: {exc}") from exc
            _FILE_CACHE.put(key, file, len(file.tail) + 4096)
        return cls(store, path, V2FileReader(file, schema, columns=columns))

    @classmethod
    async def open(cls, store: DatasetStore, path: str, schema: LanceSchema, size: int | None,
                   dictionaries: Mapping[int, pa.Array] | None = None,
                   field_ids: Sequence[int] | None = None) -> DataFileReader:
        """Read the file's footer, metadata and page table (one request for small files).

        ``field_ids``: the ids the file was written with (they fix the page table's extent);
        by default those of ``schema``. Opened files are remembered process-wide (data files
        never change once written), so opening the same file again, from any dataset object,
        costs no request.
        """
        ids = tuple(field_ids) if field_ids else tuple(schema.field_ids())
        key = (store.limiter_key, store.root, path, size, ids)
        file = _FILE_CACHE.get(key)
        if file is None:
            if size is None:
                size = (await store.head(path)).size
            try:
                file = await run_plan(open_file(size, list(ids), tail_size=store.tail_bytes),
                                      store, path)
                store.note_immutable(path, size)
            except PathOutsideDatasetError:
                raise
            except InvalidInputError as exc:
                raise CorruptFileError(f"{path}: {exc}") from exc
            _FILE_CACHE.put(key, file, len(file.tail) + 64 * file.num_batches)
        return cls(store, path, LegacyFileReader(file, schema, dictionaries=dictionaries))

    @property
    def num_rows(self) -> int:
        """Rows in the file."""
        return self._reader.num_rows

    @property
    def metadata_bytes(self) -> int:
        """About how many bytes the file's opened metadata takes (as the cache counts it)."""
        if isinstance(self._reader, V2FileReader):
            return len(self._reader.file.tail) + 4096
        return len(self._reader.file.tail) + 64 * self._reader.file.num_batches

    @property
    def stored_schema(self) -> LanceSchema | None:
        """The schema the file records it was written with (dataset field ids), if any."""
        return self._reader.file.schema

    @property
    def v2_file(self) -> V2File | None:
        """The opened 2.x file (``None`` for v0.1/v0.2 files)."""
        return self._reader.file if isinstance(self._reader, V2FileReader) else None

    def column_of(self, field_id: int) -> int | None:
        """The 2.x column holding the leaf field ``field_id`` (``None``: none does)."""
        if not isinstance(self._reader, V2FileReader):
            return None
        column = self._reader.columns.get(field_id)
        return None if column is None or column < 0 else column

    async def _run(self, plan: Any, offload_bytes: int | None = OFFLOAD_BYTES,
                   ) -> pa.RecordBatch:
        return await run_plan(plan, self.store, self.path, offload_bytes)

    async def read_range(self, schema: LanceSchema, start: int, end: int) -> pa.RecordBatch:
        """Rows ``[start, end)`` of the fields in ``schema``."""
        self._check_rows(end)
        return await self._run(self._reader.read_range(start, end, schema))

    async def read_rows(self, schema: LanceSchema, rows: np.ndarray) -> pa.RecordBatch:
        """The rows at the given offsets (any order), reading only pages that hold them."""
        if len(rows):
            self._check_rows(int(np.max(rows)) + 1)
        offload = OFFLOAD_BYTES if len(rows) > INLINE_TAKE_ROWS else TAKE_OFFLOAD_BYTES
        if isinstance(self._reader, LegacyFileReader):
            # Rows closer than the store always reads through are asked for as one range.
            gap = min(self.store.coalesce_bytes, MIN_COALESCE_GAP)
            return await self._run(self._reader.take(rows, schema, gap), offload)
        return await self._run(self._reader.take(rows, schema), offload)

    # -- page statistics (v0.1/v0.2 files; 2.x files carry none) -------------------------------
    @property
    def group_offsets(self) -> np.ndarray | None:
        """Row offsets where the file's row groups (v0.2 pages; for 2.x files the groups
        scans read by) start, plus the end."""
        if isinstance(self._reader, LegacyFileReader):
            return self._reader.file.batch_offsets
        return self.row_group_bounds

    @property
    def zone_maps(self) -> ZoneMaps | None:
        """The zone maps learned of this 2.x file (see :mod:`alance.dataset.fragments.zone_maps`;
        ``None`` for v0.1/v0.2 files, which store statistics)."""
        if not isinstance(self._reader, V2FileReader):
            return None
        state = self._reader.file.page_state
        zones = state.get("zone-maps")
        if zones is None:
            zones = state.setdefault("zone-maps", ZoneMaps(self.row_group_bounds))
        return zones  # type: ignore[no-any-return]

    async def page_stats(self, field_ids: Sequence[int]) -> pa.RecordBatch | None:
        """Per-row-group statistics of the given fields (``None``: the file has none).

        Remembered process-wide like the file's metadata (files never change). For 2.x files:
        the zone maps learned so far."""
        if not isinstance(self._reader, LegacyFileReader):
            zones = self.zone_maps
            return None if zones is None else zones.stats(list(field_ids))
        key = ("stats", self.store.limiter_key, self.store.root, self.path, tuple(field_ids))
        cached = _FILE_CACHE.get(key)
        if cached is not None:
            return cached[0]  # type: ignore[no-any-return]
        result: pa.RecordBatch | None = await self._run(self._reader.read_page_stats(field_ids))
        _FILE_CACHE.put(key, (result,), (result.nbytes if result is not None else 0) + 64)
        return result

    def page_bytes(self, field_ids: Sequence[int], groups: np.ndarray) -> tuple[int, int]:
        """(pages, bytes) the given fields' pages take in the given row groups (v0.2 files).

        Page table entries hold positions and value counts, so a page's size is taken as the
        distance to the next page start in the file (the page table ends the data).
        """
        if not isinstance(self._reader, LegacyFileReader) or not len(groups):
            return 0, 0
        table = self._reader.file.page_table
        positions = table.entries[:, :, 0]
        present = table.entries[:, :, 1] > 0  # structs have no pages
        starts, ends = self._page_spans()
        pages = total = 0
        for fid in field_ids:
            row = fid - table.min_field_id
            if not 0 <= row < positions.shape[0]:
                continue
            pos = positions[row, groups][present[row, groups]]
            idx = np.searchsorted(starts, pos)
            pages += len(pos)
            total += int((ends[idx] - starts[idx]).sum())
        return pages, total

    def _page_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Every page start of a v0.2 file in order, and where each page ends (the next
        start; the page table after the last): remembered process-wide like the file."""
        key = ("page spans", self.store.limiter_key, self.store.root, self.path)
        spans: tuple[np.ndarray, np.ndarray] | None = _FILE_CACHE.get(key)
        if spans is None:
            assert isinstance(self._reader, LegacyFileReader)
            file = self._reader.file
            entries = file.page_table.entries
            starts = np.unique(entries[:, :, 0][entries[:, :, 1] > 0])
            spans = starts, np.append(starts[1:], file.metadata.page_table_position)
            _FILE_CACHE.put(key, spans, 16 * len(starts) + 64)
        return spans

    def _check_rows(self, end: int) -> None:
        if end > self.num_rows:
            raise CorruptFileError(f"{self.path}: has {self.num_rows} rows; the manifest "
                                   f"needs {end}")

"""Async reading of one data file: runs the format layer's read plans against the store.

The format layer (:mod:`alance.format.legacy`) describes a read as a *plan*: a generator that
yields the byte ranges it needs next and receives their bytes. This module is the IO side: it
fetches each step's ranges concurrently (coalesced by the store) and feeds them back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Generator, Mapping
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from alance.errors import CorruptFileError, InvalidInputError, PathOutsideDatasetError
from alance.format.legacy.reader import LegacyFileReader, open_file
from alance.format.schema import LanceSchema
from alance.format.v2.container import open_file as open_v2_file
from alance.format.v2.reader import V2FileReader
from alance.io.store import DatasetStore

T = TypeVar("T")


async def run_plan(plan: Generator[list[tuple[int, int]], list[bytes], T], store: DatasetStore,
                   path: str) -> T:
    """Drive a read plan to completion, fetching each step's ranges from ``path``."""
    try:
        ranges = next(plan)
        while True:
            data = await store.get_ranges(path, ranges)
            for (start, end), chunk in zip(ranges, data, strict=True):
                if len(chunk) != end - start:
                    raise CorruptFileError(f"{path}: file ends before byte {end}")
            ranges = plan.send(data)  # type: ignore[arg-type]  # views are bytes-like
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()


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
                file = await run_plan(open_v2_file(size), store, path)
            except PathOutsideDatasetError:
                raise
            except InvalidInputError as exc:
                raise CorruptFileError(f"{path}: {exc}") from exc
            _FILE_CACHE.put(key, file, len(file.tail) + 4096)
        return cls(store, path, V2FileReader(file, schema, columns=columns))

    @classmethod
    async def open(cls, store: DatasetStore, path: str, schema: LanceSchema, size: int | None,
                   dictionaries: Mapping[int, pa.Array] | None = None) -> DataFileReader:
        """Read the file's footer, metadata and page table (one request for small files).

        Opened files are remembered process-wide (data files never change once written), so
        opening the same file again, from any dataset object, costs no request.
        """
        ids = tuple(schema.field_ids())
        key = (store.limiter_key, store.root, path, size, ids)
        file = _FILE_CACHE.get(key)
        if file is None:
            if size is None:
                size = (await store.head(path)).size
            try:
                file = await run_plan(open_file(size, list(ids)), store, path)
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

    async def _run(self, plan: Any) -> pa.RecordBatch:
        return await run_plan(plan, self.store, self.path)

    async def read_range(self, schema: LanceSchema, start: int, end: int) -> pa.RecordBatch:
        """Rows ``[start, end)`` of the fields in ``schema``."""
        self._check_rows(end)
        return await self._run(self._reader.read_range(start, end, schema))

    async def read_rows(self, schema: LanceSchema, rows: np.ndarray) -> pa.RecordBatch:
        """The rows at the given offsets (any order), reading only pages that hold them."""
        if len(rows):
            self._check_rows(int(np.max(rows)) + 1)
        return await self._run(self._reader.take(rows, schema))

    def _check_rows(self, end: int) -> None:
        if end > self.num_rows:
            raise CorruptFileError(f"{self.path}: has {self.num_rows} rows; the manifest "
                                   f"needs {end}")

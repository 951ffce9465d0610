"""Single Lance data files outside any dataset (pylance's ``lance.file``).

:class:`LanceFileWriter` streams batches into one 2.0 / 2.1 / 2.2 file at a path or URI;
:class:`LanceFileReader` reads one back (all rows, a range, rows by position) and describes
it (:meth:`~LanceFileReader.metadata`, :meth:`~LanceFileReader.file_statistics`, global
buffers); :class:`LanceFileSession` opens both relative to one base path with one store.

Both compose the format layer (:mod:`alance.format.v2`: encoders, decoders, the container)
with the IO layer (:mod:`alance.io`); everything here is async. :mod:`alance.sync` has the
blocking twins (``alance.sync.file``).

Like pylance's writer, the writer gathers incoming batches until a column holds
``data_cache_bytes`` (8 MiB per column by default) and then writes them as pages, so many
small batches still make few pages; 2.0 files split pages larger than ``max_page_bytes``
(32 MiB by default), 2.1+ files keep a flush as one page. A file appears only when
:meth:`~LanceFileWriter.close` completes; :meth:`~LanceFileWriter.abort` (or an error)
leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf import text_format

from alance.errors import (
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from alance.format.schema import LanceSchema
from alance.format.v2.blob import blob_version, descriptor_schema, locate
from alance.format.v2.container import V2_0_FOOTER, V2File, open_file
from alance.format.v2.reader import V2FileReader
from alance.format.v2.writer import V2FileWriter
from alance.io.plans import run_plan
from alance.io.store import DatasetStore, ObjectWriter
from alance.io.uri import open_store

__all__ = [
    "LanceBufferDescriptor", "LanceColumnMetadata", "LanceColumnStatistics",
    "LanceFileMetadata", "LanceFileReader", "LanceFileSession", "LanceFileStatistics",
    "LanceFileWriter", "LancePageMetadata", "ReaderResults", "stable_version",
]

#: File versions a writer takes (pylance's names), as (major, minor).
FILE_VERSIONS = {"2.0": (2, 0), "0.3": (2, 0), "2.1": (2, 1), "2.2": (2, 2),
                 "stable": (2, 2), "next": (2, 2)}
#: What a writer writes when no version is given (pylance 14's stable version).
DEFAULT_VERSION = "2.2"
#: Bytes a column gathers before its pages are written (pylance's default per column).
CACHE_BYTES_PER_COLUMN = 8 * 1024 * 1024
#: 2.0 files split pages larger than this (pylance's default ``max_page_bytes``).
MAX_PAGE_BYTES = 32 * 1024 * 1024
#: 2.1+ files keep each flush as one page up to this size (pages split on read upstream).
V21_PAGE_BYTES = 1024 * 1024 * 1024
#: Rows a read fetches per request round (then cut into batches of ``batch_size``).
READ_CHUNK_BYTES = 16 * 1024 * 1024
#: Bytes each blob descriptor costs a writer's cache (the bytes go to the file as they come).
_BLOB_DESCRIPTOR_BYTES = 16


def stable_version() -> str:
    """The file version written when none is asked for."""
    return DEFAULT_VERSION


def _file_version(version: str | None) -> tuple[int, int]:
    key = (version or DEFAULT_VERSION).strip().lower()
    if key in ("legacy", "0.1", "0.2"):
        raise UnsupportedFeatureError(
            "LanceFileWriter writes 2.x files; legacy (0.1/0.2) files are written by "
            "write_dataset(data_storage_version='legacy')")
    if key not in FILE_VERSIONS:
        raise InvalidInputError(f"unknown Lance file version {version!r}; use "
                                f"{', '.join(repr(v) for v in FILE_VERSIONS)}")
    return FILE_VERSIONS[key]


def _split(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(directory URI, object name) of a file path or URI."""
    text = os.fspath(path)
    if "://" not in text:
        text = os.path.abspath(text)
    parent, sep, name = text.rstrip("/").rpartition("/")
    if not sep or not name:
        raise InvalidInputError(f"{os.fspath(path)!r} does not name a file")
    if "://" in text and parent.endswith(":/"):
        raise InvalidInputError(f"{text!r} names a bucket, not a file in it")
    return parent or "/", name


# -- writing ----------------------------------------------------------------------------------
class LanceFileWriter:
    """Writes one Lance file, batch by batch (pylance's ``LanceFileWriter``).

    ``schema``: the file's Arrow schema (default: the first batch's). ``version``: "2.0",
    "2.1", "2.2" (default, also "stable"). ``data_cache_bytes``: bytes gathered (over all
    columns) before pages are written. ``max_page_bytes``: the page size 2.0 files split at.
    Use ``async with`` or call :meth:`close`; an unclosed writer leaves no file.
    """

    def __init__(self, path: str | os.PathLike[str], schema: pa.Schema | None = None, *,
                 data_cache_bytes: int | None = None, version: str | None = None,
                 storage_options: Mapping[str, Any] | None = None,
                 max_page_bytes: int | None = None, keep_original_array: bool | None = None,
                 _store: DatasetStore | None = None, _name: str | None = None,
                 **kwargs: Any) -> None:
        unknown = {k for k, v in kwargs.items() if v is not None}
        if unknown:
            raise UnsupportedFeatureError(f"LanceFileWriter options not supported: "
                                          f"{sorted(unknown)}")
        if _store is None:
            parent, _name = _split(path)
            _store = open_store(parent, storage_options)
        assert _name is not None
        self.path = os.fspath(path)
        self._store, self._name = _store, _name
        self._version = _file_version(version)
        if max_page_bytes is not None and max_page_bytes < 1:
            raise InvalidInputError("max_page_bytes must be positive")
        if data_cache_bytes is not None and data_cache_bytes < 1:
            raise InvalidInputError("data_cache_bytes must be positive")
        self._page_bytes = (max_page_bytes or MAX_PAGE_BYTES) if self._version == (2, 0) \
            else V21_PAGE_BYTES
        self._cache_bytes = data_cache_bytes
        self._arrow_schema: pa.Schema | None = None
        self._encoder: V2FileWriter | None = None
        self._out: ObjectWriter | None = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = np.zeros(0, dtype=np.int64)
        self._globals: list[bytes] = []
        self._metadata: dict[str, bytes] = {}
        self.closed = False
        self._aborted = False
        if schema is not None:
            self._start(schema)

    def _start(self, schema: pa.Schema) -> None:
        if not len(schema):
            raise InvalidInputError("a Lance file needs at least one column")
        lance_schema = LanceSchema.from_arrow(schema)
        self._encoder = V2FileWriter(lance_schema, self._version, page_bytes=self._page_bytes,
                                     blob_v1=True)
        self._arrow_schema = schema
        self._pending_bytes = np.zeros(len(schema), dtype=np.int64)
        self._blobs = [bool(blob_version(f)) for f in lance_schema.fields]

    @property
    def _column_cache(self) -> int:
        n = len(self._pending_bytes) or 1
        return (self._cache_bytes // n) if self._cache_bytes else CACHE_BYTES_PER_COLUMN

    async def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add rows to the file (a record batch or a table)."""
        self._check_open()
        if isinstance(batch, pa.Table):
            batches = batch.to_batches()
            schema = batch.schema
        elif isinstance(batch, pa.RecordBatch):
            batches, schema = [batch], batch.schema
        else:
            raise InvalidInputError(f"write_batch takes a pyarrow RecordBatch or Table, not "
                                    f"{type(batch).__name__}")
        if self._arrow_schema is None:
            self._start(schema)
        assert self._arrow_schema is not None
        if schema.names != self._arrow_schema.names:
            raise SchemaMismatchError(f"batch columns {schema.names} do not match the file's "
                                      f"{self._arrow_schema.names}")
        for b in batches:
            if not b.num_rows:
                continue
            self._pending.append(b)
            self._pending_bytes += [
                _BLOB_DESCRIPTOR_BYTES * b.num_rows if blob else col.nbytes
                for col, blob in zip(b.columns, self._blobs, strict=True)]
            if self._pending_bytes.max() >= self._column_cache:
                await self._flush()

    def add_schema_metadata(self, key: str, value: str) -> None:
        """Add a key to the schema metadata the file records (before :meth:`close`)."""
        self._check_open()
        self._metadata[str(key)] = str(value).encode()

    def add_global_buffer(self, data: bytes) -> int:
        """Store arbitrary bytes in the file; returns their global buffer index (from 1:
        buffer 0 is the schema). Read them back with ``LanceFileReader.read_global_buffer``."""
        self._check_open()
        self._globals.append(bytes(data))
        return len(self._globals)

    def _check_open(self) -> None:
        if self.closed or self._aborted:
            raise InvalidInputError(f"{self.path}: the writer is closed")

    async def _writer(self) -> ObjectWriter:
        if self._out is None:
            out = self._store.open_writer(self._name)
            await out.__aenter__()
            self._out = out
        return self._out

    async def _flush(self) -> None:
        if not self._pending:
            return
        assert self._encoder is not None
        table = pa.Table.from_batches(self._pending, schema=self._pending[0].schema)
        self._pending = []
        self._pending_bytes[:] = 0
        out = await self._writer()
        try:
            buffers = await asyncio.to_thread(self._encoder.write_batch, table)
            for buf in buffers:
                await out.write(buf)
            if self._encoder.take_sidecar_chunks():
                raise UnsupportedFeatureError(
                    "blob values that need sidecar files can only be written to datasets")
        except BaseException:
            await self.abort()
            raise

    async def close(self) -> int | None:
        """Write what is gathered and the file's metadata; the file then exists. Returns
        the number of rows written (``None`` if already closed)."""
        if self.closed:
            return None
        if self._aborted:
            raise InvalidInputError(f"{self.path}: the write was aborted")
        if self._encoder is None:
            raise InvalidInputError("Schema is unknown and file cannot be created: give a "
                                    "schema or write at least one batch")
        await self._flush()
        encoder = self._encoder
        for key, value in self._metadata.items():
            encoder.set_schema_metadata(key, value)
        for data in self._globals:
            encoder.add_global_buffer(data)
        out = await self._writer()
        try:
            await out.write(encoder.finish())
        except BaseException:
            await self.abort()
            raise
        self.closed = True
        self._out = None
        await out.__aexit__(None, None, None)
        return encoder.num_rows

    async def abort(self) -> None:
        """Give the write up: nothing is left at the path."""
        if self.closed or self._aborted:
            return
        self._aborted = True
        self._pending = []
        out, self._out = self._out, None
        if out is not None:
            await out.__aexit__(InvalidInputError, InvalidInputError("aborted"), None)

    async def __aenter__(self) -> LanceFileWriter:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.abort()


# -- metadata ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LanceBufferDescriptor:
    """Where a buffer lies in the file."""

    position: int
    size: int


@dataclass(frozen=True)
class LancePageMetadata:
    """One page of a column: its buffers and a readable description of its encoding."""

    buffers: list[LanceBufferDescriptor]
    encoding: str


@dataclass(frozen=True)
class LanceColumnMetadata:
    """One column of the file: column-wide buffers and pages."""

    column_buffers: list[LanceBufferDescriptor]
    pages: list[LancePageMetadata]


@dataclass(frozen=True)
class LanceFileMetadata:
    """What a file's footer, offset tables and column metadata say (pylance's names)."""

    schema: pa.Schema
    num_rows: int
    num_data_bytes: int
    num_column_metadata_bytes: int
    num_global_buffer_bytes: int
    global_buffers: list[LanceBufferDescriptor]
    columns: list[LanceColumnMetadata]
    major_version: int
    minor_version: int


@dataclass(frozen=True)
class LanceColumnStatistics:
    """Pages of a column and the bytes their buffers take."""

    num_pages: int
    size_bytes: int


@dataclass(frozen=True)
class LanceFileStatistics:
    """Per-column page counts and sizes."""

    columns: list[LanceColumnStatistics]


def _buffers(pairs: Sequence[tuple[int, int]]) -> list[LanceBufferDescriptor]:
    return [LanceBufferDescriptor(p, s) for p, s in pairs]


# -- reading ----------------------------------------------------------------------------------
class ReaderResults:
    """The batches of one read: iterate them (``async for``) or gather :meth:`to_table`."""

    def __init__(self, schema: pa.Schema, batches: AsyncIterator[pa.RecordBatch]) -> None:
        self.schema = schema
        self._batches = batches

    def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        return self._batches

    def to_batches(self) -> AsyncIterator[pa.RecordBatch]:
        """The batches, streamed."""
        return self._batches

    async def to_table(self) -> pa.Table:
        """Every batch as one table."""
        batches = [b async for b in self._batches]
        return pa.Table.from_batches(batches, schema=self.schema)


class LanceFileReader:
    """Reads one Lance 2.x file (pylance's ``LanceFileReader``); open with :meth:`open`.

    ``columns``: top-level column names to read (default: all).
    """

    def __init__(self, store: DatasetStore, name: str, file: V2File,
                 columns: Sequence[str] | None = None) -> None:
        if file.schema is None:
            raise UnsupportedFeatureError(f"{name}: the file's schema cannot be read")
        self._store, self._name, self._file = store, name, file
        self._reader = V2FileReader(file)
        schema = file.schema
        if columns is not None:
            wanted = list(columns)
            missing = [c for c in wanted if c not in schema.names]
            if missing:
                raise InvalidInputError(f"{name}: no columns {missing} (columns: "
                                        f"{schema.names})")
            by_name = {f.name: f for f in schema.fields}
            ids = [g.id for c in wanted for g in by_name[c].walk()]
            schema = schema.with_ids(ids)
            order = {c: i for i, c in enumerate(wanted)}
            schema = LanceSchema(sorted(schema.fields, key=lambda f: order[f.name]),
                                 dict(schema.metadata))
        self._schema = schema
        self._read_schema = descriptor_schema(schema)
        self._blob_columns = [f.name for f in schema.fields if blob_version(f)]
        self._arrow = schema.to_arrow()
        self._has_dictionaries = any(pa.types.is_dictionary(f.data_type)
                                     for top in schema.fields for f in top.walk())

    @classmethod
    async def open(cls, path: str | os.PathLike[str],
                   storage_options: Mapping[str, Any] | None = None,
                   columns: Sequence[str] | None = None, *,
                   _store: DatasetStore | None = None, _name: str | None = None,
                   ) -> LanceFileReader:
        """Open the file at ``path`` (a local path or URI): reads its footer and metadata."""
        if _store is None:
            parent, _name = _split(path)
            _store = open_store(parent, storage_options)
        assert _name is not None
        size = (await _store.head(_name)).size
        file = await run_plan(open_file(size), _store, _name)
        return cls(_store, _name, file, columns)

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the columns read."""
        return self._arrow

    def num_rows(self) -> int:
        """Rows in the file."""
        return self._file.num_rows

    def _chunk_rows(self, batch_size: int) -> int:
        if self._has_dictionaries:
            # Each batch decoded on its own: a batch within one page gets exactly that
            # page's dictionary, as pylance returns it.
            return batch_size
        width = max(1, self._file.file_size // max(1, self._file.num_rows))
        per_round = max(1, READ_CHUNK_BYTES // width)
        return max(batch_size, per_round // batch_size * batch_size)

    def read_all(self, *, batch_size: int = 1024, batch_readahead: int = 16) -> ReaderResults:
        """Every row, in batches of ``batch_size`` rows."""
        return self.read_range(0, self._file.num_rows, batch_size=batch_size,
                               batch_readahead=batch_readahead)

    def read_range(self, start: int, num_rows: int, *, batch_size: int = 1024,
                   batch_readahead: int = 16) -> ReaderResults:
        """Rows ``[start, start + num_rows)``, in batches of ``batch_size`` rows."""
        _check_batch_size(batch_size)
        total = self._file.num_rows
        if start < 0 or num_rows < 0 or start + num_rows > total:
            raise InvalidInputError(f"{self._name}: rows {start}..{start + num_rows} are out "
                                    f"of range (the file has {total})")
        chunk = self._chunk_rows(batch_size)
        bounds = [(lo, min(lo + chunk, start + num_rows))
                  for lo in range(start, start + num_rows, chunk)]
        return ReaderResults(self._arrow, self._stream(
            [self._reader.read_range(lo, hi, self._read_schema) for lo, hi in bounds],
            batch_size))

    def take_rows(self, indices: Sequence[int] | Any, *, batch_size: int = 1024,
                  batch_readahead: int = 16) -> ReaderResults:
        """The rows at the given positions, in the order given."""
        _check_batch_size(batch_size)
        rows = np.asarray(indices, dtype=np.int64).reshape(-1)
        total = self._file.num_rows
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= total):
            bad = rows[(rows < 0) | (rows >= total)]
            raise InvalidInputError(f"{self._name}: row {int(bad[0])} is out of range (the "
                                    f"file has {total} rows)")
        parts = [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
        return ReaderResults(self._arrow, self._stream(
            [self._reader.take(part, self._read_schema) for part in parts], batch_size))

    async def _stream(self, plans: list[Any], batch_size: int,
                      ) -> AsyncIterator[pa.RecordBatch]:
        # One plan ahead: the next round of requests is in flight while a batch is consumed.
        tasks: list[asyncio.Task[pa.RecordBatch]] = []
        try:
            for plan in plans:
                tasks.append(asyncio.ensure_future(run_plan(plan, self._store, self._name)))
                if len(tasks) < 2 and plan is not plans[-1]:
                    continue
                batch = await tasks.pop(0)
                for piece in await self._finish(batch, batch_size):
                    yield piece
            while tasks:
                batch = await tasks.pop(0)
                for piece in await self._finish(batch, batch_size):
                    yield piece
        finally:
            for task in tasks:
                task.cancel()
            for plan in plans:
                plan.close()

    async def _finish(self, batch: pa.RecordBatch, batch_size: int) -> list[pa.RecordBatch]:
        if self._blob_columns:
            batch = await self._blob_bytes(batch)
        batch = pa.RecordBatch.from_arrays(batch.columns, schema=self._arrow)
        return [batch.slice(i, batch_size) for i in range(0, batch.num_rows, batch_size)]

    async def _blob_bytes(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Blob columns' descriptors replaced by the bytes they point at (same file)."""
        columns = list(batch.columns)
        for name in self._blob_columns:
            i = batch.schema.get_field_index(name)
            spots = locate(columns[i], [self._name] * batch.num_rows, v2=False,
                           v1_null_marker=self._file.version == (2, 0))
            ranges = [(s.position, s.position + (s.size or 0)) for s in spots if s and s.size]
            data = iter(await self._store.get_ranges(self._name, ranges) if ranges else [])
            values = [None if s is None else bytes(next(data)) if s.size else b""
                      for s in spots]
            columns[i] = pa.array(values, self._arrow.field(name).type)
        return pa.RecordBatch.from_arrays(columns, schema=self._arrow)

    def metadata(self) -> LanceFileMetadata:
        """The file's metadata: schema, sizes, columns and pages."""
        f = self._file
        footer = f.footer
        version = V2_0_FOOTER if f.version == (2, 0) else f.version
        global_bytes = sum(s for _, s in f.global_buffers)
        columns = []
        for index in range(f.num_columns):
            info = f.column(index)
            pages = [LancePageMetadata(_buffers(p.buffers),
                                       text_format.MessageToString(p.encoding))
                     for p in info.pages]
            columns.append(LanceColumnMetadata(_buffers(info.buffers), pages))
        assert f.schema is not None
        return LanceFileMetadata(
            schema=f.schema.to_arrow(), num_rows=f.num_rows,
            num_data_bytes=footer.column_meta_start - global_bytes,
            num_column_metadata_bytes=footer.gbo_table_start - footer.column_meta_start,
            num_global_buffer_bytes=global_bytes,
            global_buffers=_buffers(f.global_buffers), columns=columns,
            major_version=version[0], minor_version=version[1])

    def file_statistics(self) -> LanceFileStatistics:
        """Per column: its pages and the bytes their buffers take."""
        stats = []
        for index in range(self._file.num_columns):
            info = self._file.column(index)
            stats.append(LanceColumnStatistics(
                len(info.pages), sum(s for p in info.pages for _, s in p.buffers)))
        return LanceFileStatistics(stats)

    async def read_global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (0 is the schema)."""
        buffers = self._file.global_buffers
        if not 0 <= index < len(buffers):
            raise InvalidInputError(f"{self._name}: no global buffer {index} (the file has "
                                    f"{len(buffers)})")
        pos, size = buffers[index]
        if not size:
            return b""
        (data,) = await self._store.get_ranges(self._name, [(pos, pos + size)])
        return bytes(data)


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise InvalidInputError(f"batch_size must be positive, not {batch_size}")


class LanceFileSession:
    """Readers and writers of files under one base path, sharing one store connection."""

    def __init__(self, base_path: str | os.PathLike[str],
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.base_path = os.fspath(base_path)
        self._store = open_store(self.base_path, storage_options)

    async def open_reader(self, path: str, columns: Sequence[str] | None = None,
                          ) -> LanceFileReader:
        """A reader of ``path`` (relative to the base path)."""
        return await LanceFileReader.open(path, columns=columns, _store=self._store,
                                          _name=path)

    def open_writer(self, path: str, *, schema: pa.Schema | None = None,
                    data_cache_bytes: int | None = None, version: str | None = None,
                    keep_original_array: bool | None = None,
                    max_page_bytes: int | None = None) -> LanceFileWriter:
        """A writer of ``path`` (relative to the base path)."""
        return LanceFileWriter(path, schema, data_cache_bytes=data_cache_bytes,
                               version=version, max_page_bytes=max_page_bytes,
                               _store=self._store, _name=path)

"""Blocking twins of :mod:`alance.file` (pylance's ``lance.file``), as ``alance.sync.file``.

Thin: every call runs the async implementation on alance's background loop. A writer may be
shared by threads (calls are serialised); a writer dropped without :meth:`close` is aborted
and leaves no file.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from alance import _loop
from alance import file as _file
from alance.file import (
    LanceBufferDescriptor,
    LanceColumnMetadata,
    LanceColumnStatistics,
    LanceFileMetadata,
    LanceFileStatistics,
    LancePageMetadata,
    stable_version,
)

__all__ = ["LanceBufferDescriptor", "LanceColumnMetadata", "LanceColumnStatistics",
           "LanceFileMetadata", "LanceFileReader", "LanceFileSession", "LanceFileStatistics",
           "LanceFileWriter", "LancePageMetadata", "ReaderResults", "stable_version"]


class ReaderResults:
    """The batches of one read: :meth:`to_batches` (a streaming ``RecordBatchReader``) or
    :meth:`to_table`."""

    def __init__(self, results: _file.ReaderResults) -> None:
        self._async = results

    def to_batches(self) -> pa.RecordBatchReader:
        """The batches, streamed."""
        return pa.RecordBatchReader.from_batches(self._async.schema,
                                                _loop.iterate(self._async.to_batches()))

    def to_table(self) -> pa.Table:
        """Every batch as one table."""
        return _loop.run(self._async.to_table())


class LanceFileReader:
    """Blocking twin of :class:`alance.file.LanceFileReader`."""

    def __init__(self, path: str | os.PathLike[str] | None,
                 storage_options: Mapping[str, Any] | None = None,
                 columns: Sequence[str] | None = None, *,
                 _reader: _file.LanceFileReader | None = None) -> None:
        if _reader is None:
            if path is None:
                raise TypeError("LanceFileReader needs a path")
            _reader = _loop.run(_file.LanceFileReader.open(path, storage_options, columns))
        self._async = _reader

    def read_all(self, *, batch_size: int = 1024, batch_readahead: int = 16) -> ReaderResults:
        """Every row, in batches of ``batch_size`` rows."""
        return ReaderResults(self._async.read_all(batch_size=batch_size,
                                                  batch_readahead=batch_readahead))

    def read_range(self, start: int, num_rows: int, *, batch_size: int = 1024,
                   batch_readahead: int = 16) -> ReaderResults:
        """Rows ``[start, start + num_rows)``."""
        return ReaderResults(self._async.read_range(start, num_rows, batch_size=batch_size,
                                                    batch_readahead=batch_readahead))

    def take_rows(self, indices: Sequence[int] | Any, *, batch_size: int = 1024,
                  batch_readahead: int = 16) -> ReaderResults:
        """The rows at the given positions, in the order given."""
        return ReaderResults(self._async.take_rows(indices, batch_size=batch_size,
                                                   batch_readahead=batch_readahead))

    def metadata(self) -> LanceFileMetadata:
        """The file's metadata."""
        return self._async.metadata()

    def file_statistics(self) -> LanceFileStatistics:
        """Per-column page counts and sizes."""
        return self._async.file_statistics()

    def read_global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index``."""
        return _loop.run(self._async.read_global_buffer(index))

    def num_rows(self) -> int:
        """Rows in the file."""
        return self._async.num_rows()


class LanceFileWriter:
    """Blocking twin of :class:`alance.file.LanceFileWriter` (thread-safe)."""

    def __init__(self, path: str | os.PathLike[str] | None,
                 schema: pa.Schema | None = None, *, data_cache_bytes: int | None = None,
                 version: str | None = None, storage_options: Mapping[str, Any] | None = None,
                 max_page_bytes: int | None = None,
                 _writer: _file.LanceFileWriter | None = None, **kwargs: Any) -> None:
        self._lock = threading.Lock()
        if _writer is None:
            if path is None:
                raise TypeError("LanceFileWriter needs a path")
            _writer = _file.LanceFileWriter(path, schema, data_cache_bytes=data_cache_bytes,
                                            version=version, storage_options=storage_options,
                                            max_page_bytes=max_page_bytes, **kwargs)
        self._async = _writer

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._async.closed

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add rows to the file."""
        with self._lock:
            _loop.run(self._async.write_batch(batch))

    def close(self) -> int | None:
        """Finish the file; returns the rows written (``None`` if already closed)."""
        with self._lock:
            return _loop.run(self._async.close())

    def abort(self) -> None:
        """Give the write up: nothing is left at the path."""
        with self._lock:
            _loop.run(self._async.abort())

    def add_schema_metadata(self, key: str, value: str) -> None:
        """Add a key to the file's schema metadata."""
        with self._lock:
            self._async.add_schema_metadata(key, value)

    def add_global_buffer(self, data: bytes) -> int:
        """Store bytes in the file; returns their global buffer index."""
        with self._lock:
            return self._async.add_global_buffer(data)

    def __enter__(self) -> LanceFileWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        writer = getattr(self, "_async", None)
        if writer is None or writer.closed:
            return
        # At interpreter shutdown or on the loop's own thread there is nothing more to do
        # (an unfinished upload is never visible at the path).
        with contextlib.suppress(Exception):
            _loop.run(writer.abort(), timeout=30)


class LanceFileSession:
    """Blocking twin of :class:`alance.file.LanceFileSession`."""

    def __init__(self, base_path: str | os.PathLike[str],
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self._async = _file.LanceFileSession(base_path, storage_options)

    def open_reader(self, path: str, columns: Sequence[str] | None = None) -> LanceFileReader:
        """A reader of ``path`` (relative to the base path)."""
        return LanceFileReader(None, _reader=_loop.run(self._async.open_reader(path, columns)))

    def open_writer(self, path: str, *, schema: pa.Schema | None = None,
                    data_cache_bytes: int | None = None, version: str | None = None,
                    keep_original_array: bool | None = None,
                    max_page_bytes: int | None = None) -> LanceFileWriter:
        """A writer of ``path`` (relative to the base path)."""
        return LanceFileWriter(None, _writer=self._async.open_writer(
            path, schema=schema, data_cache_bytes=data_cache_bytes, version=version,
            keep_original_array=keep_original_array, max_page_bytes=max_page_bytes))

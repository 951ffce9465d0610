"""Blocking twins of :mod:`alance.file` (pylance's ``lance.file``), as ``alance.sync.file``.

Derived from the async classes (:mod:`alance.sync.twin`). A writer may be shared by threads
(calls are serialised); a writer dropped without :meth:`LanceFileWriter.close` is aborted and
leaves no file. As in pylance, ``ReaderResults.to_batches()`` is a streaming
``pyarrow.RecordBatchReader``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

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
from alance.sync.twin import Twin, blocking, forwarding

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["LanceBufferDescriptor", "LanceColumnMetadata", "LanceColumnStatistics",
           "LanceFileMetadata", "LanceFileReader", "LanceFileSession", "LanceFileStatistics",
           "LanceFileWriter", "LancePageMetadata", "ReaderResults", "stable_version"]


class ReaderResults(Twin, of=_file.ReaderResults):
    """The batches of one read: :meth:`to_batches` (a streaming ``RecordBatchReader``) or
    :meth:`to_table`."""

    def to_batches(self) -> pa.RecordBatchReader:
        """The batches, streamed (pylance's form: a ``pyarrow.RecordBatchReader``)."""
        return pa.RecordBatchReader.from_batches(self._async.schema,
                                                _loop.iterate(self._async.to_batches()))

    to_table = blocking(_file.ReaderResults.to_table)


_R = _file.LanceFileReader


class LanceFileReader(Twin, of=_R):
    """Blocking twin of :class:`alance.file.LanceFileReader`: ``LanceFileReader(path)``."""

    def __init__(self, path: str | os.PathLike[str] | None,
                 storage_options: Mapping[str, Any] | None = None,
                 columns: Sequence[str] | None = None, *,
                 _reader: _file.LanceFileReader | None = None) -> None:
        if _reader is None:
            if path is None:
                raise TypeError("LanceFileReader needs a path")
            _reader = _loop.run(_R.open(path, storage_options, columns))
        self._async = _reader

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the columns read."""
        return self._async.schema

    read_all = forwarding(_R.read_all)
    read_range = forwarding(_R.read_range)
    take_rows = forwarding(_R.take_rows)
    metadata = forwarding(_R.metadata)
    file_statistics = forwarding(_R.file_statistics)
    read_global_buffer = blocking(_R.read_global_buffer)
    num_rows = forwarding(_R.num_rows)


def _serialised(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """``method`` holding the writer's lock: threads sharing a writer take turns."""

    @functools.wraps(method)
    def locked(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


_W = _file.LanceFileWriter


class LanceFileWriter(Twin, of=_W):
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
            _writer = _W(path, schema, data_cache_bytes=data_cache_bytes, version=version,
                         storage_options=storage_options, max_page_bytes=max_page_bytes,
                         **kwargs)
        self._async = _writer

    def _adopted(self) -> None:
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._async.closed

    write_batch = _serialised(blocking(_W.write_batch))
    close = _serialised(blocking(_W.close))
    abort = _serialised(blocking(_W.abort))
    add_schema_metadata = _serialised(forwarding(_W.add_schema_metadata))
    add_global_buffer = _serialised(forwarding(_W.add_global_buffer))

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


def _reader(owner: Any, reader: _file.LanceFileReader) -> LanceFileReader:
    return LanceFileReader(None, _reader=reader)


def _writer(owner: Any, writer: _file.LanceFileWriter) -> LanceFileWriter:
    return LanceFileWriter(None, _writer=writer)


_S = _file.LanceFileSession


class LanceFileSession(Twin, of=_S):
    """Blocking twin of :class:`alance.file.LanceFileSession`."""

    def __init__(self, base_path: str | os.PathLike[str],
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self._async = _S(base_path, storage_options)

    open_reader = blocking(_S.open_reader, returns=_reader)
    open_writer = forwarding(_S.open_writer, returns=_writer)

"""Blocking facade over alance's async API, name for name.

Every call runs the one async implementation on alance's background event loop (see
:mod:`alance._loop`) and waits for it. Safe from any thread, from code already running an event
loop (e.g. Jupyter), and in processes forked after use (Spark's Python workers)::

    from alance import sync as al
    ds = al.open_dataset("/data/events.lance")
    table = ds.to_table(columns=["id"], filter="id > 10")
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from alance import _loop
from alance._proto import table_pb2
from alance.commit.registry import HandlerSpec
from alance.dataset import dataset as _async
from alance.dataset.dml import DeleteResult, MergeInsertResult, UpdateResult
from alance.dataset.merge_insert import MergeInsertBuilder as _AsyncMergeInsertBuilder
from alance.dataset.scan import Scanner as _AsyncScanner
from alance.format.schema import LanceSchema

T = TypeVar("T")


def _iterate(agen: AsyncIterator[T]) -> Iterator[T]:
    """A blocking iterator over an async iterator, stepped on the background loop."""
    try:
        while True:
            try:
                item: T = _loop.run(anext(agen))  # type: ignore[arg-type]
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            _loop.run(aclose())


class Scanner:
    """Blocking twin of :class:`alance.Scanner`."""

    def __init__(self, scanner: _AsyncScanner) -> None:
        self._async = scanner

    @property
    def output_schema(self) -> pa.Schema:
        """The schema of the batches this scan yields."""
        return self._async.output_schema

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Iterate over the result's record batches."""
        return _iterate(self._async.to_batches())

    def to_table(self) -> pa.Table:
        """The whole result as one table."""
        return _loop.run(self._async.to_table())

    def count_rows(self) -> int:
        """Number of result rows."""
        return _loop.run(self._async.count_rows())


class LanceDataset:
    """Blocking twin of :class:`alance.LanceDataset`."""

    def __init__(self, dataset: _async.LanceDataset) -> None:
        self._async = dataset

    def __repr__(self) -> str:
        return repr(self._async)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LanceDataset, (self._async,))

    @property
    def uri(self) -> str:
        """The URI the dataset was opened with."""
        return self._async.uri

    @property
    def version(self) -> int:
        """The version this object reads."""
        return self._async.version

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this version."""
        return self._async.schema

    @property
    def lance_schema(self) -> LanceSchema:
        """The Lance schema of this version."""
        return self._async.lance_schema

    @property
    def manifest(self) -> table_pb2.Manifest:
        """The raw manifest message of this version."""
        return self._async.manifest

    @property
    def data_storage_version(self) -> str:
        """The data file format version of the dataset."""
        return self._async.data_storage_version

    @property
    def max_field_id(self) -> int:
        """The highest field id of the schema."""
        return self._async.max_field_id

    def get_fragments(self) -> list[table_pb2.DataFragment]:
        """The fragments of this version."""
        return self._async.get_fragments()

    def latest_version(self) -> int:
        """The newest committed version number."""
        return _loop.run(self._async.latest_version())

    def versions(self) -> list[dict[str, Any]]:
        """Every version with its timestamp, oldest first."""
        return _loop.run(self._async.versions())

    def checkout_version(self, version: int) -> LanceDataset:
        """This dataset at another version."""
        return LanceDataset(_loop.run(self._async.checkout_version(version)))

    def scanner(self, columns: Sequence[str] | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,
                offset: int | None = None, batch_size: int | None = None,
                with_row_id: bool = False, with_row_address: bool = False,
                fragments: Sequence[Any] | None = None) -> Scanner:
        """A configured scan (see :meth:`alance.LanceDataset.scanner`)."""
        return Scanner(self._async.scanner(columns, filter, limit, offset, batch_size,
                                           with_row_id, with_row_address, fragments))

    def scan(self, columns: Sequence[str] | None = None,
             filter: str | pc.Expression | None = None, limit: int | None = None,
             offset: int | None = None, batch_size: int | None = None,
             with_row_id: bool = False, with_row_address: bool = False,
             ) -> Iterator[pa.RecordBatch]:
        """Iterate over the rows as record batches."""
        return self.scanner(columns, filter, limit, offset, batch_size, with_row_id,
                            with_row_address).to_batches()

    to_batches = scan

    def to_table(self, columns: Sequence[str] | None = None,
                 filter: str | pc.Expression | None = None, limit: int | None = None,
                 offset: int | None = None, batch_size: int | None = None,
                 with_row_id: bool = False, with_row_address: bool = False) -> pa.Table:
        """Read the rows into one table."""
        return _loop.run(self._async.to_table(columns, filter, limit, offset, batch_size,
                                              with_row_id, with_row_address))

    def head(self, num_rows: int, columns: Sequence[str] | None = None) -> pa.Table:
        """The first ``num_rows`` rows."""
        return _loop.run(self._async.head(num_rows, columns))

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Number of rows (matching ``filter`` if given)."""
        return _loop.run(self._async.count_rows(filter))

    def take(self, indices: Sequence[int] | Any, columns: Sequence[str] | None = None,
             ) -> pa.Table:
        """Rows by position in the dataset, in the order given."""
        return _loop.run(self._async.take(indices, columns))

    def delete(self, predicate: str | pc.Expression, **kwargs: Any) -> DeleteResult:
        """Blocking :meth:`alance.LanceDataset.delete` (``result.dataset`` is blocking too)."""
        return _wrapped(_loop.run(self._async.delete(predicate, **kwargs)))

    def update(self, updates: Mapping[str, Any], where: str | pc.Expression | None = None,
               **kwargs: Any) -> UpdateResult:
        """Blocking :meth:`alance.LanceDataset.update`."""
        return _wrapped(_loop.run(self._async.update(updates, where, **kwargs)))

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsertBuilder:
        """Blocking :meth:`alance.LanceDataset.merge_insert`."""
        return MergeInsertBuilder(self._async.merge_insert(on))


R = TypeVar("R", DeleteResult, UpdateResult, MergeInsertResult)


def _wrapped(result: R) -> R:
    return dataclasses.replace(result, dataset=LanceDataset(result.dataset))


class MergeInsertBuilder:
    """Blocking twin of :class:`alance.dataset.merge_insert.MergeInsertBuilder`."""

    def __init__(self, builder: _AsyncMergeInsertBuilder) -> None:
        self._async = builder

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        """Update matched rows (where ``condition`` holds)."""
        self._async.when_matched_update_all(condition)
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        """Insert unmatched source rows."""
        self._async.when_not_matched_insert_all()
        return self

    def when_not_matched_by_source_delete(self, expr: str | None = None) -> MergeInsertBuilder:
        """Delete table rows no source row matches (where ``expr`` holds)."""
        self._async.when_not_matched_by_source_delete(expr)
        return self

    def conflict_retries(self, retries: int) -> MergeInsertBuilder:
        """How many times to plan again after a retryable conflict."""
        self._async.conflict_retries(retries)
        return self

    def execute(self, data: Any, *, schema: pa.Schema | None = None) -> MergeInsertResult:
        """Run and commit the merge; returns the counts and the new version."""
        return _wrapped(_loop.run(self._async.execute(data, schema=schema)))


def open_dataset(uri: str | os.PathLike[str], version: int | None = None, *,
                 storage_options: Mapping[str, Any] | None = None,
                 commit_handler: HandlerSpec = None) -> LanceDataset:
    """Blocking :func:`alance.open_dataset`."""
    return LanceDataset(_loop.run(_async.open_dataset(
        uri, version, storage_options=storage_options, commit_handler=commit_handler)))


def write_dataset(data: Any, uri: str | os.PathLike[str], schema: pa.Schema | None = None,
                  mode: _async.WriteMode = "create", **kwargs: Any) -> LanceDataset:
    """Blocking :func:`alance.write_dataset` (same keyword arguments)."""
    return LanceDataset(_loop.run(_async.write_dataset(data, uri, schema, mode, **kwargs)))


__all__ = ["LanceDataset", "MergeInsertBuilder", "Scanner", "open_dataset", "write_dataset"]

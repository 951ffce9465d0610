"""Blocking twins of the fragment and manual-commit API (:mod:`alance.dataset.fragment`,
:mod:`alance.dataset.manual_commit`), re-exported by :mod:`alance.sync`.

Thin: every call runs the async implementation on the background loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, overload

import pyarrow as pa
import pyarrow.compute as pc

from alance import _loop
from alance.dataset import fragment as _fragment
from alance.dataset import manual_commit as _commit
from alance.dataset.commit.operations import LanceOperation, Transaction
from alance.dataset.fragments.metadata import DataFile, FragmentMetadata
from alance.sync import LanceDataset, Scanner, _iterate
from alance.sync_schema import LanceSchema

BulkCommitResult = _commit.BulkCommitResult

__all__ = ["BulkCommitResult", "FragmentSession", "LanceFragment", "commit", "commit_batch",
           "format_fragment", "write_fragments"]


class LanceFragment:
    """Blocking twin of :class:`alance.dataset.fragment.LanceFragment` (pylance's
    ``LanceFragment``)."""

    def __init__(self, dataset: LanceDataset | _fragment.LanceFragment,
                 fragment_id: int | None = None, **kwargs: Any) -> None:
        if isinstance(dataset, _fragment.LanceFragment):
            self._async = dataset
        else:
            self._async = _fragment.LanceFragment(dataset._async, fragment_id, **kwargs)

    def __repr__(self) -> str:
        return repr(self._async)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LanceFragment, (self._async,))

    @staticmethod
    def create(dataset_uri: Any, data: Any, fragment_id: int | None = None,
               schema: pa.Schema | None = None, **kwargs: Any) -> FragmentMetadata:
        """Write ``data`` as one new uncommitted fragment; returns its metadata."""
        return _loop.run(_fragment.create_fragment(dataset_uri, data, fragment_id, schema,
                                                   **kwargs))

    @staticmethod
    def create_from_file(filename: str, dataset: LanceDataset,
                         fragment_id: int = 0) -> FragmentMetadata:
        """The metadata of a new fragment made of one existing file under ``data/`` (see
        :func:`alance.dataset.fragment.fragment_from_file`)."""
        return _loop.run(_fragment.fragment_from_file(filename, dataset._async, fragment_id))

    @property
    def fragment_id(self) -> int:
        """The fragment's id."""
        return self._async.fragment_id

    @property
    def metadata(self) -> FragmentMetadata:
        """The fragment's metadata."""
        return self._async.metadata

    @property
    def physical_rows(self) -> int:
        """Rows in the data files, deleted ones included."""
        return self._async.physical_rows

    @property
    def num_deletions(self) -> int:
        """Rows deleted from this fragment."""
        return self._async.num_deletions

    @property
    def schema(self) -> pa.Schema:
        """The dataset's Arrow schema."""
        return self._async.schema

    def data_files(self) -> list[DataFile]:
        """The fragment's data files."""
        return self._async.data_files()

    def deletion_file(self) -> str | None:
        """The deletion file's path (relative to the dataset root), if any."""
        return self._async.deletion_file()

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Live rows (matching ``filter`` if given)."""
        return _loop.run(self._async.count_rows(filter))

    def scanner(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,
                offset: int | None = None, batch_size: int | None = None,
                with_row_id: bool = False, with_row_address: bool = False,
                **options: Any) -> Scanner:
        """A scan of this fragment only."""
        return Scanner(self._async.scanner(columns, filter, limit, offset, batch_size,
                                           with_row_id, with_row_address, **options))

    def to_table(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                 filter: str | pc.Expression | None = None, limit: int | None = None,
                 offset: int | None = None, **options: Any) -> pa.Table:
        """The fragment's rows as a table."""
        return _loop.run(self._async.to_table(columns, filter, limit, offset, **options))

    def to_batches(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                   filter: str | pc.Expression | None = None, limit: int | None = None,
                   offset: int | None = None, **options: Any) -> Iterator[pa.RecordBatch]:
        """The fragment's rows as record batches."""
        return _iterate(self._async.to_batches(columns, filter, limit, offset, **options))

    def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` rows."""
        return _loop.run(self._async.head(num_rows))

    def take(self, indices: Sequence[int] | Any,
             columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows by position within the fragment."""
        return _loop.run(self._async.take(indices, columns))

    def merge(self, data_obj: Any, left_on: str, right_on: str | None = None,
              schema: pa.Schema | None = None) -> tuple[FragmentMetadata, Any]:
        """Add columns by a left join, uncommitted: (new metadata, new schema)."""
        meta, merged = _loop.run(self._async.merge(data_obj, left_on, right_on, schema))
        return meta, LanceSchema(merged)

    def merge_columns(self, value_func: Any, columns: Sequence[str] | None = None,
                      batch_size: int | None = None, reader_schema: pa.Schema | None = None,
                      ) -> tuple[FragmentMetadata, Any]:
        """Add computed columns, uncommitted: (new metadata, new schema)."""
        meta, merged = _loop.run(self._async.merge_columns(value_func, columns, batch_size,
                                                           reader_schema))
        return meta, LanceSchema(merged)

    def update_columns(self, value_obj: Any, left_on: str = "_rowid",
                       right_on: str | None = None) -> tuple[FragmentMetadata, list[int]]:
        """Replace values of existing columns, uncommitted: (new metadata, field ids)."""
        return _loop.run(self._async.update_columns(value_obj, left_on, right_on))

    def open_session(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                     with_row_address: bool | None = None) -> FragmentSession:
        """A session for repeated takes of the same columns."""
        return FragmentSession(self._async.open_session(columns, with_row_address))

    def delete(self, predicate: str) -> FragmentMetadata | None:
        """Delete matching rows, uncommitted: the new metadata, or ``None`` if all are gone."""
        return _loop.run(self._async.delete(predicate))


class FragmentSession:
    """Blocking twin of :class:`alance.dataset.fragment.FragmentSession`."""

    def __init__(self, session: _fragment.FragmentSession) -> None:
        self._async = session

    def take(self, indices: Sequence[int] | Any) -> pa.Table:
        """Rows by position within the fragment."""
        return _loop.run(self._async.take(indices))


def format_fragment(fragment: Any, dataset: Any) -> str:
    """pylance's ``lance.debug.format_fragment``."""
    return _fragment.format_fragment(fragment, getattr(dataset, "_async", dataset))


@overload
def write_fragments(data: Any, dataset_uri: Any, schema: pa.Schema | None = None, *,
                    return_transaction: Literal[False] = False,
                    **kwargs: Any) -> list[FragmentMetadata]: ...
@overload
def write_fragments(data: Any, dataset_uri: Any, schema: pa.Schema | None = None, *,
                    return_transaction: Literal[True], **kwargs: Any) -> Transaction: ...
def write_fragments(data: Any, dataset_uri: Any, schema: pa.Schema | None = None, *,
                    return_transaction: bool = False,
                    **kwargs: Any) -> list[FragmentMetadata] | Transaction:
    """Blocking :func:`alance.dataset.fragment.write_fragments`."""
    return _loop.run(_fragment.write_fragments(data, dataset_uri, schema,
                                               return_transaction=return_transaction,
                                               **kwargs))


def commit(base_uri: Any, operation: LanceOperation.BaseOperation | Transaction,
           read_version: int | None = None, *args: Any, **kwargs: Any) -> LanceDataset:
    """Blocking :func:`alance.dataset.manual_commit.commit` (``LanceDataset.commit``)."""
    return LanceDataset(_loop.run(_commit.commit(base_uri, operation, read_version, *args,
                                                 **kwargs)))


def commit_batch(dest: Any, transactions: Sequence[Transaction], *args: Any,
                 **kwargs: Any) -> _commit.BulkCommitResult:
    """Blocking :func:`alance.dataset.manual_commit.commit_batch`."""
    result = _loop.run(_commit.commit_batch(dest, transactions, *args, **kwargs))
    return _commit.BulkCommitResult(LanceDataset(result.dataset), result.merged)

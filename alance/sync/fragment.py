"""Blocking twins of the fragment and manual-commit API (:mod:`alance.dataset.fragment`,
:mod:`alance.dataset.manual_commit`), derived from the async ones (:mod:`alance.sync.twin`)."""

from __future__ import annotations

from typing import Any, Literal, overload

import pyarrow as pa

from alance import _loop
from alance.dataset import fragment as _fragment
from alance.dataset import manual_commit as _commit
from alance.dataset.commit.operations import Transaction
from alance.dataset.fragments.metadata import FragmentMetadata
from alance.sync.dataset import LanceDataset
from alance.sync.schema import LanceSchema
from alance.sync.twin import Twin, blocking, blocking_function, forwarding, iterating, unwrap

BulkCommitResult = _commit.BulkCommitResult
_F = _fragment.LanceFragment

__all__ = ["BulkCommitResult", "FragmentSession", "LanceFragment", "format_fragment",
           "write_fragments"]


def _with_lance_schema(owner: Any, result: tuple[FragmentMetadata, Any],
                       ) -> tuple[FragmentMetadata, LanceSchema]:
    meta, schema = result
    return meta, LanceSchema(schema)


class LanceFragment(Twin, of=_F):
    """Blocking twin of :class:`alance.dataset.fragment.LanceFragment` (pylance's
    ``LanceFragment``): ``LanceFragment(dataset, fragment_id)``."""

    def __init__(self, dataset: LanceDataset | _fragment.LanceFragment,
                 fragment_id: int | None = None, **kwargs: Any) -> None:
        if isinstance(dataset, _F):
            self._async = dataset
        else:
            self._async = _F(unwrap(dataset), fragment_id, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LanceFragment, (self._async,))

    create = staticmethod(blocking_function(_fragment.create_fragment))
    create_from_file = staticmethod(blocking_function(_fragment.fragment_from_file))

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

    @property
    def dataset(self) -> LanceDataset:
        """The dataset version this fragment belongs to."""
        return LanceDataset(self._async.dataset)

    data_files = forwarding(_F.data_files)
    deletion_file = forwarding(_F.deletion_file)
    count_rows = blocking(_F.count_rows)
    scanner = forwarding(_F.scanner)
    to_table = blocking(_F.to_table)
    to_batches = iterating(_F.to_batches)
    head = blocking(_F.head)
    take = blocking(_F.take)
    row_addresses = blocking(_F.row_addresses)
    merge = blocking(_F.merge, returns=_with_lance_schema)
    merge_columns = blocking(_F.merge_columns, returns=_with_lance_schema)
    update_columns = blocking(_F.update_columns)
    open_session = forwarding(_F.open_session)
    delete = blocking(_F.delete)


class FragmentSession(Twin, of=_fragment.FragmentSession):
    """Blocking twin of :class:`alance.dataset.fragment.FragmentSession`."""

    take = blocking(_fragment.FragmentSession.take)


def format_fragment(fragment: Any, dataset: Any) -> str:
    """pylance's ``lance.debug.format_fragment``."""
    return _fragment.format_fragment(fragment, unwrap(dataset))


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
    return _loop.run(_fragment.write_fragments(unwrap(data), unwrap(dataset_uri), schema,
                                               return_transaction=return_transaction,
                                               **kwargs))

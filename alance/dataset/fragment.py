"""Fragments as objects (pylance's ``LanceFragment``) and writing uncommitted fragments
(pylance's ``write_fragments`` / ``LanceFragment.create``).

A :class:`LanceFragment` is one fragment of one dataset version: it reads through that
version's scanner restricted to the fragment, and its :meth:`~LanceFragment.delete` writes a
deletion file and returns the new :class:`FragmentMetadata` without committing (commit it
with a ``LanceOperation.Delete``). :func:`write_fragments` writes data files for a dataset
(existing or not) and returns their metadata, or a ready :class:`Transaction`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.dataset.api import LanceDataset
from alance.dataset.commit.operations import LanceOperation, Transaction
from alance.dataset.distributed.dml import fragment_addresses
from alance.dataset.distributed.write import planned_write
from alance.dataset.evolution.fragment_columns import (
    merge_fragment,
    merge_fragment_columns,
    update_fragment_columns,
)
from alance.dataset.fragments.deletions import WrittenFiles, apply_deletions, split_addresses
from alance.dataset.fragments.metadata import DataFile, DeletionFile, FragmentMetadata
from alance.dataset.fragments.progress import ProgressEvents
from alance.dataset.fragments.read import live_rows
from alance.dataset.fragments.write import WriteParams
from alance.dataset.query.scan import Scanner
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    EmptyWriteError,
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from alance.format.feature_flags import check_writer_flags
from alance.format.manifest import DATA_DIR
from alance.format.schema import LanceSchema
from alance.format.v2.container import open_file as open_v2_file
from alance.format.v2.encode_v20 import columns20
from alance.format.v2.leaf import leaves_of
from alance.io.plans import run_plan
from alance.io.uri import open_store

__all__ = ["FragmentSession", "LanceFragment", "format_fragment", "write_fragments"]


class LanceFragment:
    """One fragment of a dataset version (see the module documentation)."""

    def __init__(self, dataset: LanceDataset, fragment_id: int | None = None, *,
                 fragment: table_pb2.DataFragment | None = None) -> None:
        if fragment is None:
            if fragment_id is None:
                raise InvalidInputError("give fragment_id or fragment")
            found = [f for f in dataset.fragment_protos() if f.id == fragment_id]
            if not found:
                raise InvalidInputError(f"no fragment {fragment_id} in version "
                                        f"{dataset.version}")
            fragment = found[0]
        self._ds = dataset
        self._proto = fragment

    def __repr__(self) -> str:
        return f"LanceFragment(id={self.fragment_id}, metadata={self.metadata!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (self._ds, self._proto.SerializeToString()))

    @property
    def dataset(self) -> LanceDataset:
        """The dataset version this fragment belongs to."""
        return self._ds

    @property
    def fragment_id(self) -> int:
        """The fragment's id."""
        return self._proto.id

    @property
    def metadata(self) -> FragmentMetadata:
        """The fragment's metadata."""
        return FragmentMetadata.from_proto(self._proto)

    @property
    def physical_rows(self) -> int:
        """Rows in the data files, deleted ones included."""
        return self._proto.physical_rows

    @property
    def num_deletions(self) -> int:
        """Rows deleted from this fragment."""
        return self._proto.physical_rows - live_rows(self._proto)

    @property
    def schema(self) -> pa.Schema:
        """The dataset's Arrow schema."""
        return self._ds.schema

    def data_files(self) -> list[DataFile]:
        """The fragment's data files."""
        return self.metadata.files

    def deletion_file(self) -> str | None:
        """The path of the deletion file (relative to the dataset root), if any."""
        deletion = self.metadata.deletion_file
        return None if deletion is None else deletion.path(self.fragment_id)

    def scanner(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,
                offset: int | None = None, batch_size: int | None = None,
                with_row_id: bool = False, with_row_address: bool = False,
                **options: Any) -> Scanner:
        """A scan of this fragment only (arguments as :meth:`LanceDataset.scanner`)."""
        options.pop("fragments", None)
        return self._ds.scanner(columns, filter, limit, offset, batch_size, with_row_id,
                                with_row_address, [self.fragment_id], **options)

    async def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Live rows (matching ``filter`` if given)."""
        if filter is None:
            return live_rows(self._proto)
        return await self.scanner(columns=[], filter=filter).count_rows()

    async def to_table(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                       filter: str | pc.Expression | None = None, limit: int | None = None,
                       offset: int | None = None, **options: Any) -> pa.Table:
        """The fragment's rows as a table."""
        return await self.scanner(columns, filter, limit, offset, **options).to_table()

    def to_batches(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                   filter: str | pc.Expression | None = None, limit: int | None = None,
                   offset: int | None = None, **options: Any,
                   ) -> AsyncIterator[pa.RecordBatch]:
        """The fragment's rows as record batches."""
        return self.scanner(columns, filter, limit, offset, **options).to_batches()

    async def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` rows."""
        return await self.to_table(limit=num_rows)

    async def take(self, indices: Sequence[int] | Any,
                   columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows by position among this fragment's live rows, in the order given."""
        before = 0
        for frag in self._ds.fragment_protos():
            if frag.id == self.fragment_id:
                break
            before += live_rows(frag)
        positions = [int(i) for i in indices]
        total = live_rows(self._proto)
        bad = [i for i in positions if not 0 <= i < total]
        if bad:
            raise IndexError(f"indices {bad[:5]} out of range for a fragment of {total} rows")
        return await self._ds.take([before + i for i in positions], columns)

    def open_session(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                     with_row_address: bool | None = None) -> FragmentSession:
        """A session for repeated takes of the same columns from this fragment."""
        return FragmentSession(self, columns, bool(with_row_address))

    async def row_addresses(self, indices: Sequence[int] | Any) -> pa.Array:
        """The row addresses of live rows by position within this fragment."""
        table = await self.to_table(columns=[], with_row_address=True)
        return table.column("_rowaddr").take(pa.array([int(i) for i in indices], pa.int64()))

    async def delete(self, predicate: str) -> FragmentMetadata | None:
        """Delete the rows matching ``predicate`` from this fragment, uncommitted.

        Writes a new deletion file and returns the fragment's new metadata (commit it with
        ``LanceOperation.Delete``), or ``None`` when every row is now deleted; returns the
        metadata unchanged when nothing matches.
        """
        ctx = self._ds._ctx
        addresses = await fragment_addresses(ctx, predicate, [self.fragment_id])
        if len(addresses) == 0:
            return self.metadata
        updated, _removed = await apply_deletions(ctx, split_addresses(addresses),
                                                  WrittenFiles())
        return FragmentMetadata.from_proto(updated[0]) if updated else None


    async def merge(self, data_obj: Any, left_on: str, right_on: str | None = None,
                    schema: pa.Schema | None = None) -> tuple[FragmentMetadata, LanceSchema]:
        """Add the columns of ``data_obj`` to this fragment (left join), uncommitted.

        Returns the new metadata and the dataset schema with the new columns: commit both
        (for every fragment) with ``LanceOperation.Merge``."""
        out, merged = await merge_fragment(self._ds._ctx, self._proto, data_obj, left_on,
                                           right_on, schema)
        return FragmentMetadata.from_proto(out), merged

    async def merge_columns(self, value_func: Any, columns: Sequence[str] | None = None,
                            batch_size: int | None = None,
                            reader_schema: pa.Schema | None = None,
                            ) -> tuple[FragmentMetadata, LanceSchema]:
        """Add computed columns to this fragment, uncommitted (``value_func`` as
        :meth:`LanceDataset.add_columns` takes it). Returns the new metadata and the schema
        with the new columns: commit them with ``LanceOperation.Merge``."""
        if reader_schema is not None and callable(value_func):
            value_func.output_schema = reader_schema  # type: ignore[attr-defined]
        out, merged = await merge_fragment_columns(self._ds._ctx, self._proto, value_func,
                                                   columns, batch_size)
        return FragmentMetadata.from_proto(out), merged

    async def update_columns(self, value_obj: Any, left_on: str = "_rowid",
                             right_on: str | None = None,
                             ) -> tuple[FragmentMetadata, list[int]]:
        """Replace values of existing columns in the rows matched by ``left_on`` =
        ``right_on``, uncommitted. Returns the new metadata and the modified field ids
        (commit them with ``LanceOperation.Update(updated_fragments=...,
        fields_modified=...)``)."""
        out, ids = await update_fragment_columns(self._ds._ctx, self._proto, value_obj,
                                                 left_on, right_on)
        return FragmentMetadata.from_proto(out), ids


class FragmentSession:
    """Repeated takes of fixed columns from one fragment (pylance's ``FragmentSession``)."""

    def __init__(self, fragment: LanceFragment,
                 columns: Sequence[str] | Mapping[str, str] | None,
                 with_row_address: bool) -> None:
        self.fragment = fragment
        self.columns = columns
        self.with_row_address = with_row_address

    async def take(self, indices: Sequence[int] | Any) -> pa.Table:
        """Rows by position within the fragment (with ``_rowaddr`` if asked for)."""
        positions = [int(i) for i in indices]
        table = await self.fragment.take(positions, self.columns)
        if self.with_row_address:
            table = table.append_column(
                pa.field("_rowaddr", pa.uint64()),
                await self.fragment.row_addresses(positions))
        return table


def format_fragment(fragment: Any, dataset: LanceDataset) -> str:
    """A readable dump of a fragment's metadata (pylance's ``lance.debug.format_fragment``)."""
    from google.protobuf import text_format
    meta = getattr(fragment, "metadata", fragment)
    proto = meta.to_proto() if isinstance(meta, FragmentMetadata) else meta
    return text_format.MessageToString(proto)


def _reopen(dataset: LanceDataset, fragment: bytes) -> LanceFragment:
    return LanceFragment(dataset, fragment=table_pb2.DataFragment.FromString(fragment))


async def write_fragments(data: Any, dataset_uri: Any, schema: pa.Schema | None = None, *,
                          return_transaction: bool = False, mode: str = "append",
                          max_rows_per_file: int = 1024 * 1024,
                          max_rows_per_group: int | None = 1024,
                          max_bytes_per_file: int = 90 * 1024**3,
                          progress: Any = None, data_storage_version: str | None = None,
                          use_legacy_format: bool | None = None,
                          storage_options: Mapping[str, Any] | None = None,
                          enable_stable_row_ids: bool = False, fragment_id: int = 0,
                          **kwargs: Any,
                          ) -> list[FragmentMetadata] | Transaction:
    """Write ``data`` into new fragments of the dataset at ``dataset_uri``, uncommitted.

    For an existing dataset (``mode="append"``) the rows take its schema and field ids; for a
    new one, or ``mode="overwrite"``, the data's schema. Returns the fragments' metadata (ids
    0: assigned at commit), or with ``return_transaction`` a :class:`Transaction` (an Append,
    or an Overwrite) ready for ``LanceDataset.commit``.
    """
    unknown = {k for k, v in kwargs.items() if v not in (None, False, "reference")}
    if unknown:
        raise UnsupportedFeatureError(f"write_fragments options not supported: {sorted(unknown)}")
    if mode not in ("append", "overwrite", "create"):
        raise InvalidInputError(f"mode must be 'append', 'overwrite' or 'create', not {mode!r}")
    if use_legacy_format is not None and data_storage_version is None:
        data_storage_version = "legacy" if use_legacy_format else "stable"
    target = getattr(dataset_uri, "_async", dataset_uri)
    uri = target.uri if isinstance(target, LanceDataset) else os.fspath(dataset_uri)
    options = dict(storage_options or {})
    store = open_store(uri, options)
    base = await _latest(target, store, uri, options)
    if base is not None:
        check_writer_flags(base.manifest.writer_feature_flags)
    arrow_schema = schema
    if arrow_schema is None:
        from alance.dataset.fragments.inputs import record_batch_stream  # peek the data's schema
        arrow_schema, stream = await record_batch_stream(data)
        data = _resumed(stream)
    if len(arrow_schema) == 0:
        raise EmptyWriteError("write_fragments: the data has no columns")
    params = WriteParams(max_rows_per_file, max_rows_per_group or 1024, max_bytes_per_file)
    plan = planned_write(base, uri, "append" if mode == "append" else "overwrite",
                         arrow_schema, options, params, None, data_storage_version)
    events = (ProgressEvents(progress, fragment_id, plan.schema.field_ids())
              if progress else None)
    fragments, _rows = await plan.write_to(store, data, arrow_schema, events)
    metas = [FragmentMetadata.from_proto(f) for f in fragments]
    for meta in metas:
        meta.id = fragment_id
    if not return_transaction:
        return metas
    read_version = base.version if base is not None else 0
    operation: LanceOperation.BaseOperation
    if base is not None and mode == "append":
        operation = LanceOperation.Append(metas)
    else:
        operation = LanceOperation.Overwrite(plan.schema, metas)
    return Transaction(read_version, operation)


async def _resumed(stream: AsyncIterator[pa.RecordBatch]) -> AsyncIterator[pa.RecordBatch]:
    async for batch in stream:
        yield batch


async def _latest(target: Any, store: Any, uri: str, options: Mapping[str, Any],
                  ) -> Snapshot | None:
    if isinstance(target, LanceDataset):
        return await load_snapshot(target._store, target._handler)
    from alance.commit.registry import commit_handler_for
    try:
        return await load_snapshot(store, commit_handler_for(uri, options, None))
    except DatasetNotFoundError:
        return None


async def create_fragment(dataset_uri: Any, data: Any, fragment_id: int | None = None,
                          schema: pa.Schema | None = None, **kwargs: Any) -> FragmentMetadata:
    """Write ``data`` as ONE new uncommitted fragment (pylance's ``LanceFragment.create``)."""
    kwargs.setdefault("max_rows_per_file", 2**62)
    kwargs.setdefault("max_bytes_per_file", 2**62)
    metas = await write_fragments(data, dataset_uri, schema, fragment_id=fragment_id or 0,
                                  **kwargs)
    assert isinstance(metas, list)
    if len(metas) != 1:
        raise EmptyWriteError("LanceFragment.create needs at least one row to write")
    return metas[0]


async def fragment_from_file(filename: str, dataset: LanceDataset,
                             fragment_id: int = 0) -> FragmentMetadata:
    """Metadata of a new fragment made of one existing 2.x file under the dataset's
    ``data/`` directory (pylance's ``LanceFragment.create_from_file``): its columns are
    matched to the dataset's fields by name and must have their types. Commit it with
    ``LanceOperation.Append`` (the id is assigned then)."""
    if "/" in filename or filename in ("", ".", ".."):
        raise InvalidInputError(f"{filename!r}: give the file's name under data/")
    path = f"{DATA_DIR}/{filename}"
    size = (await dataset._store.head(path)).size
    file = await run_plan(open_v2_file(size), dataset._store, path)
    if file.schema is None:
        raise CorruptFileError(f"{path}: the file's schema cannot be read")
    names = file.schema.names
    missing = [n for n in names if n not in dataset.schema.names]
    if missing:
        raise SchemaMismatchError(f"{path}: columns {missing} are not in the dataset "
                                  f"(columns {dataset.schema.names})")
    ours = dataset.lance_schema.project(names)
    if not ours.to_arrow().equals(file.schema.to_arrow()):
        raise SchemaMismatchError(f"{path}: the file's schema {file.schema.to_arrow()} does "
                                  f"not match the dataset's {ours.to_arrow()}")
    version = file.version
    if version == (2, 0):
        leaves = columns20(list(ours.fields))
    else:
        leaves = [leaf for f in ours.fields for leaf in leaves_of(f)]
    ids = [leaf.id for leaf in leaves]
    meta = FragmentMetadata(fragment_id, [DataFile(filename, ids, list(range(len(ids))),
                                                   version[0], version[1], size)],
                            physical_rows=file.num_rows)
    return meta


__all__ += ["DeletionFile", "create_fragment", "fragment_from_file"]

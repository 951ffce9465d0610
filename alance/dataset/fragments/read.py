"""Reading fragments: data files, deletion files, and columns no data file holds (nulls).

:class:`ReadContext` belongs to one dataset version and caches what is immutable in it (opened
data file metadata, deletion vectors). :class:`FragmentReader` assembles the projected columns
of one fragment from however many data files hold them.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2
from alance.dataset.fragments.data_file import DataFileReader
from alance.dataset.fragments.json_columns import is_json, text_view, to_text_column
from alance.dataset.fragments.session import session_of
from alance.dataset.versions.bases import base_store as open_base_store
from alance.dataset.versions.bases import find_base
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import CorruptFileError
from alance.format.deletion import decode_deletion_file, deletion_file_kind, deletion_file_path
from alance.format.legacy.decode import read_dictionary_values
from alance.format.legacy.plan import fetch_from, run_plan
from alance.format.manifest import DATA_DIR
from alance.format.schema import LanceField, LanceSchema, retyped_fields
from alance.format.v2.blob import descriptor_schema
from alance.io.store import DatasetStore

TOMBSTONE_FIELD_ID = -2


class ReadContext:
    """Per-version read state shared by scans and takes of one dataset object."""

    def __init__(self, store: DatasetStore, snapshot: Snapshot, *,
                 user_view: bool = False) -> None:
        """``user_view``: read columns as users see them, as pylance returns them: blob
        columns as their descriptors, JSON columns as ``arrow.json`` text. Without it (paths
        that rewrite rows) JSON columns read as their JSONB bytes and blob columns are
        refused unless asked for as descriptor fields (see
        :mod:`alance.dataset.fragments.blob_rewrite`,
        which then fetches their bytes)."""
        self.store = store
        self.snapshot = snapshot
        self.schema = (text_view(descriptor_schema(snapshot.schema)) if user_view
                       else snapshot.schema)
        #: Stored JSON fields by id, when they are read as text.
        self._json_text = ({f.id: f for f in snapshot.schema.fields if is_json(f)}
                           if user_view else {})
        self._files: dict[tuple[int | None, str], DataFileReader] = {}
        self._base_stores: dict[int, DatasetStore] = {}
        self._file_schemas: dict[str, LanceSchema] = {}
        self._owner_of: dict[tuple[int, int], DataFileReader | None] = {}
        self._deletions: dict[int, np.ndarray | None] = {}
        self._dictionaries: dict[int, pa.Array] | None = None
        self._row_ends: np.ndarray | None = None
        self._fragment_of: dict[str, table_pb2.DataFragment] | None = None
        self._fragment_table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        #: Opened files are kept as long as the session's metadata cache holds them.
        self._session = session_of(store)
        self._session_keys: list[Any] = []
        weakref.finalize(self, self._session.forget, self._session_keys)

    def __getstate__(self) -> dict[str, Any]:
        # The session (its lock, its finalizer) stays in this process; an unpickled context
        # joins the session of its store there.
        state = dict(self.__dict__)
        del state["_session"], state["_session_keys"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._session = session_of(self.store)
        self._session_keys = []
        weakref.finalize(self, self._session.forget, self._session_keys)

    def fragment_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The version's fragment ids (ascending), each one's physical rows and whether it
        has a deletion file."""
        if self._fragment_table is None:
            frags = sorted(self.snapshot.fragments, key=lambda f: int(f.id))
            self._fragment_table = (
                np.array([int(f.id) for f in frags], dtype=np.int64),
                np.array([int(f.physical_rows) for f in frags], dtype=np.int64),
                np.array([f.HasField("deletion_file") for f in frags], dtype=bool))
        return self._fragment_table

    def live_row_ends(self) -> np.ndarray:
        """Live rows of the version up to and including each fragment (from the manifest)."""
        if self._row_ends is None:
            self._row_ends = np.cumsum([live_rows(f) for f in self.snapshot.fragments],
                                       dtype=np.int64)
        return self._row_ends

    @property
    def dictionaries(self) -> dict[int, pa.Array]:
        """Values of dictionary columns; v0.1/v0.2 datasets keep them in the manifest file."""
        if self._dictionaries is None:
            prelude = self.snapshot.manifest_file.prelude
            found: dict[int, pa.Array] = {}
            for f in self.schema.walk():
                dtype = f.data_type
                if pa.types.is_dictionary(dtype) and f.dictionary is not None:
                    offset, length = f.dictionary
                    plan = read_dictionary_values(dtype.value_type, offset, length)
                    found[f.id] = run_plan(plan, fetch_from(prelude))
            self._dictionaries = found
        return self._dictionaries

    async def data_file(self, data_file: table_pb2.DataFile, schema: LanceSchema,
                        fragment: table_pb2.DataFragment | None = None) -> DataFileReader:
        """The opened reader of a data file (its metadata read once per version).

        Every data file of a fragment holds exactly the fragment's ``physical_rows`` rows; a
        file that holds another number is a :class:`CorruptFileError` (``fragment``: the
        fragment the file belongs to; looked up in the version when not given).
        """
        reader = await self._open_data_file(data_file, schema)
        if fragment is None:
            fragment = self._fragment_of_file(data_file.path)
        if fragment is not None and reader.num_rows != fragment.physical_rows:
            raise CorruptFileError(
                f"{reader.path}: holds {reader.num_rows} rows, but fragment {fragment.id} has "
                f"{fragment.physical_rows} physical rows (each of its data files holds them "
                "all)")
        return reader

    def _fragment_of_file(self, path: str) -> table_pb2.DataFragment | None:
        if self._fragment_of is None:
            self._fragment_of = {f.path: frag for frag in self.snapshot.fragments
                                 for f in frag.files}
        return self._fragment_of.get(path)

    async def _open_data_file(self, data_file: table_pb2.DataFile, schema: LanceSchema,
                              ) -> DataFileReader:
        key = (data_file.base_id if data_file.HasField("base_id") else None, data_file.path)
        reader = self._files.get(key)
        if reader is not None:
            self._session.used((id(self), key))
        else:
            size = data_file.file_size_bytes or None
            store, path = self.data_location(data_file)
            version = (data_file.file_major_version, data_file.file_minor_version)
            if version >= (2, 0) or version == (0, 3):
                columns = dict(zip(data_file.fields, data_file.column_indices, strict=False))
                reader = await DataFileReader.open_v2(store, path, schema, size, columns)
                check_file_version(reader, (2, 0) if version == (0, 3) else version)
            else:
                # The page table spans the ids the file was written with, including ids the
                # schema no longer has (dropped or retyped columns); tombstones are skipped.
                ids = [i for i in data_file.fields if i != TOMBSTONE_FIELD_ID]
                reader = await DataFileReader.open(store, path, schema, size,
                                                   self.dictionaries, field_ids=ids)
            check_file_types(reader, schema)
            self._keep(key, reader)
        return reader

    def _keep(self, key: tuple[int | None, str], reader: DataFileReader) -> None:
        """Hold an opened file while the session's metadata cache has room for it."""
        entry = (id(self), key)
        context = weakref.ref(self)  # the session must not keep this context alive

        def evicted() -> None:
            held = context()
            if held is not None:
                held._files.pop(key, None)

        if self._session.keep(entry, reader.metadata_bytes, evicted):
            self._files[key] = reader
            self._session_keys.append(entry)

    def base_store(self, base_id: int, what: str) -> tuple[DatasetStore, bool]:
        """The store of base path ``base_id`` and whether it is laid out as a dataset root
        (see :mod:`alance.dataset.versions.bases`); opened once per version."""
        base = find_base(self.snapshot.manifest.base_paths, base_id, what)
        store = self._base_stores.get(base_id)
        if store is None:
            options = self.store.reopen_args[1] if self.store.reopen_args else None
            store = self._base_stores[base_id] = open_base_store(base, options)
        return store, base.is_dataset_root

    def data_location(self, data_file: table_pb2.DataFile) -> tuple[DatasetStore, str]:
        """The store and path of a data file (under the dataset, or a base path)."""
        if not data_file.HasField("base_id"):
            return self.store, f"{DATA_DIR}/{data_file.path}"
        store, rooted = self.base_store(int(data_file.base_id), f"data file {data_file.path}")
        return store, f"{DATA_DIR}/{data_file.path}" if rooted else data_file.path

    async def deleted_offsets(self, fragment: table_pb2.DataFragment) -> np.ndarray | None:
        """Sorted physical offsets of the fragment's deleted rows (``None``: no deletions)."""
        if not fragment.HasField("deletion_file"):
            return None
        if fragment.id in self._deletions:
            return self._deletions[fragment.id]
        df = fragment.deletion_file
        kind = deletion_file_kind(df.file_type, f"fragment {fragment.id}")
        path = deletion_file_path(fragment.id, df.read_version, df.id, kind)
        store = self.store
        if df.HasField("base_id"):
            store, rooted = self.base_store(int(df.base_id), f"fragment {fragment.id}'s "
                                            "deletion file")
            if not rooted:
                raise CorruptFileError(f"fragment {fragment.id}'s deletion file is under base "
                                       f"path {df.base_id}, which is not a dataset root")
        offsets = decode_deletion_file(kind, await store.get(path), path)
        if df.num_deleted_rows and len(offsets) != df.num_deleted_rows:
            raise CorruptFileError(
                f"{path}: holds {len(offsets)} deleted rows, manifest says {df.num_deleted_rows}")
        if len(offsets) and int(offsets[-1]) >= fragment.physical_rows:
            raise CorruptFileError(f"{path}: deletes row {int(offsets[-1])} of a fragment with "
                                   f"{fragment.physical_rows} rows")
        self._deletions[fragment.id] = offsets
        return offsets

    async def owner_of(self, fragment: table_pb2.DataFragment,
                       field: LanceField) -> DataFileReader | None:
        """The opened data file of ``fragment`` holding ``field`` (``None``: no file does;
        it reads as nulls). Remembered per fragment and field."""
        key = (int(fragment.id), field.id)
        if key in self._owner_of:
            return self._owner_of[key]
        reader = await self.fragment(fragment).open_owner(field)
        self._owner_of[key] = reader
        return reader

    def file_schema(self, data_file: table_pb2.DataFile) -> LanceSchema:
        """The version's schema cut to the fields ``data_file`` holds (computed once)."""
        schema = self._file_schemas.get(data_file.path)
        if schema is None:
            schema = self.snapshot.schema.with_ids(f for f in data_file.fields
                                                   if f != TOMBSTONE_FIELD_ID)
            self._file_schemas[data_file.path] = schema
        return schema

    def stored_field(self, field: LanceField) -> LanceField:
        """The field as the data files hold it (a JSON text field's JSONB field)."""
        return self._json_text.get(field.id, field)

    def reads_json_text(self, field: LanceField) -> bool:
        """Whether ``field`` is read as JSON text converted from stored JSONB."""
        return field.id in self._json_text

    def fragment(self, fragment: table_pb2.DataFragment) -> FragmentReader:
        """A reader for one fragment of this version."""
        return FragmentReader(self, fragment)


def check_file_version(reader: DataFileReader, listed: tuple[int, int]) -> None:
    """A 2.x file's footer must hold the version the manifest lists for it (pylance refuses
    the file otherwise): the manifest's column indices and field ids were written for it."""
    found = reader.file_version
    if found is not None and found != listed:
        raise CorruptFileError(f"{reader.path}: is a {found[0]}.{found[1]} file, but the "
                               f"manifest lists it as {listed[0]}.{listed[1]}")


def check_file_types(reader: DataFileReader, schema: LanceSchema) -> None:
    """Every field the manifest types must have that type in the data file's own schema
    (pylance refuses the file otherwise; reading the bytes as another type of the same width
    would silently return other values)."""
    stored = reader.stored_schema
    if stored is None:
        return
    retyped = retyped_fields(stored, schema)
    if retyped:
        field, found = retyped[0]
        raise CorruptFileError(f"{reader.path}: field {field.name!r} (id {field.id}) is "
                               f"{field.logical_type!r} in the manifest but "
                               f"{found.logical_type!r} in the data file")


def live_rows(fragment: table_pb2.DataFragment) -> int:
    """Rows of a fragment that are not deleted, from the manifest alone."""
    deleted = fragment.deletion_file.num_deleted_rows if fragment.HasField("deletion_file") else 0
    return int(fragment.physical_rows) - int(deleted)


class FragmentReader:
    """Reads projected columns of one fragment by physical row range or row offsets."""

    def __init__(self, ctx: ReadContext, fragment: table_pb2.DataFragment) -> None:
        self.ctx = ctx
        self.fragment = fragment
        self.id = int(fragment.id)
        self.physical_rows = int(fragment.physical_rows)

    def _owners(self, projection: Sequence[LanceField],
                ) -> list[tuple[table_pb2.DataFile, list[LanceField]]]:
        """Which data file holds which projected top-level field (fields of no file omitted)."""
        where: dict[int, int] = {}
        for i, f in enumerate(self.fragment.files):
            for fid in f.fields:
                if fid != TOMBSTONE_FIELD_ID:
                    where.setdefault(fid, i)
        groups: dict[int, list[LanceField]] = {}
        for field in projection:
            # 2.1+ files list only leaf fields: a nested field lives where its leaves do.
            idx = next((where[g.id] for g in field.walk() if g.id in where), None)
            if idx is not None:
                groups.setdefault(idx, []).append(field)
        return [(self.fragment.files[i], fields) for i, fields in sorted(groups.items())]

    async def open_owner(self, field: LanceField) -> DataFileReader | None:
        """The opened data file holding ``field`` (``None``: no file does; it reads as nulls)."""
        owners = self._owners([field])
        if not owners:
            return None
        data_file = owners[0][0]
        return await self.ctx.data_file(data_file, self._file_schema(data_file), self.fragment)

    def _file_schema(self, data_file: table_pb2.DataFile) -> LanceSchema:
        return self.ctx.file_schema(data_file)

    async def row_group_bounds(self) -> np.ndarray:
        """Row offsets where the first data file's row groups start (plus the end)."""
        if not self.fragment.files:
            return np.array([0, self.physical_rows], dtype=np.int64)
        first = self.fragment.files[0]
        reader = await self.ctx.data_file(first, self._file_schema(first), self.fragment)
        return reader.row_group_bounds

    async def _assemble(self, projection: Sequence[LanceField], num_rows: int,
                        parts: Sequence[tuple[list[LanceField], Awaitable[pa.RecordBatch],
                                              str]],
                        ) -> pa.RecordBatch:
        """One batch of the projected fields from the data files' batches (``parts``: the
        fields each file holds, its batch, its path). A file's column that holds nulls for a
        field the schema says is not nullable is a :class:`CorruptFileError` (as in pylance;
        ``null_count`` is known from the validity buffer)."""
        columns: dict[int, pa.Array] = {}
        batches = await asyncio.gather(*(aw for _, aw, _ in parts))
        for (fields, _, path), batch in zip(parts, batches, strict=True):
            if batch.num_rows != num_rows:
                raise CorruptFileError(
                    f"fragment {self.id}: a data file returned {batch.num_rows} rows, "
                    f"expected {num_rows}")
            for f, col in zip(fields, batch.columns, strict=True):
                if not f.nullable and col.null_count:
                    raise CorruptFileError(f"{path}: column {f.name!r} holds nulls, but the "
                                           "schema says it is not nullable")
                columns[f.id] = (await to_text_column(col) if self.ctx.reads_json_text(f)
                                 else col)
        if not projection:  # no columns, but still ``num_rows`` rows
            return pa.RecordBatch.from_arrays([pa.nulls(num_rows)], ["_"]).select([])
        arrays = [columns[f.id] if f.id in columns else pa.nulls(num_rows, f.data_type)
                  for f in projection]
        schema = pa.schema([f.to_arrow() for f in projection])
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    async def read_range(self, projection: Sequence[LanceField], start: int, end: int,
                         ) -> pa.RecordBatch:
        """Physical rows ``[start, end)`` of the projected fields (deleted rows included)."""
        parts = []
        for data_file, fields in self._owners(projection):
            reader = await self.ctx.data_file(data_file, self._file_schema(data_file),
                                              self.fragment)
            sub = LanceSchema([self.ctx.stored_field(f) for f in fields])
            parts.append((fields, reader.read_range(sub, start, end), reader.path))
        return await self._assemble(projection, end - start, parts)

    async def read_rows(self, projection: Sequence[LanceField], offsets: np.ndarray,
                        ) -> pa.RecordBatch:
        """The rows at sorted, unique physical ``offsets`` (reads only pages that hold them)."""
        parts = []
        for data_file, fields in self._owners(projection):
            reader = await self.ctx.data_file(data_file, self._file_schema(data_file),
                                              self.fragment)
            sub = LanceSchema([self.ctx.stored_field(f) for f in fields])
            parts.append((fields, reader.read_rows(sub, offsets), reader.path))
        return await self._assemble(projection, len(offsets), parts)

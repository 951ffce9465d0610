"""Building scalar indices and committing them (IO layer over the format modules).

The column is read with each row's address (or stable row id, see
:func:`alance.dataset.query.indices.reader.records_row_ids`), the index files are written under
``_indices/{uuid}/`` through the dataset's async store, and a CreateIndex transaction adds
the index (replacing one of the same name).
"""

from __future__ import annotations

import time
import uuid as _uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyroaring

from alance._proto import table_pb2
from alance.dataset.commit.loop import commit_transaction
from alance.dataset.maintenance.index_files import write_index_file
from alance.dataset.maintenance.inverted_build import build_params, write_inverted
from alance.dataset.maintenance.inverted_build import details as inverted_details
from alance.dataset.query.indices import bitmap, btree, zonemap
from alance.dataset.query.indices.describe import user_indices
from alance.dataset.query.indices.types import SCALAR_KINDS, index_dir, scalar_kind
from alance.dataset.query.row_ids import ROW_ID, uses_stable_row_ids
from alance.dataset.query.scan import ROW_ADDRESS, Scanner
from alance.errors import (
    AlreadyExistsError,
    IndexNotFoundError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from alance.transaction.indices import write_bitmap
from alance.transaction.operations import new_create_index

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset

#: ``index_version`` pylance records per kind (INVERTED: 0, the arrow token set alance writes).
_INDEX_VERSIONS = {"BTREE": 0, "BITMAP": 0, "LABEL_LIST": 1, "ZONEMAP": 0, "INVERTED": 0}


async def read_column(ds: LanceDataset, column: str,
                      fragments: Sequence[table_pb2.DataFragment] | None = None, *,
                      row_ids: bool = False) -> tuple[pa.Array, np.ndarray]:
    """The column's values of every live row and their row addresses (their row ids with
    ``row_ids``)."""
    scan = Scanner(ds._ctx, columns=[column], with_row_address=not row_ids, with_row_id=row_ids,
                   fragments=list(fragments) if fragments is not None else None)
    table = await scan.to_table()
    values = table.column(column).combine_chunks()
    ids = table.column(ROW_ID if row_ids else ROW_ADDRESS).to_numpy().astype(np.uint64)
    return values, ids


async def write_table(ds: LanceDataset, path: str, table: pa.Table) -> int:
    """Write one index file; returns its size in bytes."""
    return await write_index_file(ds._store, path, table)


def _check_column(ds: LanceDataset, column: str, kind: str) -> table_pb2.IndexMetadata:
    field = next((f for f in ds.lance_schema.fields if f.name == column), None)
    if field is None:
        raise InvalidInputError(f"column {column!r} is not in the dataset (columns: "
                                f"{ds.schema.names})")
    t = field.to_arrow().type
    if kind == "INVERTED":
        ok = pa.types.is_string(t) or pa.types.is_large_string(t)
    elif kind in ("BTREE", "BITMAP", "ZONEMAP"):
        ok = (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
              or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
              or pa.types.is_large_binary(t) or pa.types.is_temporal(t)
              or pa.types.is_decimal(t))
    else:  # LABEL_LIST: lists of values a bitmap can key
        item = t.value_type if pa.types.is_list(t) or pa.types.is_large_list(t) else None
        ok = item is not None and (pa.types.is_integer(item) or pa.types.is_string(item)
                                   or pa.types.is_large_string(item)
                                   or pa.types.is_boolean(item) or pa.types.is_floating(item)
                                   or pa.types.is_binary(item) or pa.types.is_temporal(item))
    if not ok:
        raise InvalidInputError(f"a {kind} index cannot be built on column {column!r} of type "
                                f"{t}")
    meta = table_pb2.IndexMetadata()
    meta.fields.append(int(field.id))
    return meta


async def build_files(ds: LanceDataset, kind: str, column: str, directory: str,
                      fragments: Sequence[table_pb2.DataFragment] | None = None,
                      options: Mapping[str, Any] | None = None) -> list[tuple[str, int]]:
    """Write the files of a ``kind`` index over ``column`` (the rows of ``fragments``,
    default all; ``options``: an INVERTED index's analyzer); ``(name, size)`` of each."""
    # As pylance writes them (see alance.dataset.query.indices.reader.records_row_ids): BTREE
    # pages hold row addresses; bitmaps, label lists and inverted indices hold stable row ids
    # when the dataset has them.
    values, ids = await read_column(ds, column, fragments, row_ids=kind in (
        "BITMAP", "LABEL_LIST", "INVERTED") and uses_stable_row_ids(ds.manifest))
    if kind == "INVERTED":
        return await write_inverted(ds, values, ids, directory, build_params(options or {}))
    if kind == "BTREE":
        data, lookup = btree.build_tables(values, ids)
        return [(btree.DATA_FILE, await write_table(ds, f"{directory}/{btree.DATA_FILE}", data)),
                (btree.LOOKUP_FILE,
                 await write_table(ds, f"{directory}/{btree.LOOKUP_FILE}", lookup))]
    if kind == "BITMAP":
        table = bitmap.build_table(values, ids)
        return [(bitmap.FILE, await write_table(ds, f"{directory}/{bitmap.FILE}", table))]
    if kind == "LABEL_LIST":
        table, nulls = bitmap.build_label_list(values, ids)
        path = f"{directory}/{bitmap.FILE}"
        return [(bitmap.FILE, await write_index_file(ds._store, path, table, buffers=[nulls]))]
    if kind == "ZONEMAP":
        table, nulls = zonemap.build_table(values, ids)
        path = f"{directory}/{zonemap.FILE}"
        return [(zonemap.FILE, await write_index_file(ds._store, path, table, buffers=[nulls]))]
    raise UnsupportedFeatureError(f"alance does not build {kind} indices yet")


async def scalar_segment(ds: LanceDataset, kind: str, column: str, name: str,
                         fragments: Sequence[table_pb2.DataFragment], covers: Iterable[int],
                         options: Mapping[str, Any] | None = None,
                         ) -> table_pb2.IndexMetadata:
    """Write a ``kind`` index segment over the rows of ``fragments`` and return its manifest
    entry (not committed), recording ``covers`` as the fragments it covers."""
    meta = _check_column(ds, column, kind)
    meta.uuid.uuid = _uuid.uuid4().bytes
    meta.name = name
    meta.dataset_version = ds.version
    files = await build_files(ds, kind, column, index_dir(meta), fragments, options)
    write_bitmap(meta, pyroaring.BitMap(covers))
    meta.index_details.type_url = SCALAR_KINDS[kind]
    meta.index_details.value = (zonemap.DETAILS if kind == "ZONEMAP" else
                                inverted_details(build_params(options or {}))
                                if kind == "INVERTED" else b"")
    meta.index_version = _INDEX_VERSIONS[kind]
    if kind == "BTREE" and uses_stable_row_ids(ds.manifest):
        meta.index_version = 1  # row addresses (see indices.reader.records_row_ids)
    meta.created_at = int(time.time() * 1000)
    for fname, size in files:
        meta.files.add(path=fname, size_bytes=size)
    return meta


async def create_scalar_index(ds: LanceDataset, column: str, index_type: str,
                              name: str | None = None, *, replace: bool = True,
                              **kwargs: Any) -> LanceDataset:
    """Build a scalar index on ``column`` and commit it; returns the new version."""
    kind = scalar_kind(index_type)
    _check_column(ds, column, kind)
    if kind == "INVERTED":
        build_params(kwargs)  # refuse unsupported analyzer settings before any work
    name = name or f"{column}_idx"
    existing = user_indices(ds._snapshot.manifest_file.indices).get(name, [])
    if existing and not replace:
        raise AlreadyExistsError(f"Index name '{name}' already exists")
    fragments = list(ds._snapshot.fragments)
    meta = await scalar_segment(ds, kind, column, name, fragments,
                                (int(f.id) for f in fragments),
                                kwargs if kind == "INVERTED" else None)
    txn = new_create_index(ds.version, [meta], existing)
    snap = await commit_transaction(ds._store, ds._handler, ds._snapshot, txn,
                                    data_storage_version=ds.data_storage_version)
    return type(ds)(ds._store, ds._handler, snap)


async def drop_index(ds: LanceDataset, name: str) -> LanceDataset:
    """Remove every segment of index ``name`` (files stay until cleanup, as in Lance)."""
    existing = user_indices(ds._snapshot.manifest_file.indices).get(name)
    if not existing:
        raise IndexNotFoundError(f"Index {name!r} not found")
    txn = new_create_index(ds.version, [], existing)
    snap = await commit_transaction(ds._store, ds._handler, ds._snapshot, txn,
                                    data_storage_version=ds.data_storage_version)
    return type(ds)(ds._store, ds._handler, snap)

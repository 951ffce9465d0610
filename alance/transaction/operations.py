"""Transaction messages: constructors for every operation alance commits, and questions about them.

A :class:`~alance._proto.transaction_pb2.Transaction` is the wire form of one change to a table
(it is written to ``_transactions/{read_version}-{uuid}.txn`` and inline in the manifest). The
helpers here build them the way Lance does, and answer what the conflict checker needs to know
(which fragments an operation touches, which config keys it sets...). Nothing here does IO.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from alance._proto import file_pb2, table_pb2, transaction_pb2
from alance.format.schema import LanceSchema

Transaction = transaction_pb2.Transaction

#: Operations alance knows how to apply and check (names of the ``operation`` oneof).
KNOWN_OPERATIONS = frozenset({
    "append", "delete", "overwrite", "create_index", "rewrite", "merge", "restore",
    "reserve_fragments", "update", "project", "update_config", "data_replacement",
    "update_mem_wal_state", "clone", "update_bases",
})

#: Index names Lance reserves for its own bookkeeping indices.
FRAG_REUSE_INDEX_NAME = "__lance_frag_reuse"
MEM_WAL_INDEX_NAME = "__lance_mem_wal"
SYSTEM_INDEX_NAMES = frozenset({FRAG_REUSE_INDEX_NAME, MEM_WAL_INDEX_NAME})


def _new(read_version: int, properties: Mapping[str, str] | None = None) -> Transaction:
    txn = Transaction(read_version=read_version, uuid=str(uuidlib.uuid4()))
    if properties:
        txn.transaction_properties.update(properties)
    return txn


def new_append(read_version: int, fragments: Iterable[table_pb2.DataFragment]) -> Transaction:
    """Append new fragments (ids left at 0 are assigned when the manifest is built)."""
    txn = _new(read_version)
    txn.append.fragments.extend(fragments)
    return txn


def new_overwrite(read_version: int, fragments: Iterable[table_pb2.DataFragment],
                  schema: LanceSchema,
                  config_upsert: Mapping[str, str] | None = None) -> Transaction:
    """Replace all fragments and the schema (also how a dataset is created)."""
    txn = _new(read_version)
    op = txn.overwrite
    op.fragments.extend(fragments)
    op.schema.extend(schema.to_protos())
    op.schema_metadata.update(schema.metadata)
    op.config_upsert_values.update(config_upsert or {})
    return txn


def new_delete(read_version: int, updated_fragments: Iterable[table_pb2.DataFragment],
               deleted_fragment_ids: Iterable[int], predicate: str) -> Transaction:
    """Soft-delete rows: fragments with new deletion files, and fragments now wholly deleted."""
    txn = _new(read_version)
    op = txn.delete
    op.updated_fragments.extend(updated_fragments)
    op.deleted_fragment_ids.extend(sorted(int(i) for i in deleted_fragment_ids))
    op.predicate = predicate
    return txn


def new_update(read_version: int, *, removed_fragment_ids: Iterable[int] = (),
               updated_fragments: Iterable[table_pb2.DataFragment] = (),
               new_fragments: Iterable[table_pb2.DataFragment] = (),
               fields_modified: Iterable[int] = (),
               fields_for_preserving_frag_bitmap: Iterable[int] = (),
               rewrite_columns: bool = False) -> Transaction:
    """Change rows. In rewrite-rows mode (the default) the old rows get deleted in
    ``updated_fragments``/``removed_fragment_ids`` and their new values are ``new_fragments``."""
    txn = _new(read_version)
    op = txn.update
    op.removed_fragment_ids.extend(sorted(int(i) for i in removed_fragment_ids))
    op.updated_fragments.extend(updated_fragments)
    op.new_fragments.extend(new_fragments)
    op.fields_modified.extend(fields_modified)
    op.fields_for_preserving_frag_bitmap.extend(fields_for_preserving_frag_bitmap)
    op.update_mode = (Transaction.REWRITE_COLUMNS if rewrite_columns
                      else Transaction.REWRITE_ROWS)
    return txn


def new_merge(read_version: int, fragments: Iterable[table_pb2.DataFragment],
              schema: LanceSchema) -> Transaction:
    """Add columns: every fragment of the table, with the files holding the new columns."""
    txn = _new(read_version)
    op = txn.merge
    op.fragments.extend(fragments)
    op.schema.extend(schema.to_protos())
    op.schema_metadata.update(schema.metadata)
    return txn


def new_project(read_version: int, schema: LanceSchema) -> Transaction:
    """Keep only the columns of ``schema`` (metadata only; data files stay)."""
    txn = _new(read_version)
    txn.project.schema.extend(schema.to_protos())
    return txn


def new_rewrite(read_version: int,
                groups: Iterable[tuple[Sequence[table_pb2.DataFragment],
                                       Sequence[table_pb2.DataFragment]]],
                rewritten_indices: Iterable[transaction_pb2.Transaction.Rewrite.RewrittenIndex]
                = ()) -> Transaction:
    """Replace groups of fragments by new fragments holding the same rows (compaction)."""
    txn = _new(read_version)
    op = txn.rewrite
    for old, new in groups:
        group = op.groups.add()
        group.old_fragments.extend(old)
        group.new_fragments.extend(new)
    op.rewritten_indices.extend(rewritten_indices)
    return txn


def new_restore(read_version: int, version: int) -> Transaction:
    """Make ``version`` the content of the next version."""
    txn = _new(read_version)
    txn.restore.version = version
    return txn


def new_reserve_fragments(read_version: int, num_fragments: int) -> Transaction:
    """Claim ``num_fragments`` fragment ids (raises ``max_fragment_id``) for a later rewrite."""
    txn = _new(read_version)
    txn.reserve_fragments.num_fragments = num_fragments
    return txn


def new_update_bases(read_version: int,
                     bases: Iterable[table_pb2.BasePath]) -> Transaction:
    """Register more base paths (ids 0 are assigned when the manifest is built)."""
    txn = _new(read_version)
    txn.update_bases.SetInParent()
    txn.update_bases.new_bases.extend(bases)
    return txn


MapChanges = Mapping[str, str | None]


def _fill_map(target: transaction_pb2.Transaction.UpdateMap, changes: MapChanges,
              replace: bool) -> None:
    target.replace = replace
    for key, value in changes.items():
        entry = target.update_entries.add(key=key)
        if value is not None:
            entry.value = value


def new_update_config(read_version: int, *, config: MapChanges | None = None,
                      table_metadata: MapChanges | None = None,
                      schema_metadata: MapChanges | None = None,
                      field_metadata: Mapping[int, MapChanges] | None = None,
                      replace: bool = False) -> Transaction:
    """Set (value) or remove (``None``) keys of the config / table / schema / field metadata.

    ``replace`` makes every given map replace the existing one instead of being merged in.
    """
    txn = _new(read_version)
    op = txn.update_config
    op.SetInParent()
    if config is not None:
        _fill_map(op.config_updates, config, replace)
    if table_metadata is not None:
        _fill_map(op.table_metadata_updates, table_metadata, replace)
    if schema_metadata is not None:
        _fill_map(op.schema_metadata_updates, schema_metadata, replace)
    for field_id, changes in (field_metadata or {}).items():
        _fill_map(op.field_metadata_updates[field_id], changes, replace)
    return txn


def new_create_index(read_version: int, new_indices: Iterable[table_pb2.IndexMetadata],
                     removed_indices: Iterable[table_pb2.IndexMetadata] = ()) -> Transaction:
    """Add (or replace, by name) and remove (by uuid) index metadata."""
    txn = _new(read_version)
    op = txn.create_index
    op.SetInParent()
    op.new_indices.extend(new_indices)
    op.removed_indices.extend(removed_indices)
    return txn


def new_data_replacement(read_version: int,
                         replacements: Iterable[tuple[int, table_pb2.DataFile]]) -> Transaction:
    """Swap the data file holding some columns of existing fragments for a new one."""
    txn = _new(read_version)
    op = txn.data_replacement
    op.SetInParent()
    for fragment_id, data_file in replacements:
        op.replacements.add(fragment_id=fragment_id, new_file=data_file)
    return txn


# -- questions about transactions ---------------------------------------------------------------


def operation_name(txn: Transaction) -> str:
    """The operation's oneof name (``"append"``, ``"delete"``...), ``"unknown"`` if unset."""
    return txn.WhichOneof("operation") or "unknown"


def rewrite_groups(op: transaction_pb2.Transaction.Rewrite,
                   ) -> list[tuple[list[table_pb2.DataFragment], list[table_pb2.DataFragment]]]:
    """A Rewrite's (old fragments, new fragments) groups; older writers used one flat pair."""
    groups = [(list(g.old_fragments), list(g.new_fragments)) for g in op.groups]
    if not groups and (op.old_fragments or op.new_fragments):
        groups = [(list(op.old_fragments), list(op.new_fragments))]
    return groups


def modified_fragment_ids(txn: Transaction) -> set[int]:
    """Ids of existing fragments the operation changes or removes (new fragments excluded)."""
    name = operation_name(txn)
    if name == "delete":
        return ({f.id for f in txn.delete.updated_fragments}
                | set(txn.delete.deleted_fragment_ids))
    if name == "update":
        return ({f.id for f in txn.update.updated_fragments}
                | set(txn.update.removed_fragment_ids))
    if name == "rewrite":
        return {f.id for old, _ in rewrite_groups(txn.rewrite) for f in old}
    if name == "data_replacement":
        return {r.fragment_id for r in txn.data_replacement.replacements}
    if name == "merge":
        return {f.id for f in txn.merge.fragments}
    return set()


def added_fragments(txn: Transaction) -> list[table_pb2.DataFragment]:
    """Fragments holding rows that did not exist before the operation (appended or inserted)."""
    name = operation_name(txn)
    if name == "append":
        return list(txn.append.fragments)
    if name == "update":
        return list(txn.update.new_fragments)
    if name == "overwrite":
        return list(txn.overwrite.fragments)
    return []


@dataclass(frozen=True)
class MapUpdate:
    """One ``UpdateMap``: entries (key, value or ``None`` to remove) and whether to replace."""

    entries: tuple[tuple[str, str | None], ...]
    replace: bool

    @classmethod
    def from_proto(cls, msg: transaction_pb2.Transaction.UpdateMap) -> MapUpdate:
        """Read an ``UpdateMap`` message."""
        return cls(tuple((e.key, e.value if e.HasField("value") else None)
                         for e in msg.update_entries), msg.replace)

    def apply(self, target: dict[str, str]) -> dict[str, str]:
        """``target`` with the changes applied (a new dict)."""
        out = {} if self.replace else dict(target)
        for key, value in self.entries:
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out


@dataclass(frozen=True)
class ConfigChanges:
    """An UpdateConfig in its current form (older writers' fields translated)."""

    config: MapUpdate | None
    table_metadata: MapUpdate | None
    schema_metadata: MapUpdate | None
    field_metadata: dict[int, MapUpdate]


def config_changes(op: transaction_pb2.Transaction.UpdateConfig) -> ConfigChanges:
    """Normalise an UpdateConfig: older writers used upsert/delete lists and full replacements."""
    if op.HasField("config_updates") or op.HasField("table_metadata_updates") or (
            op.HasField("schema_metadata_updates") or op.field_metadata_updates):
        return ConfigChanges(
            MapUpdate.from_proto(op.config_updates) if op.HasField("config_updates") else None,
            MapUpdate.from_proto(op.table_metadata_updates)
            if op.HasField("table_metadata_updates") else None,
            MapUpdate.from_proto(op.schema_metadata_updates)
            if op.HasField("schema_metadata_updates") else None,
            {fid: MapUpdate.from_proto(m) for fid, m in op.field_metadata_updates.items()})
    config = None
    if op.upsert_values or op.delete_keys:
        entries: list[tuple[str, str | None]] = list(op.upsert_values.items())
        entries += [(k, None) for k in op.delete_keys]
        config = MapUpdate(tuple(entries), replace=False)
    schema_meta = (MapUpdate(tuple(op.schema_metadata.items()), replace=True)
                   if op.schema_metadata else None)
    fields = {fid: MapUpdate(tuple(u.metadata.items()), replace=True)
              for fid, u in op.field_metadata.items()}
    return ConfigChanges(config, None, schema_meta, fields)


def config_keys(txn: Transaction) -> tuple[set[str], set[str]]:
    """Config keys the operation sets and the ones it removes."""
    name = operation_name(txn)
    if name == "overwrite":
        return set(txn.overwrite.config_upsert_values), set()
    if name == "update_config":
        changes = config_changes(txn.update_config).config
        if changes is None:
            return set(), set()
        return ({k for k, v in changes.entries if v is not None},
                {k for k, v in changes.entries if v is None})
    return set(), set()


def upsert_key_conflict(a: Transaction, b: Transaction) -> bool:
    """True when one operation sets a config key the other sets or removes."""
    a_set, a_del = config_keys(a)
    b_set, b_del = config_keys(b)
    return bool(a_set & (b_set | b_del)) or bool(b_set & (a_set | a_del))


def same_metadata_modified(a: Transaction, b: Transaction) -> bool:
    """True when two UpdateConfigs both change schema metadata or one field's metadata."""
    if operation_name(a) != "update_config" or operation_name(b) != "update_config":
        return False
    ca, cb = config_changes(a.update_config), config_changes(b.update_config)
    if ca.schema_metadata is not None and cb.schema_metadata is not None:
        return True
    return bool(set(ca.field_metadata) & set(cb.field_metadata))


def schema_protos(txn: Transaction) -> list[file_pb2.Field] | None:
    """The schema an Overwrite, Merge or Project installs (``None`` for other operations)."""
    name = operation_name(txn)
    if name == "overwrite":
        return list(txn.overwrite.schema)
    if name == "merge":
        return list(txn.merge.schema)
    if name == "project":
        return list(txn.project.schema)
    return None

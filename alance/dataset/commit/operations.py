"""pylance's ``LanceOperation`` and ``Transaction``: changes described by hand, committed with
:func:`alance.dataset.manual_commit.commit`.

Each operation is a plain dataclass (picklable, so workers can build them) that turns into the
wire ``Transaction`` message through the constructors of :mod:`alance.transaction.operations`:
the same messages, conflict checks and commit path as every other alance commit. No IO here.
"""

from __future__ import annotations

import uuid as uuidlib
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from alance._proto import table_pb2, transaction_pb2
from alance.dataset.fragments.metadata import DataFile, FragmentMetadata
from alance.dataset.versions.bases import registered
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.format.schema import LanceSchema
from alance.transaction import operations as ops

__all__ = ["LANCE_COMMIT_MESSAGE_KEY", "LanceOperation", "Transaction", "from_wire", "to_wire"]


def _protos(fragments: Iterable[Any]) -> list[table_pb2.DataFragment]:
    out = []
    for frag in fragments:
        meta = getattr(frag, "metadata", frag)  # a LanceFragment stands for its metadata
        if isinstance(meta, table_pb2.DataFragment):
            out.append(meta)
        elif isinstance(meta, FragmentMetadata):
            out.append(meta.to_proto())
        else:
            raise InvalidInputError(f"expected FragmentMetadata, got {type(frag).__name__}")
    return out


def _metadata_list(fragments: Iterable[Any]) -> list[FragmentMetadata]:
    """``fragments`` as a list, each a :class:`FragmentMetadata` (else ``TypeError``)."""
    out = list(fragments)
    for f in out:
        if not isinstance(f, FragmentMetadata):
            raise TypeError(f"fragments must be FragmentMetadata, got {type(f).__name__}")
    return out


def _unwrapped(schema: Any) -> Any:
    """alance's LanceSchema behind pylance-style schema views (``alance.sync.LanceSchema``)."""
    inner = getattr(schema, "lance_schema", None)
    return inner if isinstance(inner, LanceSchema) else schema


def _schema(schema: Any, base: LanceSchema | None, max_field_id: int) -> LanceSchema:
    """``schema`` as a Lance schema: existing columns keep their field ids (by name), new ones
    get ids after ``max_field_id``."""
    schema = _unwrapped(schema)
    if isinstance(schema, LanceSchema):
        return schema
    if not isinstance(schema, pa.Schema):
        raise InvalidInputError(f"expected a pyarrow.Schema, got {type(schema).__name__}")
    if base is None:
        return LanceSchema.from_arrow(schema)
    known = [n for n in schema.names if n in base.names]
    new = pa.schema([f for f in schema if f.name not in base.names])
    fields = {f.name: f for f in base.project(known).fields}
    fields.update({f.name: f for f in LanceSchema.from_arrow(new, first_id=max_field_id + 1)
                   .fields})
    metadata = {k: v for k, v in (schema.metadata or {}).items()}
    return LanceSchema([fields[n] for n in schema.names], metadata)


class LanceOperation:
    """Namespace of the operations :func:`commit` accepts (pylance's names and fields)."""

    class BaseOperation:
        """Base class of every operation."""

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            raise UnsupportedFeatureError(f"{type(self).__name__} cannot be committed by alance")

    @dataclass
    class Overwrite(BaseOperation):
        """Replace every fragment and the schema (also creates a dataset)."""

        new_schema: Any
        fragments: Iterable[FragmentMetadata]
        initial_bases: list[Any] | None = None

        def __post_init__(self) -> None:
            self.fragments = _metadata_list(self.fragments)
            self.new_schema = _unwrapped(self.new_schema)
            if not isinstance(self.new_schema, pa.Schema | LanceSchema):
                raise TypeError("new_schema must be a pyarrow.Schema, got "
                                f"{type(self.new_schema).__name__}")

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            schema = (self.new_schema if isinstance(self.new_schema, LanceSchema)
                      else LanceSchema.from_arrow(self.new_schema))
            txn = ops.new_overwrite(read_version, _protos(self.fragments), schema)
            txn.overwrite.initial_bases.extend(registered(self.initial_bases or ()))
            return txn

    @dataclass
    class Append(BaseOperation):
        """Add new fragments (ids 0 are assigned at commit)."""

        fragments: Iterable[FragmentMetadata]

        def __post_init__(self) -> None:
            self.fragments = _metadata_list(self.fragments)

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            return ops.new_append(read_version, _protos(self.fragments))

    @dataclass
    class Delete(BaseOperation):
        """Fragments with new deletion files, and fragments deleted whole."""

        updated_fragments: Iterable[FragmentMetadata]
        deleted_fragment_ids: Iterable[int]
        predicate: str

        def __post_init__(self) -> None:
            self.updated_fragments = list(self.updated_fragments)
            self.deleted_fragment_ids = list(self.deleted_fragment_ids)

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            return ops.new_delete(read_version, _protos(self.updated_fragments),
                                  self.deleted_fragment_ids, self.predicate)

    @dataclass
    class Update(BaseOperation):
        """Rows rewritten: old rows deleted in place, new values in new fragments."""

        removed_fragment_ids: list[int] = field(default_factory=list)
        updated_fragments: list[FragmentMetadata] = field(default_factory=list)
        new_fragments: list[FragmentMetadata] = field(default_factory=list)
        fields_modified: list[int] = field(default_factory=list)
        fields_for_preserving_frag_bitmap: list[int] = field(default_factory=list)
        update_mode: str = ""
        updated_fragment_offsets: dict[int, bytes] | None = None

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            return ops.new_update(
                read_version, removed_fragment_ids=self.removed_fragment_ids,
                updated_fragments=_protos(self.updated_fragments),
                new_fragments=_protos(self.new_fragments),
                fields_modified=self.fields_modified,
                fields_for_preserving_frag_bitmap=self.fields_for_preserving_frag_bitmap,
                rewrite_columns=self.update_mode == "rewrite_columns")

    @dataclass
    class Merge(BaseOperation):
        """New fragment list and schema after adding columns to every fragment."""

        fragments: Iterable[FragmentMetadata]
        schema: Any
        preserves_nullability: bool = False

        def __post_init__(self) -> None:
            self.fragments = list(self.fragments)
            if isinstance(self.schema, pa.Schema):
                warnings.warn("LanceOperation.Merge with a pyarrow.Schema is deprecated: pass "
                              "the LanceSchema that fragment merges return",
                              DeprecationWarning, stacklevel=3)

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            return ops.new_merge(read_version, _protos(self.fragments),
                                 _schema(self.schema, base, max_field_id))

    @dataclass
    class Restore(BaseOperation):
        """Make an old version the newest."""

        version: int

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            return ops.new_restore(read_version, int(self.version))

    @dataclass
    class RewriteGroup:
        """Fragments replaced by new fragments holding the same rows."""

        old_fragments: Iterable[FragmentMetadata]
        new_fragments: Iterable[FragmentMetadata]

    @dataclass
    class RewrittenIndex:
        """An index rebuilt for rewritten fragments."""

        old_id: str
        new_id: str
        new_details_type_url: str = ""
        new_details_value: bytes = b""
        new_index_version: int = 0

    @dataclass
    class Rewrite(BaseOperation):
        """Compaction: groups of fragments rewritten."""

        groups: Iterable[LanceOperation.RewriteGroup]
        rewritten_indices: Iterable[LanceOperation.RewrittenIndex] = ()

        def __post_init__(self) -> None:
            self.groups = list(self.groups)
            self.rewritten_indices = list(self.rewritten_indices)

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            groups = [(_protos(g.old_fragments), _protos(g.new_fragments))
                      for g in self.groups]
            return ops.new_rewrite(read_version, groups,
                                   [_rewritten_proto(r) for r in self.rewritten_indices])

    @dataclass
    class CreateIndex(BaseOperation):
        """Add and remove index metadata (``IndexMetadata`` messages)."""

        new_indices: list[Any]
        removed_indices: list[Any]

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            bad = [i for i in [*self.new_indices, *self.removed_indices]
                   if not isinstance(i, table_pb2.IndexMetadata)]
            if bad:
                raise UnsupportedFeatureError("CreateIndex takes alance IndexMetadata messages")
            return ops.new_create_index(read_version, self.new_indices, self.removed_indices)

    @dataclass
    class DataReplacementGroup:
        """The new data file for some columns of one fragment."""

        fragment_id: int
        new_file: DataFile

    @dataclass
    class DataReplacement(BaseOperation):
        """Swap data files of existing fragments for new ones holding the same columns."""

        replacements: list[LanceOperation.DataReplacementGroup]

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            return ops.new_data_replacement(
                read_version, [(g.fragment_id, g.new_file.to_proto()) for g in self.replacements])

    @dataclass
    class Project(BaseOperation):
        """A new schema keeping (some of) the existing columns: drop, rename, reorder."""

        schema: Any
        preserves_nullability: bool = False

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            return ops.new_project(read_version, _schema(self.schema, base, max_field_id))

    @dataclass
    class UpdateMap:
        """Keys to set (or remove, with ``None``); ``replace`` replaces the whole map."""

        updates: dict[str, str | None]
        replace: bool = False

    @dataclass
    class UpdateConfig(BaseOperation):
        """Change the config, table metadata, schema metadata or field metadata."""

        config_updates: LanceOperation.UpdateMap | None = None
        table_metadata_updates: LanceOperation.UpdateMap | None = None
        schema_metadata_updates: LanceOperation.UpdateMap | None = None
        field_metadata_updates: dict[int, LanceOperation.UpdateMap] | None = None

        def _to_txn(self, read_version: int, base: LanceSchema | None,
                    max_field_id: int) -> transaction_pb2.Transaction:
            txn = ops.new_update_config(read_version)
            op = txn.update_config
            for name in ("config_updates", "table_metadata_updates", "schema_metadata_updates"):
                value = getattr(self, name)
                if value is not None:
                    _fill(getattr(op, name), value)
            for field_id, value in (self.field_metadata_updates or {}).items():
                _fill(op.field_metadata_updates[int(field_id)], value)
            return txn


def _fill(target: transaction_pb2.Transaction.UpdateMap, update: LanceOperation.UpdateMap,
          ) -> None:
    target.replace = update.replace
    for key, value in update.updates.items():
        entry = target.update_entries.add(key=key)
        if value is not None:
            entry.value = value


@dataclass
class Transaction:
    """An operation and the version it was built against (pylance's ``Transaction``)."""

    read_version: int
    operation: LanceOperation.BaseOperation
    uuid: str = field(default_factory=lambda: str(uuidlib.uuid4()))
    transaction_properties: dict[str, str] | None = field(default_factory=dict)


def to_wire(operation: LanceOperation.BaseOperation, read_version: int,
            base: LanceSchema | None, max_field_id: int, *, uuid: str | None = None,
            properties: Mapping[str, str] | None = None) -> transaction_pb2.Transaction:
    """The wire transaction for ``operation`` built on ``read_version`` (whose schema is
    ``base`` and highest field id ``max_field_id``)."""
    if not isinstance(operation, LanceOperation.BaseOperation):
        raise TypeError(f"operation must be a LanceOperation, got {type(operation).__name__}")
    txn = operation._to_txn(read_version, base, max_field_id)
    if uuid:
        txn.uuid = uuid
    if properties:
        txn.transaction_properties.update(properties)
    return txn


#: The transaction property holding a commit message (pylance's name and key).
LANCE_COMMIT_MESSAGE_KEY = "__lance_commit_message"


def _metas(fragments: Iterable[table_pb2.DataFragment]) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_proto(f) for f in fragments]


def _update_map(msg: transaction_pb2.Transaction.UpdateMap) -> LanceOperation.UpdateMap:
    return LanceOperation.UpdateMap(
        {e.key: (e.value if e.HasField("value") else None) for e in msg.update_entries},
        msg.replace)


def _operation_of(txn: transaction_pb2.Transaction, schema_of: Any,
                  ) -> LanceOperation.BaseOperation:
    """The operation of a wire transaction as a :class:`LanceOperation` value
    (``schema_of``: list of field protos -> LanceSchema)."""
    kind = ops.operation_name(txn)
    if kind == "append":
        return LanceOperation.Append(_metas(txn.append.fragments))
    if kind == "overwrite":
        return LanceOperation.Overwrite(schema_of(txn.overwrite.schema),
                                        _metas(txn.overwrite.fragments))
    if kind == "delete":
        return LanceOperation.Delete(_metas(txn.delete.updated_fragments),
                                     list(txn.delete.deleted_fragment_ids), txn.delete.predicate)
    if kind == "update":
        u = txn.update
        return LanceOperation.Update(list(u.removed_fragment_ids), _metas(u.updated_fragments),
                                     _metas(u.new_fragments), list(u.fields_modified),
                                     list(u.fields_for_preserving_frag_bitmap))
    if kind == "merge":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return LanceOperation.Merge(_metas(txn.merge.fragments),
                                        schema_of(txn.merge.schema))
    if kind == "restore":
        return LanceOperation.Restore(txn.restore.version)
    if kind == "project":
        return LanceOperation.Project(schema_of(txn.project.schema))
    if kind == "rewrite":
        return LanceOperation.Rewrite([LanceOperation.RewriteGroup(
            _metas(g.old_fragments), _metas(g.new_fragments)) for g in txn.rewrite.groups],
            [LanceOperation.RewrittenIndex(
                str(uuidlib.UUID(bytes=bytes(r.old_id.uuid))),
                str(uuidlib.UUID(bytes=bytes(r.new_id.uuid))),
                r.new_index_details.type_url, bytes(r.new_index_details.value),
                int(r.new_index_version)) for r in txn.rewrite.rewritten_indices])
    if kind == "data_replacement":
        return LanceOperation.DataReplacement([LanceOperation.DataReplacementGroup(
            r.fragment_id, DataFile.from_proto(r.new_file))
            for r in txn.data_replacement.replacements])
    if kind == "create_index":
        return LanceOperation.CreateIndex(list(txn.create_index.new_indices),
                                          list(txn.create_index.removed_indices))
    if kind == "update_config":
        c = txn.update_config
        return LanceOperation.UpdateConfig(
            _update_map(c.config_updates) if c.HasField("config_updates") else None,
            _update_map(c.table_metadata_updates)
            if c.HasField("table_metadata_updates") else None,
            _update_map(c.schema_metadata_updates)
            if c.HasField("schema_metadata_updates") else None,
            {int(k): _update_map(v) for k, v in c.field_metadata_updates.items()} or None)
    return LanceOperation.BaseOperation()


def from_wire(txn: transaction_pb2.Transaction) -> Transaction:
    """A wire transaction as a :class:`Transaction` value (as pylance's ``read_transaction``)."""
    def schema_of(fields: Any) -> LanceSchema:
        return LanceSchema.from_protos(fields)
    return Transaction(txn.read_version, _operation_of(txn, schema_of), txn.uuid,
                       dict(txn.transaction_properties))


def _rewritten_proto(index: LanceOperation.RewrittenIndex,
                     ) -> transaction_pb2.Transaction.Rewrite.RewrittenIndex:
    """A rewritten index as the transaction stores it (uuids given as text)."""
    out = transaction_pb2.Transaction.Rewrite.RewrittenIndex()
    try:
        out.old_id.uuid = uuidlib.UUID(str(index.old_id)).bytes
        out.new_id.uuid = uuidlib.UUID(str(index.new_id)).bytes
    except ValueError as exc:
        raise InvalidInputError(f"RewrittenIndex: not a uuid: {exc}") from exc
    if index.new_details_type_url:
        out.new_index_details.type_url = index.new_details_type_url
        out.new_index_details.value = index.new_details_value
    out.new_index_version = int(index.new_index_version)
    return out

"""Transactions: what a commit changes, and how that change turns a manifest into the next one.

A transaction records the operation (Append, Overwrite, ...) and the version it was read from.
:func:`build_manifest` applies it to the latest manifest to produce the next version, so a
transaction that lost a commit race can be re-applied ("rebased") on top of the winner's
version. :func:`check_compatible` decides whether that is allowed.
"""

from __future__ import annotations

import time
import uuid as uuidlib

from alance import __version__
from alance._proto import table_pb2, transaction_pb2
from alance.errors import CommitConflictError, InvalidInputError, UnsupportedFeatureError
from alance.format.feature_flags import apply_feature_flags, check_writer_flags
from alance.format.manifest import ManifestFile, make_writer_version
from alance.format.schema import LanceSchema


def new_append(read_version: int, fragments: list[table_pb2.DataFragment],
               ) -> transaction_pb2.Transaction:
    """An Append of new fragments (their ids are assigned when the manifest is built)."""
    txn = transaction_pb2.Transaction(read_version=read_version, uuid=str(uuidlib.uuid4()))
    txn.append.fragments.extend(fragments)
    return txn


def new_overwrite(read_version: int, fragments: list[table_pb2.DataFragment],
                  schema: LanceSchema,
                  config_upsert: dict[str, str] | None = None) -> transaction_pb2.Transaction:
    """An Overwrite replacing all fragments (and the schema)."""
    txn = transaction_pb2.Transaction(read_version=read_version, uuid=str(uuidlib.uuid4()))
    op = txn.overwrite
    op.fragments.extend(fragments)
    op.schema.extend(schema.to_protos())
    op.schema_metadata.update(schema.metadata)
    op.config_upsert_values.update(config_upsert or {})
    return txn


def operation_name(txn: transaction_pb2.Transaction) -> str:
    """The name of the transaction's operation (``"append"``, ``"overwrite"``...)."""
    return txn.WhichOneof("operation") or "unknown"


def check_compatible(txn: transaction_pb2.Transaction,
                     committed: transaction_pb2.Transaction | None) -> None:
    """Raise :class:`CommitConflictError` unless ``txn`` can be rebased over ``committed``.

    ``committed`` is the transaction of a version committed after ``txn.read_version``; ``None``
    means its transaction is missing or unreadable, which counts as a conflict (be conservative).
    """
    mine = operation_name(txn)
    if mine == "overwrite":
        return  # an overwrite replaces everything; it does not depend on what it read
    if committed is None:
        raise CommitConflictError("a concurrent commit has no readable transaction")
    theirs = operation_name(committed)
    if mine == "append":
        if theirs in ("append", "delete", "update", "rewrite", "create_index",
                      "reserve_fragments", "data_replacement", "update_config"):
            return
        raise CommitConflictError(f"append conflicts with a concurrent {theirs}")
    raise CommitConflictError(f"{mine} cannot be rebased over a concurrent {theirs}")


def _now_timestamp(manifest: table_pb2.Manifest) -> None:
    ns = time.time_ns()
    manifest.timestamp.seconds, manifest.timestamp.nanos = divmod(ns, 1_000_000_000)


def build_manifest(base: ManifestFile | None, txn: transaction_pb2.Transaction, *,
                   transaction_file: str, data_storage_version: str = "0.1",
                   prelude: bytes | None = None) -> ManifestFile:
    """The manifest file of the version that applying ``txn`` to ``base`` produces.

    ``base`` is the latest committed version (``None`` when creating a dataset). Everything of
    ``base`` alance does not interpret (config, index metadata, unknown fields) is carried over.
    ``prelude`` holds the dictionary values an Overwrite's schema points to (v0.1/v0.2 files);
    an Append keeps the base's.
    """
    op = operation_name(txn)
    if base is not None:
        check_writer_flags(base.manifest.writer_feature_flags)
    manifest = table_pb2.Manifest()
    index_section = None
    if base is not None:
        manifest.CopyFrom(base.manifest)
        index_section = base.index_section
        manifest.version = base.manifest.version + 1
    else:
        manifest.version = 1
        manifest.data_format.file_format = "lance"
        manifest.data_format.version = data_storage_version
    for name in ("tag", "version_aux_data"):
        manifest.ClearField(name)

    if op == "append":
        if base is None:
            raise InvalidInputError("cannot append to a dataset that does not exist")
        if base.manifest.HasField("max_fragment_id"):
            next_id = base.manifest.max_fragment_id + 1
        else:
            next_id = max((f.id + 1 for f in base.manifest.fragments), default=0)
        for frag in txn.append.fragments:
            new = manifest.fragments.add()
            new.CopyFrom(frag)
            new.id = next_id
            next_id += 1
    elif op == "overwrite":
        ow = txn.overwrite
        del manifest.fields[:]
        manifest.fields.extend(ow.schema)
        manifest.schema_metadata.clear()
        for k, v in ow.schema_metadata.items():
            manifest.schema_metadata[k] = v
        del manifest.fragments[:]
        for i, frag in enumerate(ow.fragments):
            new = manifest.fragments.add()
            new.CopyFrom(frag)
            new.id = i
        manifest.config.update(ow.config_upsert_values)
        index_section = None  # indices describe fragments that no longer exist
    else:
        raise UnsupportedFeatureError(f"alance cannot yet commit a {op} operation")

    ids = [f.id for f in manifest.fragments]
    if ids:
        top = max(ids)
        if not manifest.HasField("max_fragment_id") or manifest.max_fragment_id < top:
            manifest.max_fragment_id = top
    apply_feature_flags(manifest)
    manifest.transaction_file = transaction_file
    manifest.writer_version.CopyFrom(make_writer_version(__version__))
    _now_timestamp(manifest)
    if op == "append":
        prelude = base.prelude if base is not None else b""
    return ManifestFile(manifest=manifest, index_section=index_section, transaction=txn,
                        prelude=prelude or b"")

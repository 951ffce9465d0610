"""Deciding whether a transaction can be rebased over ones committed concurrently (no IO).

When a commit loses the race for version ``N``, every transaction committed between its read
version and the newest version is checked against it, following Lance's conflict matrix:

* **compatible** — nothing to do; the transaction is simply built again on the newest version
  (e.g. Append vs Append, Delete vs Append, Delete vs Delete of other fragments);
* **rebasable** — compatible once the deletion vectors of fragments both deleted rows from are
  merged (Delete/Update vs Delete/Update of *different rows* of one fragment). The checker
  records which fragments need that; :mod:`alance.dataset.commit.rebase` does the IO;
* **retryable** — :class:`~alance.errors.RetryableCommitConflictError`: the operation must be
  planned again on the new version (e.g. an Update whose fragment a concurrent Rewrite
  replaced, or two deletes of the same row);
* **incompatible** — :class:`~alance.errors.IncompatibleTransactionError` (e.g. anything vs a
  concurrent Restore or Overwrite).

Conservative on the unknown: a concurrent version whose transaction is missing or unreadable,
or whose operation alance does not know, is incompatible.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from alance._proto import table_pb2, transaction_pb2
from alance.errors import IncompatibleTransactionError, RetryableCommitConflictError
from alance.transaction.indices import read_bitmap
from alance.transaction.operations import (
    FRAG_REUSE_INDEX_NAME,
    KNOWN_OPERATIONS,
    modified_fragment_ids,
    operation_name,
    rewrite_groups,
    same_metadata_modified,
    upsert_key_conflict,
)

Transaction = transaction_pb2.Transaction


class Outcome(Enum):
    """What one concurrent transaction means for ours."""

    COMPATIBLE = "compatible"
    RETRYABLE = "retryable"
    INCOMPATIBLE = "incompatible"


#: Operations each operation is always compatible with / always incompatible with; pairs in
#: neither set are decided by the per-operation rules below.
_ALWAYS_OK: dict[str, frozenset[str]] = {
    "append": frozenset(KNOWN_OPERATIONS - {"overwrite", "restore", "update_mem_wal_state"}),
    "delete": frozenset({"create_index", "reserve_fragments", "clone", "project", "append",
                         "update_config", "update_bases"}),
    "update": frozenset({"create_index", "reserve_fragments", "clone", "project", "append",
                         "update_config", "update_bases", "update_mem_wal_state"}),
    "create_index": frozenset({"append", "clone", "update_bases", "delete", "update", "merge",
                               "reserve_fragments", "project", "update_config"}),
    "rewrite": frozenset({"append", "reserve_fragments", "project", "clone", "update_config",
                          "update_mem_wal_state", "update_bases"}),
    "overwrite": frozenset(KNOWN_OPERATIONS - {"overwrite", "update_config",
                                               "update_mem_wal_state"}),
    "data_replacement": frozenset({"append", "clone", "delete", "update", "merge",
                                   "update_config", "reserve_fragments", "project",
                                   "update_bases"}),
    "merge": frozenset({"create_index", "reserve_fragments", "clone", "update_config",
                        "update_bases"}),
    "restore": frozenset(KNOWN_OPERATIONS - {"update_mem_wal_state"}),
    "reserve_fragments": frozenset(KNOWN_OPERATIONS - {"overwrite", "restore"}),
    "project": frozenset(KNOWN_OPERATIONS - {"merge", "project", "overwrite", "restore",
                                             "update_mem_wal_state"}),
    "update_config": frozenset(KNOWN_OPERATIONS - {"overwrite", "update_config"}),
    # New bases are (re)numbered and checked for clashes when the manifest is built.
    "update_bases": frozenset(KNOWN_OPERATIONS - {"overwrite", "restore"}),
}
_INCOMPATIBLE: dict[str, frozenset[str]] = {
    "update_bases": frozenset({"overwrite", "restore"}),
    "append": frozenset({"overwrite", "restore", "update_mem_wal_state"}),
    "delete": frozenset({"overwrite", "restore", "update_mem_wal_state"}),
    "update": frozenset({"overwrite", "restore"}),
    "create_index": frozenset({"overwrite", "restore", "update_mem_wal_state"}),
    "rewrite": frozenset({"overwrite", "restore"}),
    "overwrite": frozenset({"update_mem_wal_state"}),
    "data_replacement": frozenset({"overwrite", "restore", "update_mem_wal_state"}),
    "merge": frozenset({"overwrite", "restore", "project", "update_mem_wal_state"}),
    "restore": frozenset({"update_mem_wal_state"}),
    "reserve_fragments": frozenset({"overwrite", "restore"}),
    "project": frozenset({"overwrite", "restore", "update_mem_wal_state"}),
    "update_config": frozenset(),
}


def _old_ids(txn: Transaction) -> set[int]:
    return {f.id for old, _ in rewrite_groups(txn.rewrite) for f in old}


def _indexed_fragments(indices: Iterable[table_pb2.IndexMetadata]) -> set[int] | None:
    ids: set[int] = set()
    for index in indices:
        bitmap = read_bitmap(index)
        if bitmap is None:
            return None
        ids.update(bitmap)
    return ids


@dataclass
class RebaseState:
    """Our transaction, what it read, and what rebasing it needs so far."""

    txn: Transaction
    #: Fragments our transaction modifies, as they were at its read version.
    initial: dict[int, table_pb2.DataFragment]
    #: Whether the commit knows the exact rows our Delete/Update removed (needed to merge).
    has_affected_rows: bool
    #: Fragments whose deletion vector a concurrent commit changed: to merge with ours.
    needs_merge: set[int] = field(default_factory=set)

    @classmethod
    def start(cls, txn: Transaction, read_fragments: Iterable[table_pb2.DataFragment],
              has_affected_rows: bool) -> RebaseState:
        """State for ``txn`` given the fragments of the version it was read from."""
        modified = modified_fragment_ids(txn)
        name = operation_name(txn)
        if name in ("delete", "update"):
            op = txn.delete if name == "delete" else txn.update
            if not op.updated_fragments:
                # Only whole fragments removed: any overlap means planning again.
                has_affected_rows = False
        initial = {f.id: f for f in read_fragments if f.id in modified} if modified else {}
        return cls(txn, initial, has_affected_rows)

    @property
    def name(self) -> str:
        """Our operation's name."""
        return operation_name(self.txn)

    def check(self, other: Transaction | None, version: int) -> None:
        """Account for ``other``, committed as ``version``; raise if we cannot be rebased."""
        outcome, why = self.classify(other)
        theirs = operation_name(other) if other is not None else "unreadable transaction"
        if outcome is Outcome.COMPATIBLE:
            return
        text = (f"this {self.name} was preempted by a concurrent {theirs} committed as "
                f"version {version}")
        if why:
            text += f" ({why})"
        if outcome is Outcome.RETRYABLE:
            raise RetryableCommitConflictError(text + "; plan it again on the new version")
        raise IncompatibleTransactionError(text)

    def classify(self, other: Transaction | None) -> tuple[Outcome, str]:
        """The outcome of ``other`` for our transaction, and why (may record merges)."""
        if other is None:
            return Outcome.INCOMPATIBLE, "its transaction is missing or unreadable"
        mine, theirs = self.name, operation_name(other)
        if theirs not in KNOWN_OPERATIONS:
            return Outcome.INCOMPATIBLE, f"unknown operation {theirs!r}"
        if mine not in _ALWAYS_OK:
            return Outcome.INCOMPATIBLE, f"alance cannot rebase a {mine}"
        if theirs in _ALWAYS_OK[mine]:
            return Outcome.COMPATIBLE, ""
        if theirs in _INCOMPATIBLE[mine]:
            return Outcome.INCOMPATIBLE, ""
        rule = getattr(self, f"_{mine}")
        outcome: tuple[Outcome, str] = rule(other, theirs)
        return outcome

    # -- per-operation rules for the pairs that depend on content ---------------------------

    def _touches(self, ids: Iterable[int]) -> bool:
        mine = modified_fragment_ids(self.txn)
        return any(i in mine for i in ids)

    def _delete(self, other: Transaction, theirs: str) -> tuple[Outcome, str]:
        if theirs == "merge":
            return Outcome.RETRYABLE, "columns were added"
        if theirs in ("rewrite", "data_replacement"):
            if self._touches(modified_fragment_ids(other)):
                return Outcome.RETRYABLE, "it rewrote a fragment we change"
            return Outcome.COMPATIBLE, ""
        # a concurrent delete or update
        op = other.delete if theirs == "delete" else other.update
        removed = other.delete.deleted_fragment_ids if theirs == "delete" else (
            other.update.removed_fragment_ids)
        if not self._touches(modified_fragment_ids(other)):
            return Outcome.COMPATIBLE, ""
        if not self.has_affected_rows:
            return Outcome.RETRYABLE, "both changed the same fragments"
        for frag in op.updated_fragments:
            before = self.initial.get(frag.id)
            if before is None:
                continue
            if list(before.files) != list(frag.files):
                return Outcome.RETRYABLE, f"it rewrote data files of fragment {frag.id}"
            if before.deletion_file != frag.deletion_file:
                self.needs_merge.add(frag.id)
        for fid in removed:
            if fid in self.initial:
                return Outcome.RETRYABLE, f"it removed fragment {fid}"
        return Outcome.COMPATIBLE, ""

    _update = _delete

    def _create_index(self, other: Transaction, theirs: str) -> tuple[Outcome, str]:
        new = list(self.txn.create_index.new_indices)
        if theirs == "create_index":
            both = (any(i.name == FRAG_REUSE_INDEX_NAME for i in new)
                    and any(i.name == FRAG_REUSE_INDEX_NAME
                            for i in other.create_index.new_indices))
            return (Outcome.RETRYABLE, "both changed the fragment reuse index") if both else (
                Outcome.COMPATIBLE, "")
        if theirs == "rewrite":
            covered = _indexed_fragments(new)
            if covered is None:
                return Outcome.RETRYABLE, "a new index has no fragment bitmap"
            if covered & _old_ids(other):
                return Outcome.RETRYABLE, "it moved rows the new index covers"
            return Outcome.COMPATIBLE, ""
        # data_replacement
        indexed = {f for i in new for f in i.fields}
        replaced = {f for r in other.data_replacement.replacements for f in r.new_file.fields}
        if indexed & replaced:
            return Outcome.RETRYABLE, "it replaced an indexed column"
        return Outcome.COMPATIBLE, ""

    def _rewrite(self, other: Transaction, theirs: str) -> tuple[Outcome, str]:
        if theirs == "merge":
            return Outcome.RETRYABLE, "columns were added"
        if theirs in ("delete", "update", "rewrite", "data_replacement"):
            if self._touches(modified_fragment_ids(other)):
                return Outcome.RETRYABLE, "it changed a fragment we rewrite"
            return Outcome.COMPATIBLE, ""
        # create_index
        new = list(other.create_index.new_indices)
        remapped = {r.old_id.uuid for r in self.txn.rewrite.rewritten_indices}
        if remapped & {i.uuid.uuid for i in other.create_index.removed_indices}:
            return Outcome.RETRYABLE, "it replaced an index we remapped"
        if any(i.name == FRAG_REUSE_INDEX_NAME for i in new):
            if len(new) != 1 or len(other.create_index.removed_indices) != 1:
                return Outcome.INCOMPATIBLE, "unexpected fragment reuse index change"
            return Outcome.COMPATIBLE, ""
        covered = _indexed_fragments(new)
        if covered is None:
            return Outcome.RETRYABLE, "a new index has no fragment bitmap"
        if covered & _old_ids(self.txn):
            return Outcome.RETRYABLE, "it indexed fragments we rewrite"
        return Outcome.COMPATIBLE, ""

    def _overwrite(self, other: Transaction, theirs: str) -> tuple[Outcome, str]:
        if upsert_key_conflict(self.txn, other):
            return Outcome.INCOMPATIBLE, "both set the same config keys"
        return Outcome.COMPATIBLE, ""

    def _data_replacement(self, other: Transaction, theirs: str) -> tuple[Outcome, str]:
        mine = list(self.txn.data_replacement.replacements)
        if theirs == "create_index":
            indexed = {f for i in other.create_index.new_indices for f in i.fields}
            if any(indexed & set(r.new_file.fields) for r in mine):
                return Outcome.RETRYABLE, "it indexed a column we replace"
            return Outcome.COMPATIBLE, ""
        if theirs == "rewrite":
            if {r.fragment_id for r in mine} & _old_ids(other):
                return Outcome.RETRYABLE, "it rewrote a fragment we replace data of"
            return Outcome.COMPATIBLE, ""
        for r in mine:
            for o in other.data_replacement.replacements:
                if r.fragment_id == o.fragment_id and set(r.new_file.fields) & set(
                        o.new_file.fields):
                    return Outcome.RETRYABLE, "both replaced the same column of a fragment"
        return Outcome.COMPATIBLE, ""

    def _merge(self, other: Transaction, theirs: str) -> tuple[Outcome, str]:
        return Outcome.RETRYABLE, "fragments changed under the new columns"

    def _project(self, other: Transaction, theirs: str) -> tuple[Outcome, str]:
        return Outcome.RETRYABLE, "the schema changed"

    def _update_config(self, other: Transaction, theirs: str) -> tuple[Outcome, str]:
        if theirs == "overwrite":
            changes = self.txn.update_config
            touches_schema = (changes.HasField("schema_metadata_updates")
                              or bool(changes.field_metadata_updates)
                              or bool(changes.schema_metadata) or bool(changes.field_metadata))
            if touches_schema or upsert_key_conflict(self.txn, other):
                return Outcome.INCOMPATIBLE, "it replaced the metadata we change"
            return Outcome.COMPATIBLE, ""
        if upsert_key_conflict(self.txn, other) or same_metadata_modified(self.txn, other):
            return Outcome.INCOMPATIBLE, "both changed the same keys"
        return Outcome.COMPATIBLE, ""

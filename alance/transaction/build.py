"""Applying a transaction to the latest manifest: the manifest of the next version.

:func:`build_manifest` is pure: given the newest committed manifest file and a transaction it
returns the next manifest file. Because it starts from whatever version is newest, a
transaction that lost a commit race is committed again by simply building it anew on the
winner's version (after :mod:`alance.transaction.conflicts` said that is allowed).

Rules followed (as Lance applies them):

* new fragments get ids from ``max_fragment_id + 1`` on (an Overwrite restarts at 0); a
  fragment that already carries a non-zero id keeps it (ids reserved earlier);
* fragments stay sorted by id; data files left holding only dropped fields (-2) are removed;
* ``max_fragment_id`` is a high-water mark: it never goes down, even when fragments go;
* feature flags are recomputed from the content (deletion files -> the deletion flag);
* index metadata is carried and adjusted (see :mod:`alance.transaction.indices`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from alance._proto import table_pb2, transaction_pb2
from alance._version import __version__
from alance.errors import InvalidInputError, RetryableCommitConflictError, UnsupportedFeatureError
from alance.format.feature_flags import FeatureFlag, apply_feature_flags, check_writer_flags
from alance.format.fragment_facts import FragmentFacts, all_facts, fragment_facts
from alance.format.manifest import ManifestFile, make_writer_version
from alance.transaction import indices as ix
from alance.transaction.lineage import assign_new_rows
from alance.transaction.operations import (
    config_changes,
    operation_name,
    rewrite_groups,
    schema_protos,
)

Fragment = table_pb2.DataFragment
TOMBSTONE = -2


def next_fragment_id(manifest: table_pb2.Manifest) -> int:
    """The first fragment id not used yet (one past the high-water mark)."""
    if manifest.HasField("max_fragment_id"):
        return int(manifest.max_fragment_id) + 1
    return max((int(f.id) + 1 for f in manifest.fragments), default=0)


class _Ids:
    """Hands out fragment ids to new fragments that do not have one yet."""

    def __init__(self, first: int) -> None:
        self.next = first

    def assign(self, fragments: Iterable[Fragment]) -> list[Fragment]:
        out = []
        for frag in fragments:
            new = Fragment()
            new.CopyFrom(frag)
            if new.id == 0:
                new.id = self.next
                self.next += 1
            out.append(new)
        return out


def _copies(fragments: Iterable[Fragment]) -> list[Fragment]:
    out = []
    for frag in fragments:
        new = Fragment()
        new.CopyFrom(frag)
        out.append(new)
    return out


def _replace(fragments: list[Fragment], removed: Iterable[int],
             updated: Iterable[Fragment]) -> list[Fragment]:
    gone = set(removed)
    by_id = {f.id: f for f in _copies(updated)}
    return [by_id.get(f.id, f) for f in fragments if f.id not in gone]


def _rewrite(fragments: list[Fragment], txn: transaction_pb2.Transaction, ids: _Ids,
             version: int) -> tuple[list[Fragment], list[tuple[list[Fragment], list[Fragment]]]]:
    """Fragments after the rewrite, and its groups with the new fragments' final ids."""
    done = []
    for old, new in rewrite_groups(txn.rewrite):
        if not old:
            continue
        wanted = [f.id for f in old]
        positions = {f.id: i for i, f in enumerate(fragments)}
        if any(fid not in positions for fid in wanted):
            raise RetryableCommitConflictError(
                f"version {version} no longer has a fragment the rewrite replaces")
        start = positions[wanted[0]]
        added = ids.assign(new)
        done.append((old, added))
        if [f.id for f in fragments[start:start + len(wanted)]] == wanted:
            fragments[start:start + len(wanted)] = added
        else:
            gone = set(wanted)
            fragments = [f for f in fragments if f.id not in gone] + added
    return fragments, done


def _replace_data(fragments: list[Fragment], txn: transaction_pb2.Transaction) -> list[Fragment]:
    groups = list(txn.data_replacement.replacements)
    if len({tuple(g.new_file.fields) for g in groups}) > 1:
        raise InvalidInputError("all replacement data files must hold the same fields")
    by_id = {f.id: f for f in fragments}
    for group in groups:
        frag = by_id.get(group.fragment_id)
        if frag is None:
            raise InvalidInputError(f"data replacement: no fragment {group.fragment_id}")
        new_file = group.new_file
        before = frag.SerializeToString(deterministic=True)
        covered: set[int] = set()
        for f in frag.files:
            if (list(f.fields) == list(new_file.fields)
                    and f.file_major_version == new_file.file_major_version
                    and f.file_minor_version == new_file.file_minor_version):
                f.path = new_file.path
                f.file_size_bytes = new_file.file_size_bytes
            covered.update(f.fields)
        if covered.isdisjoint(new_file.fields):
            frag.files.add().CopyFrom(new_file)
        if frag.SerializeToString(deterministic=True) == before:
            raise InvalidInputError(
                f"data replacement: the new file matches no data file of fragment {frag.id}")
    return fragments


def _apply_config(manifest: table_pb2.Manifest, txn: transaction_pb2.Transaction) -> None:
    changes = config_changes(txn.update_config)
    if changes.config is not None:
        _set_map(manifest.config, changes.config.apply(dict(manifest.config)))
    if changes.table_metadata is not None:
        _set_map(manifest.table_metadata,
                 changes.table_metadata.apply(dict(manifest.table_metadata)))
    if changes.schema_metadata is not None:
        current = {k: v.decode("utf-8", "surrogateescape")
                   for k, v in manifest.schema_metadata.items()}
        new = changes.schema_metadata.apply(current)
        _set_map(manifest.schema_metadata,
                 {k: v.encode("utf-8", "surrogateescape") for k, v in new.items()})
    fields = {f.id: f for f in manifest.fields}
    for field_id, update in changes.field_metadata.items():
        field = fields.get(field_id)
        if field is None:
            raise InvalidInputError(f"update_config: no field with id {field_id}")
        current = {k: v.decode("utf-8", "surrogateescape") for k, v in field.metadata.items()}
        new = update.apply(current)
        _set_map(field.metadata, {k: v.encode("utf-8", "surrogateescape")
                                  for k, v in new.items()})


def _set_map(target: object, values: Mapping[str, object]) -> None:
    target.clear()  # type: ignore[attr-defined]
    target.update(values)  # type: ignore[attr-defined]


def _finish(manifest: table_pb2.Manifest, txn: transaction_pb2.Transaction,
            transaction_file: str) -> None:
    manifest.transaction_file = transaction_file
    ns = time.time_ns()
    manifest.timestamp.seconds, manifest.timestamp.nanos = divmod(ns, 1_000_000_000)
    if txn.tag:
        manifest.tag = txn.tag


def _restored(base: ManifestFile, txn: transaction_pb2.Transaction, transaction_file: str,
              source: ManifestFile | None) -> ManifestFile:
    if source is None or source.manifest.version != txn.restore.version:
        raise InvalidInputError(f"restore: the manifest of version {txn.restore.version} "
                                "must be supplied")
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(source.manifest)
    for name in ("tag", "version_aux_data"):
        manifest.ClearField(name)  # type: ignore[arg-type]
    manifest.version = base.manifest.version + 1
    # stable row ids are never handed out twice, whatever version is restored
    manifest.next_row_id = max(manifest.next_row_id, base.manifest.next_row_id)
    _finish(manifest, txn, transaction_file)
    return ManifestFile(manifest=manifest, index_section=source.index_section, transaction=txn,
                        prelude=source.prelude)


@dataclass
class _Step:
    """What one operation changes while the next manifest is built."""

    txn: transaction_pb2.Transaction
    manifest: table_pb2.Manifest
    fragments: list[Fragment]
    indices: list[table_pb2.IndexMetadata]
    field_ids: set[int]
    ids: _Ids
    #: The data storage version an Overwrite of an existing dataset switches to.
    new_data_version: str | None
    new_rows: list[Fragment] = field(default_factory=list)


def _nothing(step: _Step) -> None:
    """Operations that leave the rows (or the manifest's settings) alone."""


def _append_rows(step: _Step) -> None:
    step.new_rows = step.ids.assign(step.txn.append.fragments)
    step.fragments += step.new_rows


def _delete_rows(step: _Step) -> None:
    d = step.txn.delete
    step.fragments = _replace(step.fragments, d.deleted_fragment_ids, d.updated_fragments)
    step.indices = ix.retain_relevant_indices(step.indices, step.field_ids,
                                               [f.id for f in step.fragments])


def _update_rows(step: _Step) -> None:
    upd = step.txn.update
    step.fragments = _replace(step.fragments, upd.removed_fragment_ids, upd.updated_fragments)
    ix.prune_modified_fields(step.indices, [f.id for f in upd.updated_fragments],
                             upd.fields_modified)
    step.new_rows = step.ids.assign(upd.new_fragments)
    step.fragments += step.new_rows
    step.indices = ix.retain_relevant_indices(step.indices, step.field_ids,
                                               [f.id for f in step.fragments])


def _overwrite_rows(step: _Step) -> None:
    step.fragments = step.new_rows = step.ids.assign(step.txn.overwrite.fragments)
    step.indices = []
    if step.new_data_version is not None:
        step.manifest.data_format.version = step.new_data_version


def _rewrite_rows(step: _Step) -> None:
    step.fragments, groups = _rewrite(step.fragments, step.txn, step.ids,
                                      step.manifest.version - 1)
    ix.apply_rewrite(step.indices, list(step.txn.rewrite.rewritten_indices), groups,
                     stable_row_ids=bool(step.manifest.reader_feature_flags
                                         & FeatureFlag.STABLE_ROW_IDS))


def _create_index_rows(step: _Step) -> None:
    # As pylance 14: existing indices are removed by uuid only, so a new segment of an index
    # (a delta) joins the segments of that name.
    ci = step.txn.create_index
    removed = {i.uuid.uuid for i in ci.removed_indices} | {i.uuid.uuid for i in ci.new_indices}
    step.indices = [i for i in step.indices if i.uuid.uuid not in removed]
    step.indices += [_copy_index(i) for i in ci.new_indices]


def _merge_rows(step: _Step) -> None:
    step.fragments = _copies(step.txn.merge.fragments)
    step.indices = ix.retain_relevant_indices(step.indices, step.field_ids,
                                               [f.id for f in step.fragments])


def _project_rows(step: _Step) -> None:
    for frag in step.fragments:
        keep = [f for f in frag.files if any(fid in step.field_ids for fid in f.fields)]
        del frag.files[:]
        frag.files.extend(keep)
    step.indices = ix.retain_relevant_indices(step.indices, step.field_ids,
                                               [f.id for f in step.fragments])


def _data_replacement_rows(step: _Step) -> None:
    step.fragments = _replace_data(step.fragments, step.txn)


def _overwrite_settings(step: _Step) -> None:
    manifest = step.manifest
    manifest.config.update(step.txn.overwrite.config_upsert_values)
    taken = {int(b.id) for b in manifest.base_paths}
    for new_base in step.txn.overwrite.initial_bases:
        if int(new_base.id) in taken:
            raise InvalidInputError(f"base path id {new_base.id} is already registered")
        manifest.base_paths.append(new_base)


def _update_config_settings(step: _Step) -> None:
    _apply_config(step.manifest, step.txn)


def _update_bases_settings(step: _Step) -> None:
    _add_bases(step.manifest, step.txn.update_bases.new_bases)


def _reserve_fragments_settings(step: _Step) -> None:
    manifest = step.manifest
    current = manifest.max_fragment_id if manifest.HasField("max_fragment_id") else 0
    manifest.max_fragment_id = current + step.txn.reserve_fragments.num_fragments


#: What each operation does to the rows (fragments, indices) and then to the manifest's other
#: settings (config, base paths, reserved ids). Restore is built apart (:func:`_restored`).
_APPLY: dict[str, tuple[Callable[[_Step], None], Callable[[_Step], None]]] = {
    "append": (_append_rows, _nothing),
    "delete": (_delete_rows, _nothing),
    "update": (_update_rows, _nothing),
    "overwrite": (_overwrite_rows, _overwrite_settings),
    "rewrite": (_rewrite_rows, _nothing),
    "create_index": (_create_index_rows, _nothing),
    "merge": (_merge_rows, _nothing),
    "project": (_project_rows, _nothing),
    "data_replacement": (_data_replacement_rows, _nothing),
    "update_config": (_nothing, _update_config_settings),
    "update_bases": (_nothing, _update_bases_settings),
    "reserve_fragments": (_nothing, _reserve_fragments_settings),
}

#: Operations :func:`build_manifest` applies.
BUILDABLE = frozenset(_APPLY) | {"restore"}



def build_manifest(base: ManifestFile | None, txn: transaction_pb2.Transaction, *,
                   transaction_file: str, data_storage_version: str = "0.1",
                   prelude: bytes | None = None,
                   restore_source: ManifestFile | None = None,
                   stable_row_ids: bool = False) -> ManifestFile:
    """The manifest file of the version that applying ``txn`` to ``base`` produces.

    ``base`` is the newest committed version (``None`` only when an Overwrite creates the
    dataset). ``prelude`` holds the dictionary values an Overwrite's schema points to (v0.1/v0.2
    files); other operations keep the base's. A Restore needs the manifest file of the version
    it restores as ``restore_source``. Everything of ``base`` alance does not interpret is
    carried over unchanged. ``stable_row_ids`` only matters when the dataset is created
    (``base`` is ``None``); afterwards the base's feature flag decides. With stable row ids,
    the rows of appended, overwriting and updating fragments get row ids and versions (see
    :func:`~alance.transaction.lineage.assign_new_rows`) and ``next_row_id`` advances.

    Operations that keep the base's fragments in place (appends, deletes, updates, index
    and config changes) change the copied manifest's fragment list only where they touch it,
    and take what they need of the other fragments from the base's
    :class:`~alance.format.fragment_facts.FragmentFacts`: their cost does not grow with the
    number of fragments the dataset has (beyond copying the manifest in C).
    """
    op = operation_name(txn)
    if op not in BUILDABLE:
        raise UnsupportedFeatureError(f"alance cannot commit a {op} operation")
    if base is not None:
        check_writer_flags(base.manifest.writer_feature_flags)
    elif op != "overwrite":
        raise InvalidInputError(f"cannot commit a {op} to a dataset that does not exist")
    if op == "restore":
        assert base is not None
        return _restored(base, txn, transaction_file, restore_source)

    manifest = table_pb2.Manifest()
    base_facts: tuple[FragmentFacts, ...] = ()
    if base is not None:
        manifest.CopyFrom(base.manifest)
        manifest.version = base.manifest.version + 1
        for name in ("tag", "version_aux_data"):
            manifest.ClearField(name)  # type: ignore[arg-type]
        base_facts = base.fragment_facts()
        indices = [_copy_index(i) for i in base.indices]
    else:
        manifest.version = 1
        manifest.data_format.file_format = "lance"
        manifest.data_format.version = data_storage_version
        indices = []
    new_schema = schema_protos(txn)
    if new_schema is not None:
        del manifest.fields[:]
        manifest.fields.extend(new_schema)
    if op in ("overwrite", "merge"):
        metadata = txn.overwrite.schema_metadata if op == "overwrite" else txn.merge.schema_metadata
        _set_map(manifest.schema_metadata, dict(metadata))
    if op == "overwrite":
        first_id = 0
    elif manifest.HasField("max_fragment_id"):
        first_id = int(manifest.max_fragment_id) + 1
    else:
        first_id = max((f.id + 1 for f in base_facts), default=0)
    step = _Step(txn, manifest, [], indices, {int(f.id) for f in manifest.fields},
                 _Ids(first_id), data_storage_version if base is not None else None)
    stable = (bool(base.manifest.reader_feature_flags & FeatureFlag.STABLE_ROW_IDS)
              if base is not None else stable_row_ids)
    facts = None
    if op in _IN_PLACE:
        facts = _build_in_place(step, base_facts, stable)
    if facts is None:  # rebuilt fragment by fragment
        if base is not None:
            step.fragments = _copies(base.manifest.fragments)
        step.indices, step.new_rows = indices, []
        step.ids = _Ids(first_id)
        facts = _build_generic(step, stable)
    settings = _APPLY[op][1]
    settings(step)
    apply_feature_flags(manifest, stable_row_ids=stable, facts=facts)
    manifest.writer_version.CopyFrom(make_writer_version(__version__))
    _finish(manifest, txn, transaction_file)
    if op != "overwrite":
        prelude = base.prelude if base is not None else b""
    section = table_pb2.IndexSection(indices=step.indices) if step.indices else None
    return ManifestFile(manifest=manifest, index_section=section, transaction=txn,
                        prelude=prelude or b"", facts=facts)


def _build_generic(step: _Step, stable: bool) -> tuple[FragmentFacts, ...]:
    """Apply the operation to a list of copied fragments and install them in the manifest."""
    manifest = step.manifest
    rows = _APPLY[operation_name(step.txn)][0]
    rows(step)
    if stable:
        manifest.next_row_id = assign_new_rows(step.new_rows, int(manifest.next_row_id),
                                               int(manifest.version))
    fragments = step.fragments
    fragments.sort(key=lambda f: f.id)
    for frag in fragments:
        _drop_tombstoned_files(frag)
    del manifest.fragments[:]
    manifest.fragments.extend(fragments)
    if fragments:
        top = max(f.id for f in fragments)
        if not manifest.HasField("max_fragment_id") or manifest.max_fragment_id < top:
            manifest.max_fragment_id = top
    return all_facts(manifest.fragments)


def _drop_tombstoned_files(frag: Fragment) -> bool:
    """Remove the data files that hold only dropped fields; whether there were any."""
    if not any(all(fid == TOMBSTONE for fid in f.fields) for f in frag.files):
        return False
    keep = [f for f in frag.files if any(fid != TOMBSTONE for fid in f.fields)]
    del frag.files[:]
    frag.files.extend(keep)
    return True


#: Operations that keep the base's fragments where they are, replace or remove some by id
#: and add new ones (with the highest ids): :func:`_build_in_place` builds them.
_IN_PLACE = frozenset({"append", "delete", "update", "create_index", "update_config",
                       "update_bases", "reserve_fragments"})


def _build_in_place(step: _Step, base_facts: Sequence[FragmentFacts], stable: bool,
                    ) -> tuple[FragmentFacts, ...] | None:
    """Apply an :data:`_IN_PLACE` operation to the fragments the manifest copied from the
    base; ``None`` (nothing changed) if the result would need sorting (new fragments that
    bring lower ids than the base's), which the generic build does."""
    txn, manifest = step.txn, step.manifest
    op = operation_name(txn)
    removed: set[int] = set()
    updated: list[Fragment] = []
    if op == "append":
        step.new_rows = step.ids.assign(txn.append.fragments)
    elif op == "delete":
        removed = set(txn.delete.deleted_fragment_ids)
        updated = _copies(txn.delete.updated_fragments)
    elif op == "update":
        removed = set(txn.update.removed_fragment_ids)
        updated = _copies(txn.update.updated_fragments)
        step.new_rows = step.ids.assign(txn.update.new_fragments)
    ids = [f.id for f in base_facts]
    kept = [fid for fid in ids if fid not in removed] if removed else ids
    final = kept + [int(f.id) for f in step.new_rows]
    if any(a >= b for a, b in itertools.pairwise(final)):
        return None
    if op == "update":
        ix.prune_modified_fields(step.indices, [f.id for f in txn.update.updated_fragments],
                                 txn.update.fields_modified)
    elif op == "create_index":
        _create_index_rows(step)
    if op in ("delete", "update"):
        step.indices = ix.retain_relevant_indices(step.indices, step.field_ids, final)
    if stable:
        manifest.next_row_id = assign_new_rows(step.new_rows, int(manifest.next_row_id),
                                               int(manifest.version))
    facts = list(base_facts)
    fragments = manifest.fragments
    if updated or removed:
        position = {fid: i for i, fid in enumerate(ids)}
        for frag in updated:
            i = position.get(frag.id)
            if i is not None and frag.id not in removed:
                fragments[i].CopyFrom(frag)
                facts[i] = fragment_facts(frag)
        for i in sorted((position[fid] for fid in removed if fid in position), reverse=True):
            del fragments[i]
            del facts[i]
    for frag in step.new_rows:
        fragments.add().CopyFrom(frag)
        facts.append(fragment_facts(frag))
    for i, f in enumerate(facts):
        if f.tombstoned and _drop_tombstoned_files(fragments[i]):
            facts[i] = fragment_facts(fragments[i])
    if final:
        top = final[-1]
        if not manifest.HasField("max_fragment_id") or manifest.max_fragment_id < top:
            manifest.max_fragment_id = top
    return tuple(facts)


def _add_bases(manifest: table_pb2.Manifest, bases: Iterable[table_pb2.BasePath]) -> None:
    """Register ``bases`` (an id of 0: the next free one); a name or path already
    registered is an :class:`InvalidInputError`."""
    taken = {int(b.id) for b in manifest.base_paths}
    names = {b.name for b in manifest.base_paths if b.HasField("name")}
    paths = {b.path for b in manifest.base_paths}
    for base in bases:
        if base.HasField("name") and base.name in names:
            raise InvalidInputError(f"a base path named {base.name!r} already exists")
        if base.path in paths:
            raise InvalidInputError(f"base path {base.path!r} is already registered")
        new = table_pb2.BasePath()
        new.CopyFrom(base)
        if not new.id or new.id in taken:
            new.id = max(taken, default=0) + 1
        taken.add(int(new.id))
        paths.add(new.path)
        if new.HasField("name"):
            names.add(new.name)
        manifest.base_paths.append(new)


def _copy_index(index: table_pb2.IndexMetadata) -> table_pb2.IndexMetadata:
    new = table_pb2.IndexMetadata()
    new.CopyFrom(index)
    return new

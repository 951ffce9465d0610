"""MERGE INSERT (upsert): match source rows to table rows by key columns and act on each side.

``ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()`` has the shape
pylance users know. Planning joins the source's keys with the table's (read with their row
addresses), then

* matched rows (optionally only where ``condition`` holds, over ``source.col``/``target.col``)
  are updated: the table row is soft-deleted and the source row written anew;
* source rows without a match are inserted;
* table rows without a match are deleted when ``when_not_matched_by_source_delete`` is set
  (optionally only where its expression holds).

Everything is committed as one Update transaction (rewrite-rows mode). The source must have
the table's columns; its keys must not be null and must be unique.

**Concurrent inserts of the same key** (which make Lance itself create duplicate rows): at
commit time, when other commits landed since the plan was made, the rows they added are read
and if any holds a key this merge inserts, the commit is refused as retryable and the merge is
planned again on the newest version, where that key now matches (and is updated).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.dml.results import (
    DEFAULT_CONFLICT_RETRIES,
    DEFAULT_RETRY_TIMEOUT,
    MergeInsertResult,
    check_retries,
    check_writable,
    retry_seconds,
    storage_batch,
    with_replanning,
    write_rows,
)
from alance.dataset.fragments.blob_rewrite import blob_fields
from alance.dataset.fragments.deletions import (
    WrittenFiles,
    apply_deletions,
    sorted_unique,
    split_addresses,
)
from alance.dataset.fragments.inputs import record_batch_stream
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import delete_fragment_files, removed_on_failure
from alance.dataset.query.row_ids import ROW_CREATED_AT_VERSION, ROW_ID, uses_stable_row_ids
from alance.dataset.query.scan import ROW_ADDRESS, Scanner
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import (
    InvalidInputError,
    MergeInsertMatchError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from alance.filter import compile_filter, compile_filter_and_columns
from alance.io.store import DatasetStore
from alance.transaction.lineage import distribute_kept_rows
from alance.transaction.operations import Transaction, added_fragments, new_update

_LINEAGE = (ROW_ID, ROW_CREATED_AT_VERSION)
_SRC = "__alance_source_row"
_TGT = "__alance_target_row"


def _keys(snapshot: Snapshot, on: str | Sequence[str] | None) -> list[str]:
    schema = snapshot.schema
    if on is None:
        pk = schema.primary_key()
        if not pk:
            raise InvalidInputError("merge_insert needs `on`: the dataset has no primary key")
        top = set(schema.names)
        if any(f.name not in top for f in pk):
            raise UnsupportedFeatureError("merge_insert on a nested primary key field")
        return [f.name for f in pk]
    names = [on] if isinstance(on, str) else list(on)
    if not names or not all(isinstance(n, str) for n in names):
        raise InvalidInputError("`on` must name one or more columns")
    for n in names:
        if n not in schema.names:
            raise InvalidInputError(f"merge key {n!r} is not a column; columns are "
                                    f"{schema.names}")
    if len(set(names)) != len(names):
        raise InvalidInputError(f"merge keys repeat a column: {names}")
    return names


def _source_table(data: pa.Table, target: pa.Schema, keys: list[str]) -> pa.Table:
    """The source rows typed as the table's columns, in the table's column order. A source
    may leave columns out (but no key): matched rows keep those columns' values, inserted
    rows get nulls there."""
    names = set(data.column_names)
    extra = [n for n in data.column_names if n not in target.names]
    missing_keys = [k for k in keys if k not in names]
    if extra or missing_keys:
        raise SchemaMismatchError(
            f"merge_insert source columns must be the table's: unexpected {extra}, "
            f"missing keys {missing_keys}")
    target = pa.schema([target.field(n) for n in target.names if n in names])
    data = data.select(target.names)
    try:
        data = pa.Table.from_batches(
            [storage_batch(b, target) for b in data.to_batches()], schema=target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(f"merge_insert source does not fit the table: {exc}") from exc
    for k in keys:
        if data.column(k).null_count:
            raise InvalidInputError(f"merge key {k!r} has null values in the source")
    if data.num_rows:
        column = data.column(keys[0])
        if len(keys) == 1 and pa.types.is_integer(column.type):
            distinct = len(sorted_unique(column.to_numpy()))
        else:
            distinct = data.group_by(keys).aggregate([([], "count_all")]).num_rows
        if distinct != data.num_rows:
            raise InvalidInputError("the source repeats merge keys; each key may appear once")
    return data


def _struct_batch(source: pa.Table, target: pa.Table) -> pa.RecordBatch:
    src = pa.StructArray.from_arrays(
        [c.combine_chunks() for c in source.columns], names=source.column_names)
    tgt = pa.StructArray.from_arrays(
        [c.combine_chunks() for c in target.columns], names=target.column_names)
    return pa.RecordBatch.from_arrays([src, tgt], names=["source", "target"])


class MergeInsertBuilder:
    """A configured merge insert (see :meth:`LanceDataset.merge_insert`)."""

    def __init__(self, store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                 on: str | Sequence[str] | None, wrap: Callable[[Snapshot], Any]) -> None:
        self._store = store
        self._handler = handler
        self._snapshot = snapshot
        self._keys = _keys(snapshot, on)
        self._wrap = wrap
        self._update: bool = False
        self._condition: str | None = None
        self._insert = False
        self._delete: bool = False
        self._delete_expr: str | None = None
        self._retries = DEFAULT_CONFLICT_RETRIES
        self._retry_timeout: float | None = retry_seconds(DEFAULT_RETRY_TIMEOUT)
        self._fail_on_match = False
        self._use_index = True

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        """Update matched rows (only where ``condition`` over ``source.x``/``target.x`` holds)."""
        if condition is not None:
            self._check_condition(condition)
        self._update, self._condition = True, condition
        return self

    def when_matched_fail(self) -> MergeInsertBuilder:
        """Refuse the whole merge if any source row matches a row of the table (an
        insert-if-absent that must not touch existing rows): nothing is written."""
        self._fail_on_match, self._update, self._condition = True, False, None
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        """Insert source rows that match no row of the table."""
        self._insert = True
        return self

    def when_not_matched_by_source_delete(self, expr: str | None = None) -> MergeInsertBuilder:
        """Delete table rows no source row matches (only those where ``expr`` holds)."""
        if expr is not None:
            compile_filter(expr, self._snapshot.schema.to_arrow())
        self._delete, self._delete_expr = True, expr
        return self

    def conflict_retries(self, retries: int) -> MergeInsertBuilder:
        """How many times to plan again after a retryable conflict (default 10)."""
        check_retries(retries)
        self._retries = retries
        return self

    def retry_timeout(self, timeout: dt.timedelta | float) -> MergeInsertBuilder:
        """How long to keep planning again after retryable conflicts (default 30 s)."""
        self._retry_timeout = retry_seconds(timeout)
        return self

    def use_index(self, use_index: bool) -> MergeInsertBuilder:
        """Whether a scalar index on the join keys may be used (pylance's switch). alance
        joins by hashing either way; as in pylance, a plan that would use an index cannot be
        explained (:meth:`explain_plan`) until ``use_index(False)``."""
        self._use_index = bool(use_index)
        return self

    def _indexed_keys(self) -> list[str]:
        """The join keys a (user) scalar index covers."""
        from alance.dataset.query.indices.describe import user_indices
        snap = self._snapshot
        indexed = {int(fid) for segments in user_indices(snap.manifest_file.indices).values()
                   for ix in segments for fid in ix.fields}
        return [k for k in self._keys if snap.schema.field(k).id in indexed]

    def _check_action(self) -> None:
        if not (self._update or self._insert or self._delete or self._fail_on_match):
            raise InvalidInputError("merge_insert does nothing: call when_matched_update_all, "
                                    "when_matched_fail, when_not_matched_insert_all or "
                                    "when_not_matched_by_source_delete first")

    def _check_condition(self, condition: str) -> None:
        arrow = self._snapshot.schema.to_arrow()
        struct = pa.struct(list(arrow))
        compile_filter(condition, pa.schema([("source", struct), ("target", struct)]),
                       extra_columns=())

    async def execute(self, data: Any, *, schema: pa.Schema | None = None) -> MergeInsertResult:
        """Run the merge with ``data`` as the source and commit it; returns the counts."""
        self._check_action()
        check_writable(self._snapshot)
        _, batches = await record_batch_stream(data, schema)
        table = pa.Table.from_batches([b async for b in batches])
        source = _source_table(table, self._snapshot.schema.to_arrow(), self._keys)
        (snap, stats), attempts = await with_replanning(
            self._store, self._handler, self._snapshot,
            lambda s: self._attempt(s, source), self._retries, self._retry_timeout)
        return MergeInsertResult(self._wrap(snap), *stats, num_attempts=attempts)

    # -- one plan + commit ----------------------------------------------------------------
    async def _target_rows(self, ctx: ReadContext) -> pa.Table:
        arrow = ctx.schema.to_arrow()
        columns = list(self._keys)
        if self._delete_expr is not None:
            _, used = compile_filter_and_columns(self._delete_expr, arrow)
            columns += [c for c in used if c not in columns]
        # with stable row ids, updated rows keep their ids and creation versions
        lineage = [ROW_ID, ROW_CREATED_AT_VERSION] if uses_stable_row_ids(
            ctx.snapshot.manifest) else []
        scanner = Scanner(ctx, columns=[*columns, *lineage], with_row_address=True)
        out_schema = pa.schema([arrow.field(c) for c in columns]
                               + [pa.field(n, pa.uint64()) for n in lineage]).append(
            pa.field(ROW_ADDRESS, pa.uint64()))
        batches = [storage_batch(b, out_schema) async for b in scanner.to_batches()]
        return pa.Table.from_batches(batches, schema=out_schema)

    async def _attempt(self, snap: Snapshot, source: pa.Table,
                       ) -> tuple[Snapshot, tuple[int, int, int]]:
        plan = await self._plan(snap, source)
        async with removed_on_failure(self._store, plan.fragments, plan.written):
            new = await commit_transaction(self._store, self._handler, snap, plan.txn,
                                           max_retries=DEFAULT_MAX_RETRIES,
                                           affected_rows=plan.affected, check=plan.check)
        await plan.written.remove_unreferenced(self._store, new.fragments)
        return new, plan.stats

    async def execute_uncommitted(self, data: Any, *, schema: pa.Schema | None = None,
                                  ) -> tuple[Transaction, dict[str, int]]:
        """Write the merge's new rows and deletion files without committing: the wire
        transaction (an Update built on this version) and the counts
        (``num_inserted_rows``, ``num_updated_rows``, ``num_deleted_rows``)."""
        self._check_action()
        check_writable(self._snapshot)
        _, batches = await record_batch_stream(data, schema)
        table = pa.Table.from_batches([b async for b in batches])
        source = _source_table(table, self._snapshot.schema.to_arrow(), self._keys)
        plan = await self._plan(self._snapshot, source)
        inserted, updated, deleted = plan.stats
        return plan.txn, {"num_inserted_rows": inserted, "num_updated_rows": updated,
                          "num_deleted_rows": deleted}

    # -- plans as text ---------------------------------------------------------------------
    def explain_plan(self, schema: pa.Schema | None = None, verbose: bool = False) -> str:
        """What the merge will do, as text (nothing is read): the join on the keys, the
        actions, and (``verbose``) the source schema and the version's fragments."""
        self._check_action()
        if self._use_index and self._indexed_keys():
            raise UnsupportedFeatureError(
                f"a merge insert joining on the indexed column(s) {self._indexed_keys()} "
                "uses the index, which does not support explain_plan; call use_index(False) "
                "to explain the hash join")
        snap = self._snapshot
        source = schema if schema is not None else snap.schema.to_arrow()
        lines = [f"MergeInsert: on=[{', '.join(self._keys)}], {self._actions()}",
                 f"  HashJoin: source rows x table rows on [{', '.join(self._keys)}]",
                 f"    Source: {len(source)} columns [{', '.join(source.names)}]",
                 f"    LanceScan: version {snap.version}, {len(snap.fragments)} fragments, "
                 f"columns [{', '.join([*self._keys, ROW_ADDRESS])}]"]
        if verbose:
            lines.append(f"  source schema: {source.to_string(show_schema_metadata=False)}"
                         .replace("\n", "; "))
            lines.append(f"  retries: conflict_retries={self._retries}, "
                         f"retry_timeout={self._retry_timeout}s")
        return "\n".join(lines)

    async def analyze_plan(self, data: Any, *, schema: pa.Schema | None = None) -> str:
        """Run the merge on ``data`` as :meth:`execute` would, without committing, and
        describe what it did: rows inserted, updated and deleted, files and bytes written,
        time taken. The files it wrote are deleted again; the dataset is unchanged."""
        self._check_action()
        started = time.perf_counter()
        _, batches = await record_batch_stream(data, schema)
        table = pa.Table.from_batches([b async for b in batches])
        source = _source_table(table, self._snapshot.schema.to_arrow(), self._keys)
        plan = await self._plan(self._snapshot, source)
        elapsed = time.perf_counter() - started
        files = [f for frag in plan.fragments for f in frag.files]
        written = sum(int(f.file_size_bytes) for f in files)
        deletions = len(plan.written.paths)
        await delete_fragment_files(self._store, plan.fragments)
        await plan.written.remove_all(self._store)
        inserted, updated, deleted = plan.stats
        return (f"{self.explain_plan(source.schema)}\n"
                f"  metrics: source_rows={source.num_rows}, num_inserted_rows={inserted}, "
                f"num_updated_rows={updated}, num_deleted_rows={deleted}, "
                f"num_files_written={len(files) + deletions}, bytes_written={written}, "
                f"elapsed={elapsed * 1000:.1f}ms (not committed; files removed)")

    def _actions(self) -> str:
        matched = ("Fail" if self._fail_on_match else
                   f"UpdateAll({self._condition})" if self._update and self._condition else
                   "UpdateAll" if self._update else "DoNothing")
        unmatched = "InsertAll" if self._insert else "DoNothing"
        by_source = (f"Delete({self._delete_expr})" if self._delete and self._delete_expr else
                     "Delete" if self._delete else "Keep")
        return (f"when_matched={matched}, when_not_matched={unmatched}, "
                f"when_not_matched_by_source={by_source}")

    async def _full_rows(self, ctx: ReadContext, source: pa.Table, updated_src: np.ndarray,
                         kept_addresses: np.ndarray, inserted_src: np.ndarray) -> pa.Table:
        """The rows to write: updated then inserted source rows, with every column of the
        table (columns the source left out: the matched row's values, or nulls)."""
        arrow = ctx.schema.to_arrow()
        rows = source.take(np.concatenate([updated_src, inserted_src]))
        absent = [n for n in arrow.names if n not in source.column_names]
        if not absent:
            return rows
        not_nullable = [n for n in absent if not arrow.field(n).nullable]
        if len(inserted_src) and not_nullable:
            raise InvalidInputError(f"merge_insert: inserted rows need values for the "
                                    f"non-nullable columns {not_nullable}")
        kept = await _rows_at(ctx, kept_addresses, absent)
        for name in absent:
            field = arrow.field(name)
            filled = pa.concat_arrays([
                kept.column(name).combine_chunks().cast(field.type),
                pa.nulls(len(inserted_src), field.type)])
            rows = rows.append_column(field, filled)
        return rows.select(arrow.names)

    async def _matches(self, ctx: ReadContext, source: pa.Table) -> _Matches:
        """Which source rows update, insert, and which table rows go (nothing written)."""
        snap = ctx.snapshot
        target = await self._target_rows(ctx)
        keys = self._keys
        s_idx, t_idx, only_source, only_target = _match(source.select(keys),
                                                        target.select(keys))
        if self._fail_on_match and len(s_idx):
            first = source.select(keys).slice(int(s_idx[0]), 1).to_pylist()[0]
            raise MergeInsertMatchError(
                f"merge_insert with when_matched_fail: {len(np.unique(s_idx))} source rows "
                f"match rows of the table (first: {first}); nothing was written")
        updated_src = np.empty(0, np.int64)
        updated_tgt = np.empty(0, np.int64)
        kept_tgt = np.empty(0, np.int64)
        if self._update and len(s_idx):
            if self._condition is not None:
                addresses = target.column(ROW_ADDRESS).to_numpy()
                # Blob columns (descriptors on disk, bytes in the source) are left out of
                # the rows the condition sees.
                blobs = {f.name for f in blob_fields(snap.schema)}
                names = [n for n in source.column_names if n not in blobs]
                matched = await _rows_at(ctx, addresses[t_idx], names)
                batch = _struct_batch(source.select(names).take(s_idx), matched)
                try:
                    expr = compile_filter(self._condition, batch.schema, extra_columns=())
                except InvalidInputError as exc:
                    if not blobs:
                        raise
                    raise UnsupportedFeatureError(
                        f"merge_insert conditions over blob columns {sorted(blobs)} are not "
                        f"supported: {exc}") from exc
                keep = _mask(batch, expr)
                s_idx, t_idx = s_idx[keep], t_idx[keep]
            # source rows in order; each keeps the row id of the first table row it matched
            order = np.argsort(s_idx, kind="stable")
            first = np.ones(len(order), dtype=bool)
            first[1:] = s_idx[order][1:] != s_idx[order][:-1]
            updated_src, kept_tgt = s_idx[order][first], t_idx[order][first]
            updated_tgt = t_idx
        inserted_src = only_source if self._insert else np.empty(0, np.int64)
        deleted_tgt = np.empty(0, np.int64)
        if self._delete and len(only_target):
            t_idx = only_target
            if self._delete_expr is not None:
                candidates = target.drop_columns(
                    [c for c in (ROW_ADDRESS, *_LINEAGE) if c in target.column_names]
                ).take(t_idx)
                expr = compile_filter(self._delete_expr, candidates.schema)
                t_idx = t_idx[_mask(candidates, expr)]
            deleted_tgt = t_idx
        return _Matches(target, updated_src, updated_tgt, kept_tgt, inserted_src, deleted_tgt)

    async def _plan(self, snap: Snapshot, source: pa.Table) -> _Plan:
        """Write the new rows and deletion files of one attempt on ``snap`` (removed again if
        this fails); the transaction is not committed."""
        ctx = ReadContext(self._store, snap)
        m = await self._matches(ctx, source)
        target, updated_src, updated_tgt, kept_tgt = (m.target, m.updated_src, m.updated_tgt,
                                                      m.kept_tgt)
        inserted_src, deleted_tgt, keys = m.inserted_src, m.deleted_tgt, self._keys
        addresses = target.column(ROW_ADDRESS).to_numpy()
        gone = np.concatenate([addresses[updated_tgt], addresses[deleted_tgt]])
        new_rows = await self._full_rows(ctx, source, updated_src,
                                         addresses[kept_tgt], inserted_src)
        inserted_keys = source.select(keys).take(inserted_src)

        async def rows() -> Any:
            for batch in new_rows.to_batches():
                yield batch

        fragments = await write_rows(ctx, rows())
        if ROW_ID in target.column_names:
            distribute_kept_rows(fragments,
                                 target.column(ROW_ID).to_numpy()[kept_tgt],
                                 target.column(ROW_CREATED_AT_VERSION).to_numpy()[kept_tgt])
        written = WrittenFiles()
        async with removed_on_failure(self._store, fragments, written):
            by_fragment = split_addresses(gone)
            updated, removed = await apply_deletions(ctx, by_fragment, written)
            field_ids = [f.id for f in snap.schema.fields]
            txn = new_update(snap.version, removed_fragment_ids=removed,
                             updated_fragments=updated, new_fragments=fragments,
                             fields_for_preserving_frag_bitmap=field_ids)
            check = _InsertedKeysCheck(self._store, keys, inserted_keys) if (
                inserted_keys.num_rows) else None
        return _Plan(txn, fragments, written, by_fragment, check,
                     (len(inserted_src), len(updated_src), len(deleted_tgt)))


@dataclass
class _Matches:
    """What a merge does to one version: positions in the source (``*_src``) and in the
    table's key rows (``target``, ``*_tgt``)."""

    target: pa.Table
    updated_src: np.ndarray
    updated_tgt: np.ndarray
    kept_tgt: np.ndarray
    inserted_src: np.ndarray
    deleted_tgt: np.ndarray


@dataclass
class _Plan:
    """One attempt's written files and its uncommitted transaction."""

    txn: Transaction
    fragments: list[table_pb2.DataFragment]
    written: WrittenFiles
    affected: dict[int, np.ndarray]
    check: Any
    stats: tuple[int, int, int]


async def _rows_at(ctx: ReadContext, addresses: np.ndarray, names: list[str]) -> pa.Table:
    """Columns ``names`` of the rows at (unique) ``addresses``, in the order given."""
    fields = [ctx.schema.field(n) for n in names]
    schema = pa.schema([f.to_arrow() for f in fields])
    order = np.argsort(addresses, kind="stable")
    by_id = {f.id: f for f in ctx.snapshot.fragments}
    parts = [await ctx.fragment(by_id[fid]).read_rows(fields, offsets.astype(np.int64))
             for fid, offsets in split_addresses(addresses).items()]
    in_order = pa.Table.from_batches([storage_batch(b, schema) for b in parts], schema=schema)
    if in_order.num_rows != len(addresses):
        raise InvalidInputError("merge_insert: table rows to compare are not unique")
    return in_order.take(pa.array(np.argsort(order)))


def _match(source: pa.Table, target: pa.Table,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Match key rows: (source, target) positions of matched pairs, then the positions of
    source rows and of target rows matching nothing (all sorted). Null keys never match."""
    n_src, n_tgt = source.num_rows, target.num_rows
    if source.num_columns == 1:
        # one key: look every table key up among the source keys (unique, no nulls)
        found = _dense_lookup(source.column(0), target.column(0))
        if found is None:
            hit = pc.index_in(target.column(0), value_set=source.column(0).combine_chunks())
            found = hit.fill_null(-1).to_numpy().astype(np.int64, copy=False)
        t_idx = np.flatnonzero(found >= 0)
        s_idx = found[t_idx]
        seen = np.zeros(n_src, dtype=bool)
        seen[s_idx] = True
        return s_idx, t_idx, np.flatnonzero(~seen), np.flatnonzero(found < 0)
    keys = source.column_names
    left = source.append_column(_SRC, pa.array(np.arange(n_src)))
    right = target.append_column(_TGT, pa.array(np.arange(n_tgt)))
    joined = left.join(right, keys=keys, join_type="full outer")
    src = joined.column(_SRC).fill_null(-1).to_numpy()
    tgt = joined.column(_TGT).fill_null(-1).to_numpy()
    both = (src >= 0) & (tgt >= 0)
    order = np.argsort(tgt[both], kind="stable")
    return (src[both][order], tgt[both][order], np.sort(src[tgt < 0]),
            np.sort(tgt[src < 0]))


def _dense_lookup(source: pa.ChunkedArray, target: pa.ChunkedArray) -> np.ndarray | None:
    """For integer keys in a compact range: each target key's source position (-1: none),
    through a direct-address table instead of hashing. ``None`` when keys do not suit."""
    if not pa.types.is_integer(source.type) or not len(source) or not len(target):
        return None
    src = source.to_numpy()
    tgt = target.fill_null(0).to_numpy() if target.null_count else target.to_numpy()
    lo = min(int(src.min()), int(tgt.min()))
    hi = max(int(src.max()), int(tgt.max()))
    if hi - lo + 1 > 4 * (len(src) + len(tgt)) + 1024 or hi >= 2**63 or lo < -(2**63):
        return None
    table = np.full(hi - lo + 1, -1, dtype=np.int64)
    table[src.astype(np.int64) - lo] = np.arange(len(src))
    found = table[tgt.astype(np.int64) - lo]
    if target.null_count:
        found[~target.is_valid().to_numpy(zero_copy_only=False)] = -1
    return found


def _mask(rows: pa.Table | pa.RecordBatch, expr: pc.Expression) -> np.ndarray:
    """Positions of ``rows`` where ``expr`` is true (null counts as false)."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
    numbered = table.append_column("__alance_pos", pa.array(np.arange(table.num_rows)))
    try:
        kept = numbered.filter(expr)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidInputError(f"cannot evaluate merge condition: {exc}") from exc
    return kept.column("__alance_pos").to_numpy()


class _InsertedKeysCheck:
    """Refuses the commit when a concurrent commit added a row with a key we insert."""

    def __init__(self, store: DatasetStore, keys: list[str], inserted: pa.Table) -> None:
        self.store = store
        self.keys = keys
        self.inserted = inserted

    async def __call__(self, others: Sequence[tuple[int, Transaction]], latest: Snapshot,
                       ) -> None:
        ctx = ReadContext(self.store, latest)
        fields = [ctx.schema.field(k) for k in self.keys]
        for version, txn in others:
            for frag in added_fragments(txn):
                found = await ctx.fragment(frag).read_range(fields, 0, int(frag.physical_rows))
                theirs = pa.Table.from_batches([storage_batch(
                    found, pa.schema([f.to_arrow() for f in fields]))])
                if not theirs.num_rows:
                    continue
                clash = self.inserted.join(theirs, keys=self.keys, join_type="inner")
                if clash.num_rows:
                    raise RetryableCommitConflictError(
                        f"version {version} inserted rows with keys this merge_insert inserts "
                        f"(e.g. {clash.slice(0, 1).to_pylist()[0]}); planning it again")

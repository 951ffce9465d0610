"""UPDATE: new values for the rows matching a predicate, in Lance's rewrite-rows mode.

The matching rows are read whole, their new values computed (SQL expressions over the old
row, or plain values), and written as new fragments; the old rows are soft-deleted. The
Update transaction records both, plus the exact rows removed so concurrent changes to other
rows of the same fragments can be merged at commit time.

Blob columns keep their bytes: the matching rows' blobs are fetched in bounded slices and
written anew (:mod:`alance.dataset.fragments.blob_rewrite`);
updating a blob column itself is refused.

Values must fit the column: a bare literal is converted to the column's type (error if it
does not fit), an expression's result is cast only between compatible kinds (numbers to
numbers, strings to strings...) and only without loss; anything else is
:class:`~alance.errors.InvalidInputError` before a byte is written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.dml.results import (
    cast_rows,
    check_retries,
    check_writable,
    storage_batch,
    with_replanning,
    write_rows,
)
from alance.dataset.fragments.blob_rewrite import blob_fields, complete_rows, scanned_columns
from alance.dataset.fragments.deletions import WrittenFiles, apply_deletions, split_addresses
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import removed_on_failure
from alance.dataset.query.row_ids import ROW_CREATED_AT_VERSION, ROW_ID, uses_stable_row_ids
from alance.dataset.query.scan import ROW_ADDRESS, Scanner
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.filter import compile_expression
from alance.format.schema import LanceSchema
from alance.io.store import DatasetStore
from alance.transaction.lineage import distribute_kept_rows
from alance.transaction.operations import new_update


def _kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    for name, test in (("number", lambda x: pa.types.is_integer(x) or pa.types.is_floating(x)
                        or pa.types.is_decimal(x)),
                       ("string", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)),
                       ("binary", lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x)
                        or pa.types.is_fixed_size_binary(x)),
                       ("bool", pa.types.is_boolean), ("date", pa.types.is_date),
                       ("timestamp", pa.types.is_timestamp), ("time", pa.types.is_time),
                       ("duration", pa.types.is_duration),
                       ("list", lambda x: pa.types.is_list(x) or pa.types.is_large_list(x)
                        or pa.types.is_fixed_size_list(x))):
        if test(t):
            return name
    return str(t)


def compile_updates(schema: LanceSchema, updates: Mapping[str, Any]) -> dict[str, pc.Expression]:
    """Column name -> expression computing its new value (typed as the column)."""
    if not isinstance(updates, Mapping) or not updates:
        raise InvalidInputError("updates must be a non-empty mapping of column -> value")
    arrow = schema.to_arrow()
    out: dict[str, pc.Expression] = {}
    for name, value in updates.items():
        if not isinstance(name, str) or name not in arrow.names:
            raise InvalidInputError(f"cannot update column {name!r}: the dataset has columns "
                                    f"{arrow.names}")
        target = arrow.field(name).type
        if isinstance(value, str):
            expr, result_type, _ = compile_expression(value, arrow, target)
        else:
            try:
                scalar = pa.scalar(value, type=target)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError,
                    OverflowError) as exc:
                raise InvalidInputError(f"column {name!r}: {value!r} is not a {target}") from exc
            expr, result_type = pc.scalar(scalar), target
        if result_type != target:
            if not pa.types.is_null(result_type) and _kind(result_type) != _kind(target):
                raise InvalidInputError(
                    f"column {name!r} is {target}; the new value {value!r} is {result_type}")
            expr = expr.cast(target)
        out[name] = expr
    return out


def apply_updates(batch: pa.RecordBatch, schema: pa.Schema,
                  compiled: Mapping[str, pc.Expression]) -> pa.RecordBatch:
    """``batch`` (storage types of ``schema``) with the updated columns recomputed."""
    table = pa.Table.from_batches([batch], schema=schema)
    columns = {n: compiled.get(n, pc.field(n)) for n in schema.names}
    try:
        result = pads.dataset(table).to_table(columns=columns)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidInputError(f"cannot compute the updated values: {exc}") from exc
    result = cast_rows(result, schema) if not result.schema.equals(schema) else result
    combined = result.combine_chunks()
    batches = combined.to_batches()
    return batches[0] if batches else schema.empty_table().to_batches()[0]


async def update_rows(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                      updates: Mapping[str, Any], where: str | pc.Expression | None, *,
                      conflict_retries: int, max_retries: int = DEFAULT_MAX_RETRIES,
                      retry_timeout: float | None = None) -> tuple[Snapshot, int, int]:
    """Update matching rows; returns (new version, rows updated, attempts)."""
    check_retries(conflict_retries)
    check_writable(snapshot)
    compile_updates(snapshot.schema, updates)
    touched = [f.name for f in blob_fields(snapshot.schema) if f.name in updates]
    if touched:
        raise UnsupportedFeatureError(f"update of blob columns {touched} is not supported "
                                      "(write the new rows with merge_insert)")
    if isinstance(where, str) and not where.strip():
        where = None
    Scanner(ReadContext(store, snapshot), columns=[], filter=where)

    async def attempt(snap: Snapshot) -> tuple[Snapshot, int]:
        ctx = ReadContext(store, snap)
        compiled = compile_updates(snap.schema, updates)
        target = snap.schema.to_arrow()
        field_ids = [snap.schema.field(n).id for n in compiled]
        addresses: list[np.ndarray] = []
        # With stable row ids the new rows keep the old rows' ids and creation versions.
        lineage = [ROW_ID, ROW_CREATED_AT_VERSION] if uses_stable_row_ids(snap.manifest) else []
        kept: dict[str, list[np.ndarray]] = {n: [] for n in lineage}
        # Blob columns are not scanned: their descriptors are read for the matching rows
        # and their bytes fetched in bounded slices (alance.dataset.fragments.blob_rewrite).
        scanner = Scanner(ctx, columns=[*scanned_columns(snap.schema), *lineage],
                          filter=where, with_row_address=True)

        async def new_rows() -> AsyncIterator[pa.RecordBatch]:
            async for batch in scanner.to_batches():
                addr = batch.column(ROW_ADDRESS).to_numpy()
                addresses.append(addr)
                for n in lineage:
                    kept[n].append(batch.column(n).to_numpy())
                rows = batch.drop_columns([ROW_ADDRESS, *lineage])
                async for piece in complete_rows(ctx, snap.schema, rows, addr):
                    yield apply_updates(storage_batch(piece, target), target, compiled)

        fragments = await write_rows(ctx, new_rows())
        if lineage:
            distribute_kept_rows(fragments, *(np.concatenate(kept[n]) if kept[n] else
                                              np.empty(0, np.uint64) for n in lineage))
        written = WrittenFiles()
        async with removed_on_failure(store, fragments, written):
            addr = np.concatenate(addresses) if addresses else np.empty(0, np.uint64)
            by_fragment = split_addresses(addr)
            updated, removed = await apply_deletions(ctx, by_fragment, written)
            txn = new_update(snap.version, removed_fragment_ids=removed,
                             updated_fragments=updated, new_fragments=fragments,
                             fields_for_preserving_frag_bitmap=field_ids)
            new = await commit_transaction(store, handler, snap, txn, max_retries=max_retries,
                                           affected_rows=by_fragment)
        await written.remove_unreferenced(store, new.fragments)
        return new, len(addr)

    (new, count), attempts = await with_replanning(store, handler, snapshot, attempt,
                                                   conflict_retries, retry_timeout)
    return new, count, attempts

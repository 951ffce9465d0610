"""Projections beyond a list of top-level columns: SQL expressions, nested paths, ``_rowoffset``.

What ``columns=`` may hold in scans and takes, as in pylance:

* a list of names: top-level columns, system columns (``_rowid``, ``_rowaddr``,
  ``_rowoffset``, ``_row_created_at_version``, ``_row_last_updated_at_version``) and paths
  to struct fields (``"s.x"``, ``"s.inner.y"``). A scan outputs a path as its own column,
  named as written, holding the field's values. A take outputs the top-level struct instead,
  pruned to the fields asked for (``["s.x", "s.y"]`` gives one column ``s: struct<x, y>``,
  where ``s`` is first named); a data column named twice is output once, a system column
  as often as it is named. A scan refuses names given twice.
* a mapping ``{output name: SQL expression}`` (``{"a2": "a * 10", "b": "b"}``): each output
  column is computed by a value expression over the row (see :mod:`alance.filter`), in
  mapping order. A bare column or field reference outputs that column as stored.

``_rowoffset`` is the position of the row in the dataset (live rows in fragment order, from
0): not changed by a filter, limit or offset, so it is the index :meth:`take` accepts.

A plain list of names the caller reads directly needs none of this
(:meth:`Projection.parse` returns ``None`` and scans keep their direct path). Otherwise a
:class:`Projection` names the *inner* columns to read (top-level data columns, pruned to the
struct fields used, and system columns) and :meth:`Projection.apply` turns a batch of them
into the output, per batch: expressions are evaluated for the rows returned only.

Output types and nullability follow pylance (a computed column is non-nullable when Lance
would say so, e.g. ``a * 2`` of a non-nullable ``a``). Differences: a projection of
constants only (``{"one": "1"}``) gives one value per row where pylance refuses it; SQL the
filter compiler lacks (negative or per-row list indices, ``CASE``...) is refused; arithmetic
on ``float16`` gives ``float32``; errors are :class:`~alance.errors.InvalidInputError`
(a ``ValueError``, as pylance's are) with alance's own messages.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import acero

from alance._proto import table_pb2
from alance.dataset.fragments.read import ReadContext, live_rows
from alance.dataset.query.row_ids import SYSTEM_COLUMNS, system_columns
from alance.errors import InvalidInputError, no_such_column
from alance.filter import column_path, compile_expression, expression_nullable
from alance.format.schema import LanceField, LanceSchema, as_schema, with_extension_type

__all__ = ["ROW_OFFSET", "SCAN_SYSTEM_COLUMNS", "Projection", "Columns", "row_offsets",
           "system_columns_at"]

ROW_OFFSET = "_rowoffset"
#: System columns a scan can produce: the row id ones and the row's dataset position.
SCAN_SYSTEM_COLUMNS = (*SYSTEM_COLUMNS, ROW_OFFSET)
#: What ``columns=`` accepts.
Columns = Sequence[str] | Mapping[str, str] | None


@dataclass(frozen=True)
class _Output:
    """One output column: an inner column (``source``), a struct field of it (``path``), the
    struct pruned to some fields (``keep``), or a compiled expression (``expr``)."""

    field: pa.Field  # as output (extension types restored)
    storage: pa.DataType  # the type of the array computed for it
    source: str = ""
    path: tuple[str, ...] = ()
    keep: LanceField | None = None
    expr: pc.Expression | None = None


def _resolve(schema: LanceSchema, path: Sequence[str], name: str) -> list[LanceField]:
    """The fields along ``path`` (a top-level column, then struct fields), exact names."""
    if path[0] not in schema.names:
        raise no_such_column(name, schema.names)
    chain = [schema.field(path[0])]
    for part in path[1:]:
        kids = {c.name: c for c in chain[-1].children} if chain[-1].logical_type == "struct" \
            else {}
        if part not in kids:
            raise InvalidInputError(f"No field named {name}: {chain[-1].name!r} has no "
                                    f"struct field {part!r}")
        chain.append(kids[part])
    return chain


def _system_field(name: str, take: bool) -> pa.Field:
    # A take's offsets are the indices asked for: never null (as pylance types them).
    return pa.field(name, pa.uint64(), not (take and name == ROW_OFFSET))


class Projection:
    """A parsed ``columns`` argument; see the module docstring."""

    def __init__(self, outputs: list[_Output], inner: list[str],
                 partial: dict[str, set[int]]) -> None:
        self._outputs = outputs
        #: The inner columns (data and system), unique, in order of first use.
        self.inner = inner
        #: Field ids wanted of data columns needed only in part (struct fields).
        self._partial = partial
        #: The schema of the output.
        self.schema = pa.schema([o.field for o in outputs])

    @classmethod
    def parse(cls, schema: LanceSchema, columns: Columns, *, take: bool = False,
              plain: Collection[str] = SCAN_SYSTEM_COLUMNS,
              trailing: Sequence[str] = ()) -> Projection | None:
        """The projection ``columns`` asks of a dataset with ``schema``, or ``None`` when it
        is a list of top-level columns and ``plain`` (system) names the caller handles.

        ``take``: take semantics for paths and ``_rowoffset`` (see the module docstring).
        ``trailing``: system columns appended to the output (``with_row_id``...) unless
        already there. Unknown names and bad expressions are :class:`InvalidInputError`.
        """
        if columns is None or isinstance(columns, str):
            return None
        if not isinstance(columns, Mapping):
            names = list(columns)
            top = set(schema.names)
            if all(isinstance(n, str) and (n in plain or n in top) for n in names):
                return None
        builder = _Builder(schema, take)
        if isinstance(columns, Mapping):
            for name, sql in columns.items():
                builder.expression(name, sql)
        else:
            for name in names:
                builder.name(name)
        for name in trailing:
            if name not in builder.at:
                builder.name(name)
        return builder.build()

    def fields(self, schema: LanceSchema) -> list[LanceField]:
        """The inner data columns to read, pruned to the struct fields used."""
        out = []
        for name in self.inner:
            if name in SCAN_SYSTEM_COLUMNS:
                continue
            ids = self._partial.get(name)
            field = schema.field(name)
            out.append(field if ids is None else LanceSchema([field]).with_ids(ids).fields[0])
        return out

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The output rows of a batch of the inner columns."""
        if not self._outputs:  # no columns, but the rows still count
            return batch.select([])
        storage = batch  # expressions were compiled for stored types
        if any(isinstance(c, pa.ExtensionArray) for c in batch.columns):
            storage = pa.RecordBatch.from_arrays(
                [c.storage if isinstance(c, pa.ExtensionArray) else c for c in batch.columns],
                names=batch.schema.names)
        computed = _evaluate(storage, {str(i): o.expr for i, o in enumerate(self._outputs)
                                       if o.expr is not None})
        arrays = []
        for i, out in enumerate(self._outputs):
            if out.expr is not None:
                array = computed[str(i)]
            else:
                array = storage.column(out.source)
                for name in out.path:
                    array = pc.struct_field(array, name)  # null where a parent is null
                if out.keep is not None:
                    array = _pruned(array, out.keep)
            if array.type != out.storage:
                array = array.cast(out.storage)
            arrays.append(array)
        result = pa.RecordBatch.from_arrays(
            arrays, schema=pa.schema([pa.field(o.field.name, o.storage, o.field.nullable)
                                      for o in self._outputs]))
        return as_schema(result, self.schema)

    def apply_table(self, table: pa.Table) -> pa.Table:
        """:meth:`apply` over a table of the inner columns."""
        return pa.Table.from_batches([self.apply(b) for b in table.to_batches()],
                                     schema=self.schema)


class _Builder:
    """Collects output columns and the inner columns they need (see :meth:`Projection.parse`)."""

    def __init__(self, schema: LanceSchema, take: bool) -> None:
        self.schema = schema
        self.names = set(schema.names)
        self.take = take
        self.outputs: list[_Output] = []
        #: Where each output name is in ``outputs``.
        self.at: dict[str, int] = {}
        self.inner: dict[str, None] = {}
        self.partial: dict[str, set[int]] = {}
        self.whole: set[str] = set()
        arrow = schema.to_arrow()
        system = [_system_field(n, take) for n in SCAN_SYSTEM_COLUMNS if n not in arrow.names]
        #: What expressions are compiled against: stored types, system columns included.
        self.compile_schema = pa.schema([*arrow, *system])

    def _use(self, name: str, fields: list[LanceField] | None = None) -> None:
        """Read inner column ``name``: whole, or (``fields``: a path) only what the path
        reaches."""
        self.inner.setdefault(name, None)
        if name in SCAN_SYSTEM_COLUMNS:
            return
        if fields is None or len(fields) == 1:
            self.whole.add(name)
        else:
            self.partial.setdefault(name, set()).update(f.id for f in fields[-1].walk())

    def _add(self, name: str, output: _Output, repeat: bool = False) -> None:
        if name in self.at and not repeat:
            raise InvalidInputError(f"Duplicate column name: {name!r}")
        self.at[name] = len(self.outputs)
        self.outputs.append(output)

    def name(self, name: Any) -> None:
        """A name from a list of columns."""
        if not isinstance(name, str):
            raise InvalidInputError(f"column names must be strings, got {name!r}")
        if name in SCAN_SYSTEM_COLUMNS and name not in self.names:
            self._use(name)
            field = _system_field(name, self.take)
            # (a take outputs a system column as often as it is named, as pylance does)
            self._add(name, _Output(field, field.type, source=name), repeat=self.take)
            return
        path = [name] if name in self.names else name.split(".")
        chain = _resolve(self.schema, path, name)
        self._use(path[0], chain)
        if self.take:  # one output per top-level column: the struct pruned to what is named
            top = path[0]
            before = self.outputs[self.at[top]] if top in self.at else None
            if before is not None and before.keep is None:
                return  # already output whole
            keep = None
            if len(chain) > 1:
                ids = {f.id for f in chain[-1].walk()}
                if before is not None and before.keep is not None:
                    ids |= {f.id for f in before.keep.walk()}
                keep = LanceSchema([chain[0]]).with_ids(ids).fields[0]
            storage = (keep or chain[0]).to_arrow()
            output = _Output(with_extension_type(storage), storage.type, source=top, keep=keep)
            if before is None:
                self._add(top, output)
            else:  # where the column was first named
                self.outputs[self.at[top]] = output
            return
        self._add(name, self._path_output(name, chain))

    def _path_output(self, name: str, chain: list[LanceField]) -> _Output:
        storage = chain[-1].to_arrow()
        nullable = any(f.nullable for f in chain)
        storage = pa.field(name, storage.type, nullable, storage.metadata)
        return _Output(with_extension_type(storage), storage.type, source=chain[0].name,
                       path=tuple(f.name for f in chain[1:]))

    def expression(self, name: Any, sql: Any) -> None:
        """An entry of a mapping of columns."""
        if not isinstance(name, str) or not isinstance(sql, str):
            raise InvalidInputError("columns given as a mapping must map output names (str) "
                                    f"to SQL expressions (str), got {name!r}: {sql!r}")
        try:
            path = column_path(sql, self.compile_schema, ())
            if path is not None and path[0] in SCAN_SYSTEM_COLUMNS \
                    and path[0] not in self.names:
                self._use(path[0])
                field = _system_field(path[0], self.take).with_name(name)
                self._add(name, _Output(field, field.type, source=path[0]))
                return
            if path is not None:
                chain = _resolve(self.schema, path, sql)
                self._use(path[0], chain)
                self._add(name, self._path_output(name, chain))
                return
            expr, result_type, read = compile_expression(sql, self.compile_schema,
                                                         extra_columns=())
            nullable = expression_nullable(sql, self.compile_schema, ())
        except InvalidInputError as exc:
            raise InvalidInputError(f"cannot compute column {name!r} as {sql!r}: {exc}"
                                    ) from exc
        for column in read:
            self._use(column)
        self._add(name, _Output(pa.field(name, result_type, nullable), result_type, expr=expr))

    def build(self) -> Projection:
        partial = {n: ids for n, ids in self.partial.items() if n not in self.whole}
        return Projection(self.outputs, list(self.inner), partial)


def _evaluate(batch: pa.RecordBatch, exprs: dict[str, pc.Expression]) -> dict[str, pa.Array]:
    """``exprs`` evaluated on ``batch`` (by Acero, on the calling thread, as filters are)."""
    if not exprs:
        return {}
    plan = acero.Declaration.from_sequence([
        acero.Declaration("table_source",
                          acero.TableSourceNodeOptions(pa.Table.from_batches([batch]))),
        acero.Declaration("project", acero.ProjectNodeOptions(list(exprs.values()),
                                                              list(exprs)))])
    try:
        result = plan.to_table(use_threads=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidInputError(f"cannot evaluate projection: {exc}") from exc
    return {name: result.column(name).combine_chunks() if result.num_rows
            else pa.array([], result.schema.field(name).type) for name in exprs}


def _pruned(array: pa.Array, keep: LanceField) -> pa.Array:
    """A struct array with only the (nested) fields of ``keep``."""
    if keep.logical_type != "struct" or not isinstance(array, pa.StructArray):
        return array
    children = [_pruned(array.field(child.name), child) for child in keep.children]
    fields = [pa.field(c.name, a.type, c.nullable, c.to_arrow().metadata)
              for c, a in zip(keep.children, children, strict=True)]
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


# -- _rowoffset and system columns of takes ----------------------------------------------------

_STARTS: weakref.WeakKeyDictionary[ReadContext, dict[int, int]] = weakref.WeakKeyDictionary()


def _fragment_starts(ctx: ReadContext) -> dict[int, int]:
    """The dataset position of each fragment's first live row, by fragment id."""
    starts = _STARTS.get(ctx)
    if starts is None:
        ends = ctx.live_row_ends()
        starts = _STARTS[ctx] = {
            int(f.id): int(end) - live_rows(f)
            for f, end in zip(ctx.snapshot.fragments, ends, strict=True)}
    return starts


async def row_offsets(ctx: ReadContext, fragment: table_pb2.DataFragment,
                      offsets: np.ndarray) -> pa.Array:
    """``_rowoffset`` of the live rows at physical ``offsets`` of ``fragment``."""
    local = offsets.astype(np.uint64)
    deleted = await ctx.deleted_offsets(fragment)
    if deleted is not None and len(deleted):  # less the deleted rows before each
        local = local - np.searchsorted(deleted.astype(np.uint64), local).astype(np.uint64)
    return pa.array(local + np.uint64(_fragment_starts(ctx)[int(fragment.id)]), pa.uint64())


async def system_columns_at(ctx: ReadContext, positions: np.ndarray,
                            names: Sequence[str]) -> dict[str, pa.Array]:
    """System columns (not ``_rowoffset``) of the rows at valid dataset ``positions``."""
    if not len(positions):
        return {n: pa.array([], pa.uint64()) for n in names}
    union, inverse = np.unique(positions, return_inverse=True)
    ends = ctx.live_row_ends()
    which = np.searchsorted(ends, union, side="right")
    parts: dict[str, list[pa.Array]] = {n: [] for n in names}
    for pos in np.unique(which).tolist():
        frag = ctx.snapshot.fragments[pos]
        local = union[which == pos] - (int(ends[pos]) - live_rows(frag))
        deleted = await ctx.deleted_offsets(frag)
        if deleted is not None and len(deleted):
            alive = np.setdiff1d(np.arange(frag.physical_rows, dtype=np.int64),
                                 deleted.astype(np.int64), assume_unique=True)
            local = alive[local]
        columns = await system_columns(ctx, frag, local.astype(np.uint64), names)
        for name in names:
            parts[name].append(columns[name])
    order = pa.array(inverse.ravel())
    return {n: pa.concat_arrays(parts[n]).take(order) for n in names}

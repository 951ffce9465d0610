"""Shredding Arrow arrays into 2.1+ leaf columns: repetition/definition levels and values.

A (possibly nested) field becomes one leaf column per leaf field. Every leaf column is a
sequence of *items*: one per leaf value, and one per null or empty list / null struct that
hides the values below it. Each item gets

* a repetition level: ``max_rep`` starts a new row; ``r`` (``0 < r < max_rep``) starts a
  new element of the list ``r`` layers from the innermost list ... ``0`` continues the
  innermost list;
* a definition level: ``0`` means valid at every layer; otherwise which layer (numbered
  innermost first, a layer taking one level per kind of "missing" it holds) made it
  missing.

Items that lie inside the innermost list (or every item when there is no list) carry a value
slot, even when null: :attr:`Shredded.values` holds those slots in item order.
The kind of every layer (nullable or not, emptyable or not) is chosen from the data, as the
layouts describe it per page. Everything is vectorised over items.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import UnsupportedFeatureError
from alance.format.schema import LanceField
from alance.format.v2.leaf import is_packed_struct

ITEM, LIST = 0, 1
#: Reasons an item stops at a layer (stored as ``2 * layer + reason``).
NULL, EMPTY = 0, 1


@dataclass
class Shredded:
    """One leaf column of some rows: levels of its items and the values of its slots."""

    field: LanceField
    layers: list[pb.RepDefLayer.ValueType]  # innermost first
    rep: np.ndarray | None  # uint16 per item (None: no lists)
    defs: np.ndarray | None  # uint16 per item (None: nothing is ever missing)
    values: pa.Array  # one entry per value slot (visible item), storage type of the leaf
    visible: np.ndarray | None  # bool per item: carries a value slot (None: all do)
    num_rows: int
    max_rep: int
    max_def: int

    @property
    def num_items(self) -> int:
        """Items (levels) of the column."""
        if self.rep is not None:
            return len(self.rep)
        if self.defs is not None:
            return len(self.defs)
        return len(self.values)

    def row_starts(self) -> np.ndarray:
        """Index of the first item of every row."""
        if self.rep is None:
            return np.arange(self.num_rows, dtype=np.int64)
        return np.flatnonzero(self.rep == self.max_rep)


@dataclass
class _Items:
    """Items while descending: position in the current array, how each item started, why
    it stopped (``-1``: still alive)."""

    pos: np.ndarray  # int64
    start_depth: np.ndarray  # 0 = row start; k + 1 = new element of the k-th list from the top
    dead: np.ndarray  # int64, -1 or 2 * layer + reason


@dataclass
class _Layer:
    kind: int
    has_null: bool = False
    has_empty: bool = False


def storage_of(arr: pa.Array) -> pa.Array:
    """The storage array of an extension array (else the array)."""
    while isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    return arr


def _valid(arr: pa.Array) -> np.ndarray | None:
    """Validity per slot (None: all valid)."""
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), dtype=bool)
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid())


def shred(field: LanceField, arr: pa.Array) -> list[Shredded]:
    """The leaf columns of ``field`` for the rows of ``arr`` (depth-first leaf order)."""
    n = len(arr)
    arr = storage_of(arr)
    if _plain_leaf(field, arr):  # one item per row: no items to build
        if arr.null_count == 0:
            return [Shredded(field, [pb.REPDEF_ALL_VALID_ITEM], None, None, arr, None, n, 0, 0)]
        defs = np.asarray(arr.is_null()).astype(np.uint16)  # def level 1: a null item
        return [Shredded(field, [pb.REPDEF_NULLABLE_ITEM], None, defs, arr, None, n, 0, 1)]
    items = _Items(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                   np.full(n, -1, dtype=np.int64))
    out: list[Shredded] = []
    _walk(field, storage_of(arr), items, [], 0, n, out)
    return out


def _plain_leaf(field: LanceField, arr: pa.Array) -> bool:
    """Whether ``arr`` is a leaf (not a struct of columns, not a list, not of the null type):
    what :func:`_walk` makes of it is then known without building its items."""
    t = arr.type
    return (not pa.types.is_null(t)
            and not (pa.types.is_struct(t) and not is_packed_struct(field))
            and not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t)))


def _walk(field: LanceField, arr: pa.Array, items: _Items, path: list[_Layer], lists: int,
          num_rows: int, out: list[Shredded]) -> None:
    dtype = arr.type
    if pa.types.is_struct(dtype) and not is_packed_struct(field):
        if dtype.num_fields == 0:
            # An empty struct is a column of its own, written as pylance writes it: an
            # all-null constant page (there are no values; readers give empty structs).
            if path or arr.null_count:
                # pylance cannot read these back (an empty struct with nulls, or inside
                # another struct or a list): refused rather than written unreadable.
                raise UnsupportedFeatureError(
                    f"field {field.name!r}: only a top-level empty struct without nulls can "
                    "be written to 2.x files (pylance cannot read others back)")
            nulls = pa.nulls(len(arr))
            items, layer = _stop_nulls(nulls, items, len(path))
            out.append(_finish(field, nulls, items, [*path, layer], lists, num_rows))
            return
        items, layer = _stop_nulls(arr, items, len(path))
        for child_field, i in zip(field.children, range(dtype.num_fields), strict=True):
            _walk(child_field, storage_of(arr.field(i)), items, [*path, layer], lists,
                  num_rows, out)
        return
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        items, layer = _expand_list(arr, items, len(path), lists)
        (child_field,) = field.children
        _walk(child_field, storage_of(arr.values), items, [*path, layer], lists + 1,
              num_rows, out)
        return
    items, layer = _stop_nulls(arr, items, len(path))
    out.append(_finish(field, arr, items, [*path, layer], lists, num_rows))


def _stop_nulls(arr: pa.Array, items: _Items, index: int) -> tuple[_Items, _Layer]:
    valid = _valid(arr)
    layer = _Layer(ITEM)
    if valid is None or len(items.pos) == 0 or len(arr) == 0:
        return items, layer
    live = items.dead < 0
    hit = live & ~valid[np.where(live, items.pos, 0)]
    if hit.any():
        layer.has_null = True
        dead = items.dead.copy()
        dead[hit] = 2 * index + NULL
        items = _Items(items.pos, items.start_depth, dead)
    return items, layer


def _expand_list(arr: pa.Array, items: _Items, index: int, depth: int,
                 ) -> tuple[_Items, _Layer]:
    layer = _Layer(LIST)
    if len(arr) == 0:  # every item stopped above this list
        return items, layer
    offsets = np.asarray(arr.offsets).astype(np.int64)
    valid = _valid(arr)
    live = items.dead < 0
    at = np.where(live, items.pos, 0)
    starts = offsets[at]
    lengths = offsets[at + 1] - starts
    dead = items.dead.copy()
    if valid is not None:
        null = live & ~valid[at]
        if null.any():
            layer.has_null = True
            dead[null] = 2 * index + NULL
            live = live & ~null
    empty = live & (lengths == 0)
    if empty.any():
        layer.has_empty = True
        dead[empty] = 2 * index + EMPTY
        live = live & ~empty
    counts = np.where(live, lengths, 1)
    total = int(counts.sum())
    parent = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    first = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    within = np.arange(total, dtype=np.int64) - first[parent]
    pos = np.where(live[parent], starts[parent] + within, 0)
    start_depth = np.where(within == 0, items.start_depth[parent], depth + 1)
    return _Items(pos, start_depth, dead[parent]), layer


def _kinds(path: list[_Layer]) -> list[pb.RepDefLayer.ValueType]:
    kinds: list[pb.RepDefLayer.ValueType] = []
    for layer in path:
        if layer.kind == ITEM:
            kinds.append(pb.REPDEF_NULLABLE_ITEM if layer.has_null else pb.REPDEF_ALL_VALID_ITEM)
        elif layer.has_null and layer.has_empty:
            kinds.append(pb.REPDEF_NULL_AND_EMPTY_LIST)
        elif layer.has_null:
            kinds.append(pb.REPDEF_NULLABLE_LIST)
        elif layer.has_empty:
            kinds.append(pb.REPDEF_EMPTYABLE_LIST)
        else:
            kinds.append(pb.REPDEF_ALL_VALID_LIST)
    return kinds


def _def_table(path: list[_Layer]) -> tuple[np.ndarray, int]:
    """Definition level of ``2 * layer + reason``, numbering innermost first."""
    table = np.zeros(2 * len(path), dtype=np.int64)
    level = 0
    for i in range(len(path) - 1, -1, -1):
        layer = path[i]
        if layer.has_null:
            level += 1
            table[2 * i + NULL] = level
        if layer.has_empty:
            level += 1
            table[2 * i + EMPTY] = level
    return table, level


def _finish(field: LanceField, arr: pa.Array, items: _Items, path: list[_Layer], lists: int,
            num_rows: int) -> Shredded:
    table, max_def = _def_table(path)
    dead = items.dead
    live = dead < 0
    defs = None
    if max_def:
        defs = np.where(live, 0, table[np.where(live, 0, dead)]).astype(np.uint16)
    rep = None
    if lists:
        rep = (lists - items.start_depth).astype(np.uint16)
    # Items stopped below the innermost list keep a value slot.
    last_list = max((i for i, layer in enumerate(path) if layer.kind == LIST), default=-1)
    visible = None
    values = arr
    if last_list >= 0:
        visible = live | (dead >= 2 * (last_list + 1))
        slot_pos = items.pos[visible]
        slot_live = live[visible]
        if len(slot_pos) == len(arr) and slot_live.all() and (
                len(slot_pos) == 0 or np.array_equal(slot_pos, np.arange(len(arr)))):
            values = arr
        else:
            idx = pa.array(slot_pos, type=pa.int64(), mask=~slot_live)
            values = arr.take(idx)
        if visible.all():
            visible = None
    kinds = _kinds(path)
    kinds.reverse()
    return Shredded(field, kinds, rep, defs, values, visible, num_rows, lists, max_def)


__all__ = ["Shredded", "shred", "storage_of"]

"""Repetition / definition levels of 2.1+ pages, turned into Arrow structure (vectorised).

A leaf column of a nested field stores one entry ("item") per value, null, empty list or null
list. ``layers`` lists the nesting levels innermost first (the leaf, then each struct or list
around it up to the top-level field). Definition levels number the ways an item can be
missing, innermost first: a nullable item/struct layer takes one level, a list layer that has
nulls or empties one, a list with both two (null first). Level 0 means "valid everywhere". A
repetition level ``r > 0`` starts a new list at the ``r`` innermost list layers (so ``r`` equal
to the number of list layers starts a new row).

:func:`unravel` turns the levels of some whole rows into, for every layer, the validity of its
slots and (for lists) the length of each list, plus a mask of the items that carry a value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import CorruptFileError, UnsupportedFeatureError

ALL_VALID_ITEM = pb.REPDEF_ALL_VALID_ITEM
ALL_VALID_LIST = pb.REPDEF_ALL_VALID_LIST
NULLABLE_ITEM = pb.REPDEF_NULLABLE_ITEM
NULLABLE_LIST = pb.REPDEF_NULLABLE_LIST
EMPTYABLE_LIST = pb.REPDEF_EMPTYABLE_LIST
NULL_AND_EMPTY_LIST = pb.REPDEF_NULL_AND_EMPTY_LIST
LIST_LAYERS = (ALL_VALID_LIST, NULLABLE_LIST, EMPTYABLE_LIST, NULL_AND_EMPTY_LIST)


@dataclass
class Layer:
    """One decoded nesting level: slot validity (None = all valid) and list lengths."""

    valid: np.ndarray | None
    lengths: np.ndarray | None  # list layers only
    size: int  # number of slots


@dataclass
class LevelPlan:
    """Precomputed meaning of the levels for a list of layers."""

    layers: list[int]
    null_level: list[int]  # 0 = none
    empty_level: list[int]
    below: list[int]  # max def level of the layers strictly inside layer i
    own_max: list[int]  # max def level of layers 0..i
    rep_index: list[int]  # for list layers: its repetition level; else lists inside it
    scope_max: list[int]  # items deeper than this are hidden from layer i (-1 = none hidden)
    max_rep: int
    max_def: int

    @property
    def visible_max(self) -> int:
        """Items with a definition level above this carry no value slot (-1: all do)."""
        return self.scope_max[0]


def plan_levels(layers: Sequence[int]) -> LevelPlan:
    """Work out which definition/repetition levels belong to which layer (remembered per
    layer list: every page of a column has the same; treat the result as read-only)."""
    return _plan_levels(tuple(layers))


@lru_cache(maxsize=1024)
def _plan_levels(layers: tuple[int, ...]) -> LevelPlan:
    if not layers:
        raise CorruptFileError("a page has no rep/def layers")
    null_l, empty_l, below, own = [], [], [], []
    reps, level, lists = [], 0, 0
    for layer in layers:
        below.append(level)
        nl = el = 0
        if layer in (NULLABLE_ITEM, NULLABLE_LIST):
            level += 1
            nl = level
        elif layer == EMPTYABLE_LIST:
            level += 1
            el = level
        elif layer == NULL_AND_EMPTY_LIST:
            nl, el = level + 1, level + 2
            level += 2
        elif layer not in (ALL_VALID_ITEM, ALL_VALID_LIST):
            raise UnsupportedFeatureError(f"rep/def layer {layer} is not supported")
        if layer in LIST_LAYERS:
            lists += 1
            reps.append(lists)
        else:
            reps.append(lists)
        null_l.append(nl)
        empty_l.append(el)
        own.append(level)
    scope = []
    for i in range(len(layers)):
        outer = next((j for j in range(i + 1, len(layers)) if layers[j] in LIST_LAYERS), None)
        scope.append(-1 if outer is None else below[outer])
    return LevelPlan(list(layers), null_l, empty_l, below, own, reps, scope, lists, level)


def row_starts(rep: np.ndarray | None, plan: LevelPlan, n_items: int) -> np.ndarray:
    """Indices of the items that start a row."""
    if rep is None or plan.max_rep == 0:
        return np.arange(n_items, dtype=np.int64)
    return np.flatnonzero(rep == plan.max_rep)


def visible_mask(defs: np.ndarray | None, plan: LevelPlan) -> np.ndarray | None:
    """Which items carry a value slot (None: all of them)."""
    if defs is None or plan.visible_max < 0:
        return None
    return defs <= plan.visible_max


def unravel(rep: np.ndarray | None, defs: np.ndarray | None, plan: LevelPlan,
            n_items: int) -> list[Layer]:
    """Validity and list lengths of every layer (innermost first) for whole rows of items."""
    if (rep is not None and len(rep) != n_items) or (defs is not None and len(defs) != n_items):
        raise CorruptFileError("repetition/definition levels disagree with the item count")
    if plan.max_rep and rep is None:
        raise CorruptFileError("a list column has no repetition levels")
    if defs is not None and len(defs) and int(defs.max()) > plan.max_def:
        raise CorruptFileError("definition level above the deepest layer")
    if rep is not None and len(rep) and int(rep.max()) > plan.max_rep:
        raise CorruptFileError("repetition level above the number of list layers")
    if n_items and plan.max_rep and rep is not None and rep[0] != plan.max_rep:
        raise CorruptFileError("levels do not start at a row boundary")
    d = defs
    out: list[Layer] = []
    slot_masks: list[np.ndarray | None] = []
    for i, layer in enumerate(plan.layers):
        is_list = layer in LIST_LAYERS
        need_rep = plan.rep_index[i]
        mask = None
        if rep is not None and need_rep > 0:
            mask = rep >= need_rep
        if d is not None and plan.scope_max[i] >= 0:
            vis = d <= plan.scope_max[i]
            mask = vis if mask is None else mask & vis
        slot_masks.append(mask)
        size = n_items if mask is None else int(np.count_nonzero(mask))
        valid = None
        if d is not None and layer not in (ALL_VALID_ITEM, ALL_VALID_LIST):
            ds = d if mask is None else d[mask]
            ok = ds <= plan.below[i]
            if plan.empty_level[i]:
                ok |= ds == plan.empty_level[i]
            valid = None if ok.all() else ok
        lengths = None
        if is_list:
            child = slot_masks[i - 1] if i > 0 else None
            if i == 0:
                raise CorruptFileError("a list layer cannot be the innermost layer")
            child_count = (np.ones(n_items, dtype=np.int64) if child is None
                           else child.astype(np.int64))
            cum = np.concatenate(([0], np.cumsum(child_count)))
            pos = np.arange(n_items) if mask is None else np.flatnonzero(mask)
            bounds = np.concatenate((cum[pos], [cum[-1]]))
            lengths = np.diff(bounds)
        out.append(Layer(valid, lengths, size))
    return out


__all__ = ["Layer", "LevelPlan", "plan_levels", "row_starts", "unravel", "visible_mask"]

"""Where the rows of rewritten fragments went: old row address -> new row address.

A compaction writes the live rows of each group of old fragments, in order, into the group's
new fragments, in order. So the ``k``-th live row of a group (counting through its old
fragments) is the ``k``-th row of the new fragments; deleted rows go nowhere. The map is kept
as that arithmetic (one entry per old fragment), never as a table of every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from alance._proto import table_pb2
from alance.dataset.fragments.read import ReadContext

Fragment = table_pb2.DataFragment
Group = tuple[Sequence[Fragment], Sequence[Fragment]]
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


@dataclass(frozen=True)
class _Move:
    """One old fragment's rows: its deleted offsets, the group rank of its first row, and
    the group's new fragments (ids and the rank each starts at)."""

    physical_rows: int
    deleted: np.ndarray            # sorted offsets (int64)
    first_rank: int
    new_ids: np.ndarray            # uint64
    new_starts: np.ndarray         # int64, ascending, new_starts[0] == 0


@dataclass(frozen=True)
class RowRemap:
    """The row-address map of one rewrite (every group)."""

    moves: dict[int, _Move]

    @property
    def old_fragment_ids(self) -> set[int]:
        """The fragments the rewrite replaced."""
        return set(self.moves)

    def apply(self, addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(new addresses, kept)``: where each address went, and whether its row still
        exists (``False`` for deleted rows; their new address is meaningless). Addresses
        outside the rewritten fragments are unchanged."""
        addrs = np.asarray(addresses, dtype=np.uint64)
        out = addrs.copy()
        kept = np.ones(len(addrs), dtype=bool)
        if not len(addrs):
            return out, kept
        frags = addrs >> _SHIFT
        for frag in np.unique(frags).tolist():
            move = self.moves.get(int(frag))
            if move is None:
                continue
            sel = np.flatnonzero(frags == np.uint64(frag))
            offsets = (addrs[sel] & _LOW).astype(np.int64)
            pos = np.searchsorted(move.deleted, offsets)
            hit = pos < len(move.deleted)
            gone = np.zeros(len(offsets), dtype=bool)
            gone[hit] = move.deleted[pos[hit]] == offsets[hit]
            gone |= offsets >= move.physical_rows
            rank = move.first_rank + offsets - pos
            which = np.clip(np.searchsorted(move.new_starts, rank, side="right") - 1, 0,
                            len(move.new_ids) - 1)
            new = (move.new_ids[which] << _SHIFT) | (
                rank - move.new_starts[which]).astype(np.uint64)
            out[sel] = np.where(gone, np.uint64(0), new)
            kept[sel] = ~gone
        return out, kept


async def row_remap(ctx: ReadContext, groups: Sequence[Group]) -> RowRemap:
    """The map of a rewrite of ``groups`` (old fragments as in ``ctx``'s version, new
    fragments with their ids assigned)."""
    moves: dict[int, _Move] = {}
    for old, new in groups:
        new_ids = np.asarray([int(f.id) for f in new], dtype=np.uint64)
        sizes = np.asarray([int(f.physical_rows) for f in new], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        rank = 0
        for frag in old:
            deleted = await ctx.deleted_offsets(frag)
            dels = (np.zeros(0, dtype=np.int64) if deleted is None
                    else np.unique(np.asarray(deleted, dtype=np.int64)))
            moves[int(frag.id)] = _Move(int(frag.physical_rows), dels, rank,
                                        new_ids if len(new_ids) else np.zeros(1, np.uint64),
                                        starts if len(starts) else np.zeros(1, np.int64))
            rank += int(frag.physical_rows) - int(np.count_nonzero(
                dels < int(frag.physical_rows)))
    return RowRemap(moves)

"""Reading selected rows of a 2.0 page by arithmetic, fetching only the bytes they occupy.

A 2.0 page's plain encodings place row ``r`` at a computable spot: ``flat`` values of ``w``
bytes at ``r * w``, validity bits in byte ``r // 8``, fixed-size list items at
``r * dim .. (r + 1) * dim`` of the item buffer, and ``binary`` values between two end
offsets (``r - 1`` and ``r``) that are themselves flat 64-bit values. So a take of ``k`` rows
reads at most two small ranges per row and leaf (offsets, then bytes) instead of whole pages.

:func:`supported` says whether a page's encoding tree is made only of such encodings
(compressed buffers, dictionaries and packed structs are not: their pages are read whole).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from alance._proto import encodings_v2_0_pb2 as pb
from alance.errors import CorruptFileError
from alance.format.legacy.plan import JoinedRanges, Plan, merge_runs
from alance.format.v2.blocks import Block, Fixed, Variable
from alance.format.v2.kernels import fixed_at, gather_ranges, range_indices

Buffers = Sequence[tuple[int, int]]  # (file position, size) of each page buffer
#: Page-local rows, sorted and unique: an array, or a ``range`` (step 1) for a run of rows,
#: which range scans ask for and which is never materialised as an index per row.
Rows = np.ndarray | range


def supported(enc: pb.ArrayEncoding) -> bool:
    """Whether every node of ``enc`` can be read row by row (see the module docstring)."""
    which = enc.WhichOneof("array_encoding")
    if which == "nullable":
        kind = enc.nullable.WhichOneof("nullability")
        if kind == "no_nulls":
            return supported(enc.nullable.no_nulls.values)
        if kind == "some_nulls":
            v = enc.nullable.some_nulls.validity
            return (_plain_flat(v) and v.flat.bits_per_value == 1
                    and supported(enc.nullable.some_nulls.values))
        return False
    if which == "flat":
        return _plain_flat(enc) and enc.flat.bits_per_value % 8 == 0
    if which == "fixed_size_list":
        return supported(enc.fixed_size_list.items)
    if which == "binary":
        return _fixed_bytes(enc.binary.indices) == 8 and _fixed_bytes(enc.binary.bytes) == 1
    return which == "constant"


def _plain_flat(enc: pb.ArrayEncoding) -> bool:
    return (enc.WhichOneof("array_encoding") == "flat" and enc.flat.buffer.buffer_type ==
            pb.Buffer.page and not (enc.flat.HasField("compression")
                                    and enc.flat.compression.scheme))


def _fixed_bytes(enc: pb.ArrayEncoding) -> int:
    """Bytes per value of a plain flat encoding (possibly wrapped as never null), else 0."""
    which = enc.WhichOneof("array_encoding")
    if which == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        return _fixed_bytes(enc.nullable.no_nulls.values)
    if _plain_flat(enc) and enc.flat.bits_per_value % 8 == 0:
        return int(enc.flat.bits_per_value) // 8
    return 0


def runs(rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``rows`` as runs of consecutive values: ``(first, end)`` per run."""
    if isinstance(rows, range):
        return (np.array([rows.start], np.int64), np.array([rows.stop], np.int64)) if len(
            rows) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if len(rows) == 0:
        return rows[:0], rows[:0]
    if int(rows[-1]) - int(rows[0]) == len(rows) - 1:  # sorted and unique: one run (scans)
        return rows[:1], rows[-1:] + 1
    brk = np.flatnonzero(np.diff(rows) != 1) + 1
    first = rows[np.concatenate(([0], brk))]
    last = rows[np.concatenate((brk - 1, [len(rows) - 1]))]
    return first, last + 1


def _joined(parts: Sequence[bytes | memoryview]) -> np.ndarray:
    if len(parts) == 1:
        return np.frombuffer(parts[0], np.uint8)
    return np.frombuffer(b"".join(parts), np.uint8)


def _buffer(bufs: Buffers, ref: pb.Buffer) -> tuple[int, int]:
    if ref.buffer_index >= len(bufs):
        raise CorruptFileError("2.0 encoding names a missing page buffer")
    return bufs[ref.buffer_index]


def _fixed_rows(buf: tuple[int, int], width: int, rows: Rows, gap: int,
                ) -> Plan[np.ndarray]:
    """The ``width`` bytes of each of ``rows`` of a plain buffer, back to back: one range per
    run of rows, runs closer than ``gap`` bytes read as one and the rows picked out."""
    pos, size = buf
    first, end = runs(rows)
    if len(end) and int(end[-1]) * width > size:
        raise CorruptFileError("2.0 page buffer is shorter than its rows")
    if width == 0:  # (zero-width values occupy no bytes)
        return np.zeros(0, np.uint8)
    ranges, at = merge_runs(pos + first * width, pos + end * width, gap)
    data = _joined((yield JoinedRanges(ranges))) if ranges else np.zeros(0, np.uint8)
    if len(ranges) == len(first):  # nothing merged: exactly the rows' bytes, in order
        return data
    assert isinstance(rows, np.ndarray)  # (a range is one run)
    run_of_row = np.repeat(np.arange(len(first)), end - first)
    return fixed_at(data, at[run_of_row] + (rows - first[run_of_row]) * width, width)


def _flat_values(enc: pb.ArrayEncoding) -> pb.Flat | None:
    """The plain flat encoding of whole bytes under ``enc`` (possibly wrapped as never null),
    else None."""
    if (enc.WhichOneof("array_encoding") == "nullable"
            and enc.nullable.WhichOneof("nullability") == "no_nulls"):
        return _flat_values(enc.nullable.no_nulls.values)
    return enc.flat if _fixed_bytes(enc) else None


def _is_run(rows: Rows) -> bool:
    n = len(rows)
    return isinstance(rows, range) or (n > 0 and int(rows[-1]) - int(rows[0]) == n - 1)


def read_rows(enc: pb.ArrayEncoding, bufs: Buffers, rows: Rows, gap: int = 0,
              ) -> Plan[tuple[Block, np.ndarray | None]]:
    """The values of page-local ``rows`` (sorted, unique) and their validity (None: all
    valid). ``enc`` must be :func:`supported`. Byte ranges at most ``gap`` bytes apart are
    read as one (a dense take then reads a few long ranges, not one or two per row)."""
    which = enc.WhichOneof("array_encoding")
    n = len(rows)
    if isinstance(rows, range) and not n:
        rows = np.zeros(0, np.int64)
    if which == "nullable":
        kind = enc.nullable.WhichOneof("nullability")
        if kind == "no_nulls":
            block, _ = yield from read_rows(enc.nullable.no_nulls.values, bufs, rows, gap)
            return block, None
        some = enc.nullable.some_nulls
        pos, size = _buffer(bufs, some.validity.flat.buffer)
        # The bitmap bytes of each run of rows (neighbours may share a byte).
        first, end = runs(rows)
        b_first, b_end = first >> 3, ((end - 1) >> 3) + 1
        if len(b_end) and int(b_end[-1]) > size:
            raise CorruptFileError("2.0 validity buffer is shorter than its rows")
        ranges, run_at = merge_runs(pos + b_first, pos + b_end, gap)
        bits = _joined((yield JoinedRanges(ranges))) if ranges else np.zeros(0, np.uint8)
        if isinstance(rows, range):  # one run: its bits, from the first row's bit on
            skip = rows.start & 7
            valid = np.unpackbits(bits, bitorder="little")[skip:skip + n].astype(bool)
            block, _ = yield from read_rows(some.values, bufs, rows, gap)
            return block, valid
        run_of_row = np.repeat(np.arange(len(first)), end - first)
        at = run_at[run_of_row] + (rows >> 3) - b_first[run_of_row]
        valid = ((bits[at] >> (rows & 7).astype(np.uint8)) & 1).astype(bool)
        block, _ = yield from read_rows(some.values, bufs, rows, gap)
        return block, valid
    if which == "flat":
        width = int(enc.flat.bits_per_value) // 8
        raw = yield from _fixed_rows(_buffer(bufs, enc.flat.buffer), width, rows, gap)
        return Fixed.from_bytes(raw, width * 8, n), None
    if which == "fixed_size_list":
        dim = int(enc.fixed_size_list.dimension)
        items_enc = enc.fixed_size_list.items
        if n and _is_run(rows):  # one run of rows: one run of items
            flat = _flat_values(items_enc)
            if flat is not None:  # one byte range, without an index per item
                width = int(flat.bits_per_value) // 8
                lo_item, hi_item = int(rows[0]) * dim, (int(rows[0]) + n) * dim
                at, size = _buffer(bufs, flat.buffer)
                if hi_item * width > size:
                    raise CorruptFileError("2.0 page buffer is shorter than its rows")
                items_bytes = _joined((yield [(at + lo_item * width, at + hi_item * width)]))
                return Fixed(items_bytes.reshape(n, dim * width), dim * width * 8), None
            item_rows: Rows = range(int(rows[0]) * dim, (int(rows[-1]) + 1) * dim)
        else:
            flat = _flat_values(items_enc)
            if flat is not None:  # each row's items are one run of bytes: a row of dim items
                width = int(flat.bits_per_value) // 8 * dim
                at, size = _buffer(bufs, flat.buffer)
                raw = yield from _fixed_rows((at, size), width, rows, gap)
                return Fixed(raw.reshape(n, width), width * 8), None
            assert isinstance(rows, np.ndarray)  # (a range is one run)
            item_rows = (rows[:, None] * dim + np.arange(dim)).reshape(-1)
        items, items_valid = yield from read_rows(items_enc, bufs, item_rows, gap)
        if not isinstance(items, Fixed) or items.bits % 8:
            raise CorruptFileError("2.0 fixed-size list items are not whole bytes")
        width = items.bits // 8 * dim
        item_valid = (None if items_valid is None or items_valid.all()
                      else items_valid.reshape(n, dim))
        return Fixed(items.as_bytes().reshape(n, width), width * 8, item_valid), None
    if which == "binary":
        return (yield from _binary_rows(enc.binary, bufs, rows, gap))
    if which == "constant":
        value = np.frombuffer(enc.constant.value, np.uint8)
        return Fixed.from_bytes(np.tile(value, n), len(value) * 8, n), None
    raise CorruptFileError(f"2.0 encoding {which!r} cannot be read by row")


def _binary_rows(enc: pb.Binary, bufs: Buffers, rows: Rows, gap: int,
                 ) -> Plan[tuple[Block, np.ndarray | None]]:
    # Row r spans [end(r - 1), end(r)): fetch both ends (row -1 ends at 0). Runs of rows
    # are maximal, so extending each run back by one row keeps them sorted and disjoint.
    if len(rows) and _is_run(rows):
        return (yield from _binary_run(enc, bufs, int(rows[0]), len(rows)))
    rows = np.asarray(rows, np.int64)  # (an empty range)
    first, end = runs(rows)
    lo = np.maximum(first - 1, 0)
    need = range_indices(lo, end - lo)
    ends_block, _ = yield from read_rows(enc.indices, bufs, need, gap)
    if not isinstance(ends_block, Fixed) or ends_block.bits != 64:
        raise CorruptFileError("2.0 binary offsets are not 64-bit")
    ends = ends_block.values.astype(np.int64)
    adj = int(enc.null_adjustment)
    is_null = ends >= adj if adj else np.zeros(len(ends), bool)
    ends = np.where(is_null, ends - adj, ends)
    at = np.searchsorted(need, rows)
    stop = ends[at]
    start = np.where(rows > 0, ends[np.maximum(at - 1, 0)], 0)
    null = is_null[at]
    pos, size = _value_bytes(enc, bufs)
    if len(rows) and ((stop < start).any() or int(stop.max()) > size or start.min() < 0):
        raise CorruptFileError("2.0 binary offsets are inconsistent")
    lens = stop - start
    # One range per run of values that lie back to back (consecutive rows do).
    brk = np.flatnonzero(start[1:] != stop[:-1]) + 1
    r_start = start[np.concatenate(([0], brk))] if len(rows) else start
    r_stop = stop[np.concatenate((brk - 1, [len(rows) - 1]))] if len(rows) else stop
    keep = r_stop > r_start
    # Runs closer than ``gap`` are read as one range; the values are then picked out.
    ranges, at = merge_runs(pos + r_start[keep], pos + r_stop[keep], gap)
    data = _joined((yield JoinedRanges(ranges))) if ranges else np.zeros(0, np.uint8)
    if len(ranges) < len(at):
        run_of_row = np.zeros(len(rows), np.int64)
        run_of_row[brk] = 1
        run_of_row = np.cumsum(run_of_row)
        kept = np.maximum(np.cumsum(keep) - 1, 0)[run_of_row]
        value_at = np.where(lens > 0, at[kept] + start - r_start[run_of_row], 0)
        data = gather_ranges(data, value_at, lens)
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    return Variable(offsets, data), (~null if null.any() else None)


def _value_bytes(enc: pb.Binary, bufs: Buffers) -> tuple[int, int]:
    """Where the value bytes of a 2.0 binary page lie: (position, size)."""
    return _buffer(bufs, enc.bytes.nullable.no_nulls.values.flat.buffer
                   if enc.bytes.WhichOneof("array_encoding") == "nullable"
                   else enc.bytes.flat.buffer)


def _binary_run(enc: pb.Binary, bufs: Buffers, first: int, n: int,
                ) -> Plan[tuple[Block, np.ndarray | None]]:
    """:func:`_binary_rows` for the ``n`` consecutive rows from ``first`` (what range scans
    ask for): their values lie back to back, one byte range."""
    lo = max(first - 1, 0)
    ends_block, _ = yield from read_rows(enc.indices, bufs, range(lo, first + n))
    if not isinstance(ends_block, Fixed) or ends_block.bits != 64:
        raise CorruptFileError("2.0 binary offsets are not 64-bit")
    ends = ends_block.values.astype(np.int64)
    adj = int(enc.null_adjustment)
    null = None
    if adj:
        is_null = ends >= adj
        if is_null.any():
            ends = np.where(is_null, ends - adj, ends)
            null = is_null[first - lo:]
    stop = ends[first - lo:]
    start = int(ends[0]) if first > 0 else 0
    pos, size = _value_bytes(enc, bufs)
    if start < 0 or int(stop[0]) < start or int(stop[-1]) > size or (np.diff(stop) < 0).any():
        raise CorruptFileError("2.0 binary offsets are inconsistent")
    end = int(stop[-1])
    got = yield ([(pos + start, pos + end)] if end > start else [])
    data = _joined(got) if end > start else np.zeros(0, np.uint8)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    np.subtract(stop, start, out=offsets[1:])
    return Variable(offsets, data), (~null if null is not None and null.any() else None)


__all__ = ["read_rows", "runs", "supported"]

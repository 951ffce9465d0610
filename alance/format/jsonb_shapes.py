"""JSONB to JSON text for values that share shapes: one row of columns per shape.

The values of a JSON column mostly repeat a few *shapes*: the same keys, in the same order,
holding items of the same types, and arrays of the same lengths. Values of one shape print
as the same fixed pieces (``{"id":``, ``,"name":"``, ``"}``...) around one item text each,
so a shape's texts come from one Arrow ``binary_join_element_wise`` over those columns,
with no per-token layout.

The containers at one position of a shape are read as a matrix: every row has the same
header, so its JEntries lie at the same offsets (one gather of ``(rows, entries)`` words) and
item offsets are one running sum along the rows. Rows are grouped by their header, then by
their JEntry types and object keys (Arrow's hash-based ``dictionary_encode`` over the bytes
that fix them). Container items are printed the same way, one level down, column by column.

What this path leaves to the generic column kernel (:func:`alance.format.jsonb_bulk.
bulk_text`): top-level scalars, containers whose shape fewer than :data:`MIN_SHAPE_ROWS`
rows share, and damaged containers (which that kernel sends on to the per-value printer).
Strings needing an escape and numbers beyond the kernels are marked for the per-value
printer, as the generic kernel marks them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.format.jsonb import MAX_DEPTH
from alance.format.jsonb_bulk import (
    ARRAY,
    CONTAINER,
    FALSE,
    NULL,
    NUMBER,
    OBJECT,
    STRING,
    TRUE,
    bulk_text,
    double_texts,
    leaf_texts,
    needs_escape,
    ranges_binary,
    u32_be,
)
from alance.format.v2.kernels import fixed_at

__all__ = ["MAX_SHAPE_ITEMS", "MIN_SHAPE_ROWS", "shaped_text"]

#: A shape needs at least this many rows at one position to be printed by its columns (each
#: column costs a few fixed Arrow and numpy calls); rows of rarer shapes go, together,
#: through the generic column kernel.
MIN_SHAPE_ROWS = 128
#: Containers of more items or keys than this go through the generic kernel (one column per
#: item would cost more than it saves).
MAX_SHAPE_ITEMS = 32

_CONST = {NULL: "null", FALSE: "false", TRUE: "true"}
_LSTR = pa.large_string()


def shaped_text(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                ) -> tuple[pa.Array, np.ndarray]:
    """JSON text of the JSONB values ``data[starts[i]:ends[i]]`` and which of them must be
    printed one by one (as :func:`alance.format.jsonb_bulk.bulk_text`)."""
    n = len(starts)
    slow = np.zeros(n, dtype=bool)
    text = _texts(data, starts.astype(np.int64), ends.astype(np.int64), np.arange(n), slow, 0)
    return text, slow


def _texts(data: np.ndarray, s: np.ndarray, e: np.ndarray, value: np.ndarray,
           slow: np.ndarray, depth: int) -> pa.Array:
    """Texts of the containers ``data[s:e]`` (top-level values ``value``; ``depth`` levels
    down), in their order."""
    n = len(s)
    if depth > MAX_DEPTH:  # (as deep as the per-value printer goes)
        slow[value] = True
        return _repeat("", n)
    short = e - s < 4
    head = u32_be(data, np.where(short, 0, s))
    kind = head & np.uint32(0xE0000000)
    count = (head & np.uint32(0x1FFFFFFF)).astype(np.int64)
    entries = np.where(kind == OBJECT, 2 * count, count)
    plain = ~short & ((kind == ARRAY) | (kind == OBJECT)) & (s + 4 + 4 * entries <= e)
    if depth:
        # (a nested scalar header or a damaged container: the per-value printer decides)
        slow[value[~plain]] = True
        rest = np.zeros(0, np.int64)
    else:
        rest = np.flatnonzero(~plain)  # top-level scalars, and damage: the generic kernel
    out: list[pa.Array] = []
    rows_of: list[np.ndarray] = []
    if depth:
        bad = np.flatnonzero(~plain)
        if len(bad):
            out.append(pa.array([""] * len(bad), _LSTR))
            rows_of.append(bad)
    codes, n_heads = _group(head[plain].view(np.uint8).reshape(-1, 4))
    plain_rows = np.flatnonzero(plain)
    rare: list[np.ndarray] = [rest]
    for rows in _members(codes, n_heads):
        rows = plain_rows[rows]
        k = int(kind[rows[0]])
        c = int(count[rows[0]])
        if len(rows) < MIN_SHAPE_ROWS or c > MAX_SHAPE_ITEMS:
            rare.append(rows)
            continue
        if c == 0:
            out.append(_repeat("{}" if k == OBJECT else "[]", len(rows)))
            rows_of.append(rows)
            continue
        for sub, text in _shapes(data, s[rows], e[rows], value[rows], slow, depth,
                                 k == OBJECT, c, rare, rows):
            out.append(text)
            rows_of.append(sub)
    odd = np.concatenate(rare)
    if len(odd):
        text, odd_slow = bulk_text(data, s[odd], e[odd], depth)
        slow[value[odd[odd_slow]]] = True
        out.append(text)
        rows_of.append(odd)
    return _in_order(out, rows_of, n)


def _shapes(data: np.ndarray, s: np.ndarray, e: np.ndarray, value: np.ndarray,
            slow: np.ndarray, depth: int, is_obj: bool, count: int,
            rare: list[np.ndarray], rows: np.ndarray) -> list[tuple[np.ndarray, pa.Array]]:
    """The texts of containers of one header (``count`` items or keys), by shape: pairs of
    rows (indices into ``rows``' owner) and their texts. Rows of rare shapes go to
    ``rare``."""
    m = 2 * count if is_obj else count
    n = len(s)
    # (entries by column: item j of every container is one contiguous row)
    table = _u32_be_columns(data, s + 4, m)
    typ = (table >> np.uint32(28)).astype(np.uint8) & np.uint8(7)
    length = (table & np.uint32(0x0FFFFFFF)).astype(np.int64)
    damaged = (table >= np.uint32(0x80000000)).any(axis=0) | (typ > CONTAINER).any(axis=0)
    # what fixes the printing: item types, and (objects) the key JEntries and key bytes
    sig = np.empty((n, 5 * count if is_obj else count), np.uint8)
    if is_obj:
        damaged |= (typ[:count] != STRING).any(axis=0)
        sig[:, :count] = typ[count:].T
        sig[:, count:] = table[:count].T.astype("<u4", order="C").view(np.uint8)
    else:
        sig[:] = typ.T
    stop = np.cumsum(length, axis=0)
    stop += s + 4 + 4 * m
    damaged |= stop[-1] > e
    result: list[tuple[np.ndarray, pa.Array]] = []
    if damaged.any():  # (the generic kernel sends these to the per-value printer)
        rare.append(rows[damaged])
        keep = np.flatnonzero(~damaged)
        if not len(keep):
            return result
        value, typ, length, stop, rows, sig = (value[keep], typ[:, keep], length[:, keep],
                                               stop[:, keep], rows[keep], sig[keep])
    start = stop - length
    codes, n_groups = _group(sig)
    for members in _members(codes, n_groups):
        if is_obj:
            first = members[0]
            width = int(stop[count - 1, first] - start[0, first])
            key_bytes = (fixed_at(data, start[0, members], width).reshape(len(members), width)
                         if width else np.zeros((len(members), 0), np.uint8))
            groups = [members[g] for g in _members(*_group(key_bytes))]
        else:
            groups = [members]
        for grp in groups:
            if len(grp) < MIN_SHAPE_ROWS:
                rare.append(rows[grp])
                continue
            result.append((rows[grp], _shape_text(data, start[:, grp], stop[:, grp],
                                                  typ[:, grp[0]], value[grp], slow, depth,
                                                  is_obj, count)))
    return result


def _shape_text(data: np.ndarray, start: np.ndarray, stop: np.ndarray, typ: np.ndarray,
                value: np.ndarray, slow: np.ndarray, depth: int, is_obj: bool,
                count: int) -> pa.Array:
    """The texts of containers of one shape: items ``[start, stop)`` (a matrix, one row per
    item, one column per container), item types ``typ``."""
    n = start.shape[1]
    keys: list[str] = []
    if is_obj:
        raw = ranges_binary(data, start[:count, 0], stop[:count, 0])
        if needs_escape(raw).any():
            slow[value] = True
            return _repeat("", n)
        try:
            keys = raw.cast(_LSTR).to_pylist()
        except pa.ArrowInvalid:  # not UTF-8: the per-value printer raises
            slow[value] = True
            return _repeat("", n)
    first = count if is_obj else 0
    cols = range(first, first + count)
    pieces: list[str | pa.Array] = ["{" if is_obj else "["]
    for i, j in enumerate(cols):
        lead = ("," if i else "") + (f'"{keys[i]}":' if is_obj else "")
        t = int(typ[j])
        if t in _CONST:
            pieces.append(lead + _CONST[t])
        elif t == NUMBER:
            pieces += [lead, _number_texts(data, start[j], stop[j], value, slow)]
        elif t == STRING:
            raw = ranges_binary(data, start[j], stop[j])
            slow[value[needs_escape(raw)]] = True
            try:
                pieces += [lead + '"', raw.cast(_LSTR), '"']
            except pa.ArrowInvalid:  # not UTF-8: the per-value printer raises
                slow[value] = True
                return _repeat("", n)
        else:
            pieces += [lead, _texts(data, start[j], stop[j], value, slow, depth + 1)]
    pieces.append("}" if is_obj else "]")
    return _join(pieces, n)


def _number_texts(data: np.ndarray, start: np.ndarray, stop: np.ndarray, value: np.ndarray,
                  slow: np.ndarray) -> pa.Array:
    """The texts of the numbers ``data[start:stop]``: integers read as one column (each one's
    last 8 bytes, cut to its width), doubles as another."""
    width = stop - start
    tag = data[np.minimum(start, len(data) - 1)]
    is_int = ((tag == 0x40) | (tag == 0x50)) & (
        (width == 2) | (width == 3) | (width == 5) | (width == 9)) & (stop >= 8)
    is_float = (tag == 0x60) & (width == 9)
    zero = (tag == 0x00) & (width == 1)
    if not (is_int | is_float | zero).all():  # (the generic printer marks the others)
        parts, piece = leaf_texts(data, np.full(len(start), NUMBER, np.uint8), start,
                                   stop, value, slow)
        return pa.concat_arrays([p.cast(_LSTR) for p in parts]).take(pa.array(piece))
    vals = np.zeros(len(start), np.int64)
    if is_int.any():
        # (the value's bytes end the 8-byte word that ends with the item, big endian)
        words = fixed_at(data, np.where(is_int, stop - 8, 0), 8).view(">u8").astype(np.uint64)
        cut = (np.uint64(72) - (width.astype(np.uint64) << np.uint64(3))) % np.uint64(64)
        words <<= cut
        unsigned = words >> cut
        signed = words.view(np.int64) >> cut.astype(np.int64)
        vals = np.where(tag == 0x50, unsigned.view(np.int64), signed)
        big = is_int & (tag == 0x50) & (unsigned > np.uint64(2**63 - 1))
        if big.any():  # beyond int64: the per-value printer
            slow[value[big]] = True
    if not is_float.any():
        return pa.array(np.where(is_int, vals, 0)).cast(_LSTR)
    xs = fixed_at(data, np.where(is_float, start + 1, 0), 8).view(">f8").astype(np.float64)
    finite = np.isfinite(xs)
    slow[value[is_float & ~finite]] = True
    xs[~finite] = 0.0
    if is_float.all():
        return double_texts(xs)
    floats = np.flatnonzero(is_float)
    other = np.flatnonzero(~is_float)
    where = np.empty(len(start), np.int64)
    where[floats] = np.arange(len(floats))
    where[other] = len(floats) + np.arange(len(other))
    return pa.concat_arrays([double_texts(xs[floats]),
                             pa.array(np.where(is_int, vals, 0)[other]).cast(_LSTR)]
                            ).take(pa.array(where))


def _join(pieces: list[str | pa.Array], n: int) -> pa.Array:
    """The pieces (fixed texts and columns of ``n`` texts) joined row by row."""
    args: list[pa.Array | pa.Scalar] = []
    text = ""
    for p in pieces:
        if isinstance(p, str):
            text += p
            continue
        if text:
            args.append(pa.scalar(text, _LSTR))
            text = ""
        args.append(p)
    if text:
        args.append(pa.scalar(text, _LSTR))
    if not any(isinstance(a, pa.Array) for a in args):
        return _repeat(text, n)
    return pc.binary_join_element_wise(*args, pa.scalar("", _LSTR))


def _repeat(text: str, n: int) -> pa.Array:
    """``text`` ``n`` times."""
    return pa.array([text], _LSTR).take(pa.array(np.zeros(n, np.int64)))


def _u32_be_columns(data: np.ndarray, at: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` big-endian u32 words from each position ``at``, as an ``(m, len(at))``
    matrix (the words of one position in a column)."""
    words = fixed_at(data, at, 4 * m).view(">u4").reshape(len(at), m)
    return words.T.astype(np.uint32, order="C")


def _group(rows: np.ndarray) -> tuple[np.ndarray, int]:
    """A group number for each row of a ``(k, width)`` byte matrix (equal rows, equal
    numbers; by hashing) and the number of groups."""
    k, width = rows.shape
    if width == 0 or k == 0:
        return np.zeros(k, np.int64), min(k, 1)
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), k, [None, pa.py_buffer(np.ascontiguousarray(rows))])
    encoded = pc.dictionary_encode(fixed)
    return np.asarray(encoded.indices, dtype=np.int64), len(encoded.dictionary)


def _members(codes: np.ndarray, groups: int) -> list[np.ndarray]:
    """The rows of each group number, in row order."""
    if groups == 1:
        return [np.arange(len(codes))]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(groups + 1))
    return [order[bounds[g]: bounds[g + 1]] for g in range(groups)]


def _in_order(texts: list[pa.Array], rows_of: list[np.ndarray], n: int) -> pa.Array:
    """Texts given for sets of rows (together, every row once), as one array in row order."""
    if len(texts) == 1 and len(rows_of[0]) == n and (
            n == 0 or bool((rows_of[0] == np.arange(n)).all())):
        return texts[0].cast(_LSTR)
    if not texts:
        return pa.array([], _LSTR)
    where = np.empty(n, np.int64)
    where[np.concatenate(rows_of)] = np.arange(n)
    return pa.concat_arrays([t.cast(_LSTR) for t in texts]).take(pa.array(where))

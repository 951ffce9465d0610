"""JSONB to JSON text by columns: objects grouped by shape, arrays as lists.

The objects of a JSON column mostly repeat a few *shapes*: the same keys in the same order.
Objects of one shape print as the same fixed pieces (``{"id":``, ``,"name":``, ``}``...)
around one value text each, so their texts come from one Arrow
``binary_join_element_wise`` over value columns, with no per-token layout. The objects at
one position are read as a matrix: objects with one header have their JEntries at the same
offsets (one gather of ``(objects, entries)`` words) and value offsets are running sums down
the entries. They are grouped by header, then by key JEntries, then by key bytes (Arrow's
hash-based ``dictionary_encode`` over the bytes that fix them); a sample first tells whether
most objects of a header share shapes at all. A value column is printed by type: numbers
(integers decoded at once, doubles by Arrow), strings (quotes are fixed pieces), null and
booleans, and containers one level down; a column of several types is printed type by type
and put back in order. Texts travel up as pieces, so each top-level value is joined once.

Arrays need no shapes: the items of all arrays at one position are printed as one column and
each array's items are joined by Arrow's ``binary_join`` over a list array.

Left to the generic column kernel (:func:`alance.format.jsonb_bulk.bulk_text`), all together:
top-level scalars, objects of shapes that fewer than :data:`MIN_SHAPE_ROWS` objects share or
of more than :data:`MAX_SHAPE_ITEMS` keys, and damaged objects (which that kernel hands on to
the per-value printer). Damaged arrays, strings needing an escape and numbers beyond these
kernels are marked for the per-value printer, as the generic kernel marks them.
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
    TEXT_POOL,
    TRUE,
    bulk_text,
    needs_escape,
    number_texts,
    ranges_binary,
    texts_at,
    u32_be,
)
from alance.format.v2.kernels import fixed_at, gather_ranges

__all__ = ["MAX_SHAPE_ITEMS", "MIN_SHAPE_ROWS", "shaped_text"]

#: A shape needs at least this many objects at one position to be printed by its columns
#: (each column costs a few fixed Arrow and numpy calls); objects of rarer shapes go,
#: together, through the generic column kernel.
MIN_SHAPE_ROWS = 2048
#: Objects of more keys than this go through the generic kernel (one column per key would
#: cost more than it saves).
MAX_SHAPE_ITEMS = 32

#: Objects sampled to judge whether the objects of one header mostly share shapes.
SHAPE_SAMPLE = 256

#: Arrays of at most this many items have their entries read as fixed windows.
SHORT_ARRAY = 8

_CONST = {NULL: "null", FALSE: "false", TRUE: "true"}
#: The text of null, false and true by type (strings, numbers and containers never index it).
_CONST_TEXTS = pa.array(["null", "", "", "false", "true", ""], pa.large_string())
_LSTR = pa.large_string()
_COMMA, _NOTHING = (pa.scalar(x, _LSTR) for x in (",", ""))
_QUOTED_COMMA = pa.scalar('","', _LSTR)
_QUOTE_OR_NOT = pa.array(['"', ""], _LSTR)
#: Texts as pieces to join row by row: fixed texts, and columns (one text per row).
Pieces = list[str | pa.Array]
_NONE = np.zeros(0, np.int64)


def shaped_text(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                ) -> tuple[pa.Array, np.ndarray]:
    """JSON text of the JSONB values ``data[starts[i]:ends[i]]`` and which of them must be
    printed one by one (as :func:`alance.format.jsonb_bulk.bulk_text`)."""
    n = len(starts)
    slow = np.zeros(n, dtype=bool)
    pieces = _texts(data, starts.astype(np.int64), ends.astype(np.int64), np.arange(n), slow, 0)
    return _join(pieces, n), slow


def _texts(data: np.ndarray, s: np.ndarray, e: np.ndarray, value: np.ndarray,
           slow: np.ndarray, depth: int) -> Pieces:
    """Texts of the containers ``data[s:e]`` (top-level values ``value``; ``depth`` levels
    down), in their order, as pieces (when every container has one shape, that shape's
    pieces, so that a parent joins them with its own in one pass)."""
    n = len(s)
    if depth > MAX_DEPTH:  # (as deep as the per-value printer goes)
        slow[value] = True
        return [""]
    short = e - s < 4
    head = u32_be(data, np.where(short, 0, s))
    kind = head & np.uint32(0xE0000000)
    count = (head & np.uint32(0x1FFFFFFF)).astype(np.int64)
    entries = np.where(kind == OBJECT, 2 * count, count)
    plain = ~short & ((kind == ARRAY) | (kind == OBJECT)) & (s + 4 + 4 * entries <= e)
    if depth:
        # (a nested scalar header or a damaged container: the per-value printer decides)
        slow[value[~plain]] = True
        rest = _NONE
    else:
        rest = np.flatnonzero(~plain)  # top-level scalars, and damage: the generic kernel
    out: list[Pieces] = []
    rows_of: list[np.ndarray] = []
    if depth:
        bad = np.flatnonzero(~plain)
        if len(bad):
            out.append([""])
            rows_of.append(bad)
    arrays = np.flatnonzero(plain & (kind == ARRAY))
    if len(arrays):
        out.append(_array_texts(data, s[arrays], count[arrays], e[arrays], value[arrays], slow,
                                depth))
        rows_of.append(arrays)
    objects = np.flatnonzero(plain & (kind == OBJECT))
    codes, n_heads = _group(head[objects].view(np.uint8).reshape(-1, 4))
    groups, few = _members(codes, n_heads)
    rare: list[np.ndarray] = [rest, objects[few]]
    for rows in groups:
        rows = objects[rows]
        c = int(count[rows[0]])
        if c > MAX_SHAPE_ITEMS:
            rare.append(rows)
            continue
        if c == 0:
            out.append(["{}"])
            rows_of.append(rows)
            continue
        for sub, pieces in _shapes(data, s[rows], e[rows], value[rows], slow, depth, c, rare,
                                   rows):
            out.append(pieces)
            rows_of.append(sub)
    odd = np.sort(np.concatenate(rare))  # (in data order: the generic kernel slices spans)
    if len(odd):
        text, odd_slow = bulk_text(data, s[odd], e[odd], depth)
        slow[value[odd[odd_slow]]] = True
        out.append([text])
        rows_of.append(odd)
    if len(out) == 1 and len(rows_of[0]) == n:  # (rows are in order within each part)
        return out[0]
    return [_in_order([_join(p, len(r)) for p, r in zip(out, rows_of, strict=True)],
                      rows_of, n)]


def _array_texts(data: np.ndarray, s: np.ndarray, count: np.ndarray, e: np.ndarray,
                 value: np.ndarray, slow: np.ndarray, depth: int) -> Pieces:
    """The texts of the arrays at ``s`` (``count`` items each; their tables checked to lie
    before ``e``): every item of every array printed as one column (by type, containers a
    level down), then each array's items joined (Arrow's ``binary_join`` over a list
    array)."""
    n = len(s)
    total = int(count.sum())
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(count, out=offsets[1:])
    if total == 0:
        return ["[]"]
    most = int(count.max())
    if most <= SHORT_ARRAY and int(s.max()) + 4 + 4 * most <= len(data):
        # (short arrays: a fixed window of entries from each, the real ones kept)
        window = fixed_at(data, s + 4, 4 * most).view(">u4").reshape(n, most)
        table = window[np.arange(most) < count[:, None]].astype(np.uint32)
    else:
        table = gather_ranges(data, s + 4, 4 * count).view(">u4").astype(np.uint32)
    typ = (table >> np.uint32(28)).astype(np.uint8)  # (8 and up: an end-offset JEntry)
    row = np.repeat(np.arange(n), count)
    length = (table & np.uint32(0x0FFFFFFF)).astype(np.int64)
    stop = np.cumsum(length)
    # (each array's items start after its table)
    stop += np.repeat(s + 4 + 4 * count - np.concatenate(([0], stop))[offsets[:-1]], count)
    start = stop - length
    bad = np.zeros(n, dtype=bool)
    bad[row[typ > CONTAINER]] = True
    bad[row[stop > e[row]]] = True
    if bad.any():  # (damaged arrays: the per-value printer raises; nothing of theirs is read)
        slow[value[bad]] = True
        typ[bad[row]] = NULL
    item_value = value[row]
    if (typ == STRING).all():  # (arrays of strings only: quotes come with the commas)
        text = _strings(data, start, stop, item_value, slow)
        joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets), text),
                                _QUOTED_COMMA, memory_pool=TEXT_POOL)
        quote = pc.take(_QUOTE_OR_NOT, pa.array((count == 0).astype(np.int8)),
                        memory_pool=TEXT_POOL)  # (none around no items)
        return ["[", quote, joined, quote, "]"]
    item_text = _join(_values(data, typ, start, stop, item_value, slow, depth), total)
    joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets), item_text),
                            _COMMA, memory_pool=TEXT_POOL)
    return ["[", joined, "]"]


def _values(data: np.ndarray, typ: np.ndarray, start: np.ndarray, stop: np.ndarray,
            value: np.ndarray, slow: np.ndarray, depth: int) -> Pieces:
    """The texts of the items ``data[start:stop]`` of types ``typ`` (one column: of one
    type, or of several, each printed apart and then put back in order)."""
    n = len(typ)
    kinds = np.flatnonzero(np.bincount(typ, minlength=CONTAINER + 1)).tolist()
    if len(kinds) == 1:
        return _values_of(kinds[0], data, start, stop, value, slow, depth)
    if all(k in _CONST for k in kinds):  # (null, false, true: one take)
        return [pc.take(_CONST_TEXTS, pa.array(typ), memory_pool=TEXT_POOL)]
    texts: list[pa.Array] = []
    items: list[np.ndarray] = []
    for k in kinds:
        at = np.flatnonzero(typ == k)
        pieces = _values_of(k, data, start[at], stop[at], value[at], slow, depth)
        texts.append(_join(pieces, len(at)))
        items.append(at)
    return [_in_order(texts, items, n)]


def _values_of(kind: int, data: np.ndarray, start: np.ndarray, stop: np.ndarray,
               value: np.ndarray, slow: np.ndarray, depth: int) -> Pieces:
    """The texts of the items ``data[start:stop]``, all of type ``kind``."""
    if kind in _CONST:
        return [_CONST[kind]]
    if kind == NUMBER:
        return [number_texts(data, start, stop, value, slow)]
    if kind == STRING:
        return ['"', _strings(data, start, stop, value, slow), '"']
    return _texts(data, start, stop, value, slow, depth + 1)


def _strings(data: np.ndarray, start: np.ndarray, stop: np.ndarray, value: np.ndarray,
             slow: np.ndarray) -> pa.Array:
    """The strings ``data[start:stop]`` (unquoted; those needing escapes, and all when one
    is not UTF-8, marked for the per-value printer)."""
    raw = ranges_binary(data, start, stop)
    slow[value[needs_escape(raw)]] = True
    try:
        return raw.cast(_LSTR)
    except pa.ArrowInvalid:  # not UTF-8: the per-value printer raises
        slow[value] = True
        return _repeat("", len(start))


def _shapes(data: np.ndarray, s: np.ndarray, e: np.ndarray, value: np.ndarray,
            slow: np.ndarray, depth: int, count: int,
            rare: list[np.ndarray], rows: np.ndarray) -> list[tuple[np.ndarray, Pieces]]:
    """The texts of objects of ``count`` keys, by shape: pairs of rows (of ``rows``, indices
    into the caller's) and the pieces of their texts. Rows of rare shapes go to ``rare``."""
    m = 2 * count
    result: list[tuple[np.ndarray, Pieces]] = []
    if not _mostly_shared(data, s, count):
        rare.append(rows)
        return result
    # (entries by column: item j of every container is one contiguous row)
    table = _u32_be_columns(data, s + 4, m)
    typ = (table >> np.uint32(28)).astype(np.uint8)  # (8 and up: an end-offset JEntry)
    damaged = (typ > CONTAINER).any(axis=0)
    damaged |= (typ[:count] != STRING).any(axis=0)  # (keys are strings)
    sig = _signature(table, count)
    # item j runs from bounds[j] to bounds[j + 1]: the table's end, then running sums of
    # the lengths (row by row: numpy's running sum down columns is slower)
    bounds = np.empty((m + 1, len(s)), np.int64)
    bounds[0] = s + 4 + 4 * m
    np.bitwise_and(table, np.uint32(0x0FFFFFFF), out=bounds[1:])
    for j in range(1, m + 1):
        bounds[j] += bounds[j - 1]
    damaged |= bounds[m] > e
    if damaged.any():  # (the generic kernel sends these to the per-value printer)
        rare.append(rows[damaged])
        keep = np.flatnonzero(~damaged)
        if not len(keep):
            return result
        value, typ, bounds, rows, sig = (value[keep], typ[:, keep], bounds[:, keep],
                                         rows[keep], sig[keep])
    shapes, few = _members(*_group(sig))
    rare.append(rows[few])
    for members in shapes:
        # (one key JEntry table: keys of the same lengths; their bytes are compared here)
        first = members[0]
        width = int(bounds[count, first] - bounds[0, first])
        key_bytes = (fixed_at(data, bounds[0, members], width).reshape(len(members), width)
                     if width else np.zeros((len(members), 0), np.uint8))
        same_keys, few = _members(*_group(key_bytes))
        rare.append(rows[members[few]])
        for grp in (members[g] for g in same_keys):
            own = bounds if len(grp) == len(rows) else bounds[:, grp]  # (one shape: as is)
            kinds = typ if len(grp) == len(rows) else typ[:, grp]
            result.append((rows[grp], _shape_text(data, own, kinds, value[grp], slow, depth,
                                                  count)))
    return result


def _signature(table: np.ndarray, count: int) -> np.ndarray:
    """What fixes an object's shape, as a byte row: its key JEntries (the key bytes are
    compared apart; value types may differ within a shape)."""
    return table[:count].T.astype("<u4", order="C").view(np.uint8)


def _mostly_shared(data: np.ndarray, s: np.ndarray, count: int) -> bool:
    """Whether, judging by a sample, at least half of the objects at ``s`` (``count`` keys
    each) have shapes common enough to print by columns (else reading their shapes costs
    more than it saves)."""
    n = len(s)
    if n < 4 * SHAPE_SAMPLE:
        return True
    pick = s[:: n // SHAPE_SAMPLE]
    table = _u32_be_columns(data, pick + 4, count)  # (the key JEntries)
    codes, groups = _group(_signature(table, count))
    sizes = np.bincount(codes, minlength=groups)
    common = sizes * (n / len(pick)) >= MIN_SHAPE_ROWS
    return 2 * int(sizes[common].sum()) >= len(pick)


def _shape_text(data: np.ndarray, bounds: np.ndarray, typ: np.ndarray, value: np.ndarray,
                slow: np.ndarray, depth: int, count: int) -> Pieces:
    """The texts of objects of one shape (``count`` keys, then ``count`` values): entry j of
    each from ``bounds[j]`` to ``bounds[j + 1]`` (one column per object), of types
    ``typ[j]``."""
    n = bounds.shape[1]
    start, stop = bounds[:-1], bounds[1:]
    failed: Pieces = [""]  # (the texts of values marked for the per-value printer)
    raw = ranges_binary(data, start[:count, 0], stop[:count, 0])  # (the keys)
    if needs_escape(raw).any():
        slow[value] = True
        return failed
    try:
        keys = raw.cast(_LSTR).to_pylist()
    except pa.ArrowInvalid:  # not UTF-8: the per-value printer raises
        slow[value] = True
        return failed
    cols = range(count, 2 * count)
    # a column's type, when all its values have one (else None: printed by type, then merged)
    kind = {j: int(typ[j, 0]) if (typ[j] == typ[j, 0]).all() else None for j in cols}
    # The numbers of columns of numbers are printed together (column after column, in two
    # batches by the first object's tag: integers, doubles), as are the strings of columns
    # of strings (object after object, in data order).
    number_text: dict[int, pa.Array] = {}
    numbers = [j for j in cols if kind[j] == NUMBER]
    for batch in ([j for j in numbers if data[start[j, 0]] == 0x60],
                  [j for j in numbers if data[start[j, 0]] != 0x60]):
        if batch:
            at = np.array(batch)
            text = number_texts(data, start[at].ravel(), stop[at].ravel(),
                                 np.tile(value, len(batch)), slow)
            number_text.update((j, text.slice(k * n, n)) for k, j in enumerate(batch))
    strings = [j for j in cols if kind[j] == STRING]
    if strings:
        at = np.array(strings)
        string_text = _strings(data, start[at].T.ravel(), stop[at].T.ravel(),
                               np.repeat(value, len(strings)), slow)
    pieces: Pieces = ["{"]
    for i, j in enumerate(cols):
        lead = ("," if i else "") + f'"{keys[i]}":'
        if kind[j] == NUMBER:
            pieces += [lead, number_text[j]]
        elif kind[j] == STRING:
            k = strings.index(j)
            column = (string_text if len(strings) == 1 else pc.take(
                string_text, pa.array(np.arange(k, n * len(strings), len(strings))),
                memory_pool=TEXT_POOL))
            pieces += [lead + '"', column, '"']
        else:
            pieces += [lead, *_values(data, typ[j], start[j], stop[j], value, slow, depth)]
    pieces.append("}")
    return pieces


def _join(pieces: Pieces, n: int) -> pa.Array:
    """The pieces (fixed texts and columns of ``n`` texts) joined row by row."""
    if len(pieces) == 1 and isinstance(pieces[0], pa.Array):
        return pieces[0]
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
    return pc.binary_join_element_wise(*args, _NOTHING, memory_pool=TEXT_POOL)


def _repeat(text: str, n: int) -> pa.Array:
    """``text`` ``n`` times."""
    return pc.take(pa.array([text], _LSTR), pa.array(np.zeros(n, np.int64)),
                   memory_pool=TEXT_POOL)


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


def _members(codes: np.ndarray, groups: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The rows of each group number of at least :data:`MIN_SHAPE_ROWS` rows (in row
    order), and the rows of all smaller groups together."""
    if groups == 1:
        return ([np.arange(len(codes))] if len(codes) >= MIN_SHAPE_ROWS else [],
                np.arange(len(codes)) if len(codes) < MIN_SHAPE_ROWS else _NONE)
    sizes = np.bincount(codes, minlength=groups)
    common = sizes[codes] >= MIN_SHAPE_ROWS
    rare = np.flatnonzero(~common)
    big = np.flatnonzero(sizes >= MIN_SHAPE_ROWS)
    if not len(big):
        return [], rare
    rows = np.flatnonzero(common)
    order = rows[np.argsort(codes[rows], kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(sizes[big])))
    return [order[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(),
                                       strict=True)], rare


def _in_order(texts: list[pa.Array], rows_of: list[np.ndarray], n: int) -> pa.Array:
    """Texts given for sets of rows (together, every row once), as one array in row order."""
    if len(texts) == 1 and len(rows_of[0]) == n and (
            n == 0 or bool((rows_of[0] == np.arange(n)).all())):
        return texts[0].cast(_LSTR)
    if not texts:
        return pa.array([], _LSTR)
    where = np.empty(n, np.int64)
    where[np.concatenate(rows_of)] = np.arange(n)
    return texts_at(texts, where)

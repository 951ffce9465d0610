"""JSONB to JSON text for a whole column at once (numpy and pyarrow kernels, no per-value loop).

:func:`alance.format.jsonb.to_text` converts one value in Python (~10 µs each). This module
does the same for an array of values level by level: every container of every value at one
nesting depth is read together (headers, JEntries, item ranges), leaf items are printed with
Arrow kernels (strings quoted, integers cast), and each container's text is joined from its
tokens (``[``, items, ``,``, ``]``...) with ``binary_join`` over a list array, deepest level
first. The output is the same text :func:`~alance.format.jsonb.to_text` prints.

Values this path does not handle (end-offset JEntries, strings needing escapes, integers
beyond int64, anything malformed, deeper than ``MAX_DEPTH``) are reported back by index and
printed one by one by the caller (which also raises the precise error for a damaged value).
Doubles are printed per item in Python (``_float_text``: pylance's notation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.format.jsonb import MAX_DEPTH, MAX_VALUE_BYTES, _float_text, to_text
from alance.format.v2.kernels import fixed_at, span_array

__all__ = ["BULK_MIN_VALUES", "array_to_text", "bulk_text"]

_ARRAY, _OBJECT, _SCALAR = 0x80000000, 0x40000000, 0x20000000
_NULL, _STRING, _NUMBER, _FALSE, _TRUE, _CONTAINER = 0, 1, 2, 3, 4, 5
#: Fixed pieces, by index: what tokens point at besides leaf and child texts.
_PUNCT = ["[", "]", "{", "}", ",", ":", "null", "false", "true"]
_OPEN_A, _CLOSE_A, _OPEN_O, _CLOSE_O, _COMMA, _COLON = 0, 1, 2, 3, 4, 5
_CONST = {_NULL: 6, _FALSE: 7, _TRUE: 8}
_PUNCT_TEXT = pa.array(_PUNCT, pa.large_string())
_EMPTY = pa.array([""], pa.large_string())


@dataclass
class _Level:
    """The containers of one depth and their items (entries)."""

    node_value: np.ndarray      # top-level value index of each node
    kind: np.ndarray            # _ARRAY / _OBJECT / _SCALAR per node
    count: np.ndarray           # items (arrays) or entries (objects) per node
    first: np.ndarray           # index of each node's first entry
    typ: np.ndarray             # entry types
    start: np.ndarray           # entry byte ranges
    stop: np.ndarray
    child: np.ndarray           # for container entries: node index in the next level
    owner: np.ndarray           # per entry: its node
    j: np.ndarray               # per entry: its index in its node


def _windows(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position ``pos`` of ``data`` (each in bounds), as
    ``width``-byte items to view as numbers."""
    if len(data) < width:
        return np.zeros(len(pos), f"V{width}")
    return fixed_at(data, pos, width).view(f"V{width}")


def _u32_be(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The big-endian u32 at each byte position ``pos`` of ``data``."""
    return _windows(data, pos, 4).view(">u4").astype(np.uint32)


def _read_level(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, value: np.ndarray,
                slow: np.ndarray, top: bool) -> _Level:
    """Parse the containers ``[starts, ends)`` (marking their values ``slow`` where this path
    cannot follow them)."""
    n = len(starts)
    short = ends - starts < 4
    slow[value[short]] = True
    head = _u32_be(data, np.where(short, 0, starts))
    kind = head & np.uint32(0xE0000000)
    count = (head & np.uint32(0x1FFFFFFF)).astype(np.int64)
    m = np.where(kind == _ARRAY, count, np.where(kind == _OBJECT, 2 * count,
                                                 np.where(kind == _SCALAR, 1, 0)))
    bad = short | ~((kind == _ARRAY) | (kind == _OBJECT) | ((kind == _SCALAR) & top))
    table = starts + 4 + 4 * m
    bad |= table > ends
    slow[value[bad]] = True
    # a node this path cannot follow prints as "[]" (its value is printed one by one)
    kind = np.where(bad, np.uint32(_ARRAY), kind)
    count = np.where(bad, 0, count)
    m = np.where(bad, 0, m)
    first = np.concatenate(([0], np.cumsum(m)[:-1])).astype(np.int64) if n else m
    total = int(m.sum())
    owner = np.repeat(np.arange(n), m)
    index = np.arange(total)
    j = index - first[owner]
    # entry i of a node lies at start + 4 + 4 * j, that is (start - 4 * first) + 4 + 4 * i
    entries = (_u32_be(data, (starts - 4 * first + 4)[owner] + 4 * index) if total
               else np.zeros(0, np.uint32))
    if (entries >= np.uint32(0x80000000)).any():
        slow[value[owner[entries >= np.uint32(0x80000000)]]] = True
    typ = (entries >> np.uint32(28)).astype(np.int64) & 7
    length = (entries & np.uint32(0x0FFFFFFF)).astype(np.int64)
    stop = np.cumsum(length)
    # a node's items start after its table: shift each node's running sum there
    stop += (table - np.concatenate(([0], stop))[first])[owner] if total else 0
    start = stop - length
    node_end = ends[owner]
    over = stop > node_end
    if over.any():
        slow[value[owner[over]]] = True
        stop = np.minimum(stop, node_end)
        start = np.minimum(start, stop)
    if np.any(kind == _OBJECT):  # object keys are strings
        key = (kind[owner] == _OBJECT) & (j < count[owner])
        slow[value[owner[key & (typ != _STRING)]]] = True
    slow[value[owner[typ > _CONTAINER]]] = True
    return _Level(value, kind.astype(np.int64), count, first, typ, start, stop,
                  np.full(total, -1, np.int64), owner, j)


def _ranges_binary(data: np.ndarray, start: np.ndarray, stop: np.ndarray) -> pa.Array:
    """``data[start[i]:stop[i]]`` for every i, as one binary array."""
    k = len(start)
    if k and bool((start[1:] >= stop[:-1]).all()) and int(start[0]) >= 0 \
            and int(stop[-1]) <= len(data):
        return span_array(data, start, stop)  # sorted, disjoint: one take, no index per byte
    lengths = stop - start
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    idx = (np.repeat(start - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
           if len(lengths) else np.zeros(0, np.int64))
    return pa.Array.from_buffers(pa.large_binary(), len(lengths),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data[idx])])


def _needs_escape(raw: pa.Array) -> np.ndarray:
    """Which values of a large binary array hold a byte JSON text must escape."""
    n = len(raw)
    offs = np.frombuffer(raw.buffers()[1], np.int64, n + 1, raw.offset * 8)
    body = raw.buffers()[2]
    if body is None or n == 0:
        return np.zeros(n, dtype=bool)
    b = np.frombuffer(body, np.uint8)[int(offs[0]): int(offs[-1])]
    at = np.flatnonzero((b < 0x20) | (b == 0x22) | (b == 0x5C))
    needs = np.zeros(n, dtype=bool)
    if len(at):
        needs[np.searchsorted(offs, at + int(offs[0]), side="right") - 1] = True
    return needs


def _leaf_texts(data: np.ndarray, lvl: _Level, leaves: np.ndarray, slow: np.ndarray,
                ) -> tuple[list[pa.Array], np.ndarray]:
    """Texts of the string and number entries ``leaves``: the pieces (in any order) and the
    piece of each leaf."""
    typ, start, stop = lvl.typ[leaves], lvl.start[leaves], lvl.stop[leaves]
    value = lvl.node_value[lvl.owner[leaves]]
    parts: list[pa.Array] = [_EMPTY]  # piece 0: a value printed
    piece = np.zeros(len(leaves), dtype=np.int64)                # one by one instead
    size = [1]

    def add(texts: pa.Array, sel: np.ndarray) -> None:
        piece[sel] = size[0] + np.arange(len(sel))
        size[0] += len(sel)
        parts.append(texts.cast(pa.large_string()))

    strings = np.flatnonzero(typ == _STRING)
    if len(strings):
        raw = _ranges_binary(data, start[strings], stop[strings])
        slow[value[strings[_needs_escape(raw)]]] = True
        try:
            text = raw.cast(pa.large_string())
        except pa.ArrowInvalid:  # not UTF-8: the per-value path raises the error
            slow[value[strings]] = True
        else:
            quote = pa.scalar('"', pa.large_string())
            add(pc.binary_join_element_wise(quote, text, quote,
                                            pa.scalar("", pa.large_string())), strings)
    numbers = np.flatnonzero(typ == _NUMBER)
    if len(numbers):
        n0, n1 = start[numbers], stop[numbers]
        width_all = n1 - n0
        tag = np.where(width_all > 0, data[np.minimum(n0, max(len(data) - 1, 0))], 0xFF)
        done = np.zeros(len(numbers), dtype=bool)
        zero = np.flatnonzero((tag == 0x00) & (width_all == 1))
        if len(zero):
            add(pa.array(["0"] * len(zero), pa.large_string()), numbers[zero])
            done[zero] = True
        for code, kind in ((0x40, "i"), (0x50, "u")):
            for width in (1, 2, 4, 8):
                sel = np.flatnonzero((tag == code) & (width_all == width + 1))
                if not len(sel):
                    continue
                vals = _windows(data, n0[sel] + 1, width).view(f">{kind}{width}")
                if kind == "u" and width == 8:
                    texts = pa.array([str(x) for x in vals.tolist()], pa.large_string())
                else:
                    texts = pa.array(vals.astype(np.int64)).cast(pa.large_string())
                add(texts, numbers[sel])
                done[sel] = True
        floats = np.flatnonzero((tag == 0x60) & (width_all == 9))
        if len(floats):
            xs = _windows(data, n0[floats] + 1, 8).view(">f8").astype(np.float64)
            finite = np.isfinite(xs)
            ok, fx = floats[finite], xs[finite]
            # Arrow prints the same shortest digits as Python's repr; in fixed notation only
            # an integral value differs ("100" for "100.0"). The rest is printed by Python.
            text = pa.array(fx).cast(pa.large_string())
            expo = np.asarray(pc.match_substring(text, "e"), dtype=bool)
            dot = np.asarray(pc.match_substring(text, "."), dtype=bool)
            # (Python's fixed notation, hence pylance's, covers 1e-4 <= |x| < 1e16 only)
            mag = np.abs(fx)
            plain = ~expo & ((fx == 0) | ((mag >= 1e-4) & (mag < 1e16)))
            expo = ~plain
            add(text.filter(pa.array(plain & dot)), numbers[ok[plain & dot]])
            integral = plain & ~dot
            if integral.any():
                add(pc.binary_join_element_wise(text.filter(pa.array(integral)),
                                                pa.scalar(".0", pa.large_string()),
                                                pa.scalar("", pa.large_string())),
                    numbers[ok[integral]])
            add(pa.array([_float_text(x) for x in fx[expo].tolist()], pa.large_string()),
                numbers[ok[expo]])
            done[ok] = True
        slow[value[numbers[~done]]] = True
    return parts, piece


def _join(lvl: _Level, leaf_pieces: list[pa.Array], leaf_piece: np.ndarray,
          child_texts: pa.Array) -> pa.Array:
    """Each node's text from its tokens (``leaf_piece``: per entry, its piece in
    ``leaf_pieces``, -1 for entries that are not strings or numbers)."""
    kind, count = lvl.kind, lvl.count
    arr, obj, sca = kind == _ARRAY, kind == _OBJECT, kind == _SCALAR
    ntok = np.where(sca, 1, np.where(count == 0, 2, np.where(arr, 2 * count + 1,
                                                             4 * count + 1)))
    off = np.concatenate(([0], np.cumsum(ntok))).astype(np.int64)
    tok = np.zeros(int(off[-1]), dtype=np.int64)
    base_leaf = len(_PUNCT)
    base_child = base_leaf + sum(len(p) for p in leaf_pieces)
    piece = np.zeros(len(lvl.typ), dtype=np.int64)
    for kind_of_leaf, const in _CONST.items():
        piece[lvl.typ == kind_of_leaf] = const
    leafy = leaf_piece >= 0
    piece[leafy] = base_leaf + leaf_piece[leafy]
    cont = lvl.typ == _CONTAINER
    piece[cont] = base_child + lvl.child[cont]
    owner, j = lvl.owner, lvl.j
    c = count[owner]
    at = off[owner]
    tok[off[:-1][arr]] = _OPEN_A
    tok[off[1:][arr] - 1] = _CLOSE_A
    tok[off[:-1][obj]] = _OPEN_O
    tok[off[1:][obj] - 1] = _CLOSE_O
    ea = arr[owner]
    tok[at[ea] + 1 + 2 * j[ea]] = piece[ea]
    ca = ea & (j < c - 1)
    tok[at[ca] + 2 + 2 * j[ca]] = _COMMA
    key = obj[owner] & (j < c)
    tok[at[key] + 1 + 4 * j[key]] = piece[key]
    tok[at[key] + 2 + 4 * j[key]] = _COLON
    val = obj[owner] & (j >= c)
    vj = j - c
    tok[at[val] + 3 + 4 * vj[val]] = piece[val]
    co = val & (vj < c - 1)
    tok[at[co] + 4 + 4 * vj[co]] = _COMMA
    es = sca[owner]
    tok[at[es]] = piece[es]
    pieces = pa.concat_arrays([_PUNCT_TEXT, *leaf_pieces, child_texts.cast(pa.large_string())])
    tokens = pieces.take(pa.array(tok))
    # The tokens' bytes lie back to back in node order: each node's text is the run of its
    # tokens' bytes, so the node offsets are the token offsets at the node boundaries.
    token_ends = np.frombuffer(tokens.buffers()[1], np.int64, len(tokens) + 1, tokens.offset * 8)
    return pa.Array.from_buffers(pa.large_string(), len(kind),
                                 [None, pa.py_buffer(np.ascontiguousarray(token_ends[off])),
                                  tokens.buffers()[2] or pa.py_buffer(b"")])


def bulk_text(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              ) -> tuple[pa.Array, np.ndarray]:
    """JSON text of the JSONB values ``data[starts[i]:ends[i]]``, and which of them this path
    could not print (their texts are then empty; print those one by one)."""
    n = len(starts)
    slow = np.zeros(n, dtype=bool)
    levels: list[_Level] = []
    s, e, v = starts.astype(np.int64), ends.astype(np.int64), np.arange(n)
    top = True
    while len(s):
        if len(levels) > MAX_DEPTH:
            slow[v] = True
            break
        lvl = _read_level(data, s, e, v, slow, top)
        levels.append(lvl)
        top = False
        cont = np.flatnonzero(lvl.typ == _CONTAINER)
        owner = lvl.owner[cont]
        lvl.child[cont] = np.arange(len(cont))
        s, e, v = lvl.start[cont], lvl.stop[cont], lvl.node_value[owner]
    texts: pa.Array = pa.array([], pa.large_string())
    for lvl in reversed(levels):
        leaves = np.flatnonzero((lvl.typ == _STRING) | (lvl.typ == _NUMBER))
        leaf_pieces, piece_of_leaf = _leaf_texts(data, lvl, leaves, slow)
        leaf_piece = np.full(len(lvl.typ), -1, dtype=np.int64)
        leaf_piece[leaves] = piece_of_leaf
        texts = _join(lvl, leaf_pieces, leaf_piece, texts)
    if not levels:
        texts = pa.array([""] * n, pa.large_string())
    return texts, slow


def array_to_text(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """JSON text (``arrow.json`` over utf8) of a binary array of JSONB values (nulls kept)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    if len(storage) >= BULK_MIN_VALUES:
        return _bulk_to_text(storage)
    values = storage.to_pylist()
    texts = [None if v is None else to_text(v) for v in values]
    return pa.ExtensionArray.from_storage(pa.json_(pa.utf8()), pa.array(texts, pa.utf8()))


#: Columns of at least this many values are converted by the column kernel
#: (:mod:`alance.format.jsonb_bulk`); fewer, value by value.
BULK_MIN_VALUES = 64


def _bulk_to_text(storage: pa.Array) -> pa.Array:
    storage = storage.cast(pa.large_binary())
    n = len(storage)
    offsets = np.frombuffer(storage.buffers()[1], np.int64, n + 1, storage.offset * 8)
    data = (np.frombuffer(storage.buffers()[2], np.uint8) if storage.buffers()[2] is not None
            else np.zeros(0, np.uint8))
    if (offsets[1:] - offsets[:-1]).max(initial=0) > MAX_VALUE_BYTES:
        values = storage.to_pylist()
        texts_list = [None if v is None else to_text(v) for v in values]
        return pa.ExtensionArray.from_storage(pa.json_(pa.utf8()),
                                              pa.array(texts_list, pa.utf8()))
    valid = np.asarray(storage.is_valid())
    rows = np.flatnonzero(valid)
    texts, slow = bulk_text(data, offsets[:-1][rows], offsets[1:][rows])
    out = texts.cast(pa.large_string())
    if slow.any():  # printed one by one (and damaged values raise here)
        again = rows[slow]
        fixed = pa.array([to_text(storage[int(i)].as_py()) for i in again], pa.large_string())
        index = np.arange(len(rows))
        index[np.flatnonzero(slow)] = len(rows) + np.arange(len(again))
        out = pa.concat_arrays([out, fixed]).take(pa.array(index))
    if len(rows) != n:  # nulls back in place
        index = np.full(n, -1, dtype=np.int64)
        index[rows] = np.arange(len(rows))
        out = out.take(pa.array(index, mask=~valid))
    return pa.ExtensionArray.from_storage(pa.json_(pa.utf8()), out.cast(pa.utf8()))

"""JSONB to JSON text for a whole column at once (numpy and pyarrow kernels, no per-value loop).

:func:`alance.format.jsonb.to_text` converts one value in Python (~10 µs each). This module
does the same for an array of values level by level: every container of every value at one
nesting depth is read together (headers, JEntries, item ranges); leaf items are printed with
Arrow kernels (strings quoted, numbers cast); object keys are printed once per distinct key
set (objects of a column mostly repeat theirs). Every value's text is then one run of tokens
(``[``, ``,``, a key head such as ``,"name":``, a leaf, ``]``...) laid out for all values at
once and gathered with one take. The output is the same text
:func:`~alance.format.jsonb.to_text` prints.

Values this path does not handle (end-offset JEntries, strings or keys needing escapes,
integers beyond int64, anything malformed, deeper than ``MAX_DEPTH``) are reported back by
index and printed one by one by the caller (which also raises the precise error for a damaged
value). Doubles Python prints with an exponent are printed item by item in Python. The leaf
printers (:func:`number_texts`, :func:`double_texts`) and :data:`TEXT_POOL` serve the shape
kernel (:mod:`alance.format.jsonb_shapes`) too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.format.jsonb import MAX_DEPTH, _float_text
from alance.format.v2.kernels import fixed_at, gather_ranges, range_indices, span_array

__all__ = ["ARRAY", "CONTAINER", "FALSE", "NULL", "NUMBER", "OBJECT", "SCALAR", "STRING",
           "TEXT_POOL", "TRUE", "bulk_text", "double_texts", "leaf_texts", "needs_escape",
           "number_texts", "ranges_binary", "texts_at", "u32_be"]

#: The memory pool of the texts the column kernels build. A column's conversion allocates
#: and frees tens of megabytes of texts; Arrow's default pool (mimalloc) hands freed pages
#: back to the kernel within milliseconds, so each read faulted them in again, where the C
#: library's allocator keeps them for the next (measured on a two-thread read of 200,000
#: documents: a fifth of the page faults and 10% less time).
TEXT_POOL = pa.system_memory_pool()

ARRAY, OBJECT, SCALAR = 0x80000000, 0x40000000, 0x20000000
NULL, STRING, NUMBER, FALSE, TRUE, CONTAINER = 0, 1, 2, 3, 4, 5
#: The kind of a number item by ``tag * 16 + min(length, 15)`` (0: not one these kernels
#: print), and how far an integer's last 8 bytes shift to keep its own (by length).
_ZERO, _POSITIVE, _NEGATIVE, _DOUBLE = 1, 2, 3, 4
_NUMBER_KIND = np.zeros(256 * 16, np.uint8)
_NUMBER_KIND[0x00 * 16 + 1] = _ZERO
_NUMBER_KIND[0x60 * 16 + 9] = _DOUBLE
_CUT = np.zeros(16, np.uint64)
for _width in (2, 3, 5, 9):
    _NUMBER_KIND[0x50 * 16 + _width] = _POSITIVE
    _NUMBER_KIND[0x40 * 16 + _width] = _NEGATIVE
    _CUT[_width] = (72 - 8 * _width) % 64
#: Fixed pieces, by index: what tokens point at besides leaf and child texts.
_PUNCT = ["[", "]", "}", ",", "null", "false", "true", "[]", "{}"]
_OPEN_A, _CLOSE_A, _CLOSE_O, _COMMA, _EMPTY_A, _EMPTY_O = 0, 1, 2, 3, 7, 8
#: The token of a value by its type: null, false and true print as fixed pieces (the others
#: get their own token, or none: containers).
_CONST_TOKEN = np.array([4, 0, 0, 5, 6, 0, 0, 0], np.int32)
_PUNCT_TEXT = pa.array(_PUNCT, pa.large_string())
_EMPTY = pa.array([""], pa.large_string())


@dataclass
class _Level:
    """The containers (nodes) of one depth: their entries (object keys, then values) and
    their values (array items, object values, a top-level scalar), each in node order."""

    node_start: np.ndarray      # per node: where its bytes start
    node_value: np.ndarray      # per node: its top-level value
    kind: np.ndarray            # per node: ARRAY / OBJECT / SCALAR
    count: np.ndarray           # per node: items (arrays) or keys (objects)
    first: np.ndarray           # per node: index of its first entry
    typ: np.ndarray             # per entry: type
    start: np.ndarray           # per entry: byte range
    stop: np.ndarray
    per_node: np.ndarray        # per node: how many values
    ventry: np.ndarray          # per value: its entry
    vslot: np.ndarray           # per value: its index among its node's values
    vtyp: np.ndarray            # per value: type
    vvalue: np.ndarray          # per value: its top-level value

    @cached_property
    def vfirst(self) -> np.ndarray:
        """Per node: index of its first value."""
        return np.cumsum(self.per_node) - self.per_node

    @cached_property
    def has_scalar(self) -> bool:
        """Whether a node is a top-level scalar (printed without punctuation)."""
        return bool((self.kind == SCALAR).any())


def _as(arr: pa.Array, typ: pa.DataType) -> pa.Array:
    """``arr`` cast to ``typ`` (a call to Arrow's cast only when the type differs)."""
    return arr if arr.type == typ else arr.cast(typ)


def _windows(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each position ``pos`` of ``data`` (each in bounds), as
    ``width``-byte items to view as numbers."""
    if len(data) < width:
        return np.zeros(len(pos), f"V{width}")
    return fixed_at(data, pos, width).view(f"V{width}")


def u32_be(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The big-endian u32 at each byte position ``pos`` of ``data``."""
    return _windows(data, pos, 4).view(">u4").astype(np.uint32)


def _ranks(sizes: np.ndarray) -> np.ndarray:
    """``0..sizes[i]-1`` for every group i, back to back."""
    return range_indices(np.zeros(len(sizes), np.int64), sizes)


def _read_level(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, value: np.ndarray,
                slow: np.ndarray, top: bool) -> _Level:
    """Parse the containers ``[starts, ends)`` (marking their values ``slow`` where this path
    cannot follow them)."""
    short = ends - starts < 4
    head = u32_be(data, np.where(short, 0, starts))
    kind = (head & np.uint32(0xE0000000)).astype(np.int64)
    count = (head & np.uint32(0x1FFFFFFF)).astype(np.int64)
    is_obj = kind == OBJECT
    m = np.where(kind == ARRAY, count, np.where(is_obj, 2 * count,
                                                 np.where(kind == SCALAR, 1, 0)))
    bad = short | ~((kind == ARRAY) | is_obj | ((kind == SCALAR) & top))
    table = starts + 4 + 4 * m
    bad |= table > ends
    if bad.any():
        # a node this path cannot follow prints as "[]" (its value is printed one by one)
        slow[value[bad]] = True
        kind = np.where(bad, ARRAY, kind)
        count = np.where(bad, 0, count)
        m = np.where(bad, 0, m)
        is_obj = kind == OBJECT
        table = starts + 4 + 4 * m
    first = np.cumsum(m) - m
    total = int(m.sum())
    # (the JEntry tables of the nodes, back to back)
    entries = (gather_ranges(data, (starts + 4)[m > 0], 4 * m[m > 0]).view(">u4")
               .astype(np.uint32) if total else np.zeros(0, np.uint32))
    typ = (entries >> np.uint32(28)).astype(np.uint8) & np.uint8(7)
    length = (entries & np.uint32(0x0FFFFFFF)).astype(np.int64)
    stop = np.cumsum(length)
    # a node's items start after its table: shift each node's running sum there
    if total:
        stop += np.repeat(table - np.concatenate(([0], stop))[first], m)
    start = stop - length
    has = m > 0
    over = np.zeros(len(m), dtype=bool)
    if total:
        over[has] = stop[(first + m - 1)[has]] > ends[has]  # (stops only grow in a node)
    if over.any():
        slow[value[over]] = True
        stop = np.minimum(stop, np.repeat(ends, m))
        start = np.minimum(start, stop)
    keys = np.where(is_obj, count, 0)
    wrong = (typ > CONTAINER) | (entries >= np.uint32(0x80000000))
    if is_obj.any():  # object keys are strings
        is_key = np.repeat(np.tile(np.array([True, False]), len(m)),
                           np.column_stack((keys, m - keys)).ravel())
        wrong |= is_key & (typ != STRING)
        ventry = np.flatnonzero(~is_key)  # (a node's entries are its keys, then its values)
    else:
        ventry = np.arange(total)
    if wrong.any():
        slow[value[np.searchsorted(first, np.flatnonzero(wrong), side="right") - 1]] = True
    per_node = np.where(kind == SCALAR, 1, count)
    vslot = ventry - np.repeat(first + keys, per_node)
    return _Level(starts, value, kind, count, first, typ, start, stop, per_node, ventry,
                  vslot, typ[ventry], np.repeat(value, per_node))


def ranges_binary(data: np.ndarray, start: np.ndarray, stop: np.ndarray) -> pa.Array:
    """``data[start[i]:stop[i]]`` for every i, as one binary array."""
    k = len(start)
    if k and bool((start[1:] >= stop[:-1]).all()) and int(start[0]) >= 0 \
            and int(stop[-1]) <= len(data):
        # (sorted, disjoint: one take, no index per byte)
        return span_array(data, start, stop, TEXT_POOL)
    lengths = stop - start
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    idx = (np.repeat(start - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
           if len(lengths) else np.zeros(0, np.int64))
    return pa.Array.from_buffers(pa.large_binary(), len(lengths),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data[idx])])


def needs_escape(raw: pa.Array) -> np.ndarray:
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


def leaf_texts(data: np.ndarray, typ: np.ndarray, start: np.ndarray, stop: np.ndarray,
                value: np.ndarray, slow: np.ndarray) -> tuple[list[pa.Array], np.ndarray]:
    """Texts of string and number items (types ``typ``, bytes ``data[start:stop]``, of the
    top-level values ``value``): the pieces (in any order) and the piece of each item."""
    parts: list[pa.Array] = [_EMPTY]  # piece 0: a value printed
    piece = np.zeros(len(typ), dtype=np.int64)                   # one by one instead
    size = [1]

    def add(texts: pa.Array, sel: np.ndarray) -> None:
        piece[sel] = size[0] + np.arange(len(sel))
        size[0] += len(sel)
        parts.append(_as(texts, pa.large_string()))

    strings = np.flatnonzero(typ == STRING)
    if len(strings):
        raw = ranges_binary(data, start[strings], stop[strings])
        slow[value[strings[needs_escape(raw)]]] = True
        try:
            text = raw.cast(pa.large_string())
        except pa.ArrowInvalid:  # not UTF-8: the per-value path raises the error
            slow[value[strings]] = True
        else:
            quote = pa.scalar('"', pa.large_string())
            add(pc.binary_join_element_wise(quote, text, quote,
                                            pa.scalar("", pa.large_string())), strings)
    numbers = np.flatnonzero(typ == NUMBER)
    if len(numbers):
        for text, at in _number_parts(data, start[numbers], stop[numbers], value[numbers],
                                      slow):
            add(text, numbers[at])
    return parts, piece


def number_texts(data: np.ndarray, start: np.ndarray, stop: np.ndarray, value: np.ndarray,
                 slow: np.ndarray) -> pa.Array:
    """The texts of the number items ``data[start:stop]`` (of the top-level values
    ``value``), in their order (see :func:`_number_parts`)."""
    parts = _number_parts(data, start, stop, value, slow)
    if len(parts) == 1:
        return parts[0][0]
    index = np.empty(len(start), np.int64)
    index[np.concatenate([at for _, at in parts])] = np.arange(len(start))
    return texts_at([text for text, _ in parts], index)


def _number_parts(data: np.ndarray, start: np.ndarray, stop: np.ndarray, value: np.ndarray,
                  slow: np.ndarray) -> list[tuple[pa.Array, np.ndarray]]:
    """The texts of the number items ``data[start:stop]``, as (texts, which items) parts:
    integers decoded as one column (each from the 8 bytes that end its item, cut to its
    width), doubles as another. Items this cannot print (integers beyond int64, infinities,
    unknown tags or widths) get an empty text and their values are marked ``slow``."""
    n = len(start)
    if n == 0 or len(data) == 0:
        slow[value] = True
        return [(pa.array([""] * n, pa.large_string()), np.arange(n))]
    width = stop - start
    short = np.clip(width, 0, 15)
    kind = _NUMBER_KIND[data[np.clip(start, 0, len(data) - 1)].astype(np.intp) * 16 + short]
    kind[stop < 8] = 0  # (never in a well-formed value: header and JEntry come first)
    unknown = kind == 0
    if unknown.any():
        slow[value[unknown]] = True
        kind[unknown] = _ZERO
    is_float = kind == _DOUBLE
    if is_float.all():
        return [(_double_column(data, start, value, slow), np.arange(n))]
    is_int = (kind == _POSITIVE) | (kind == _NEGATIVE)
    vals = np.zeros(n, np.int64)
    if is_int.any():
        words = fixed_at(data, np.where(is_int, stop - 8, 0), 8).view(">u8").astype(np.uint64)
        cut = _CUT[short]
        words <<= cut
        negative = kind == _NEGATIVE
        if negative.any():
            vals = np.where(negative, words.view(np.int64) >> cut.view(np.int64),
                            (words >> cut).view(np.int64))
        else:
            words >>= cut
            vals = words.view(np.int64)
        big = (vals < 0) & (kind == _POSITIVE)
        if big.any():  # beyond int64: the per-value printer
            slow[value[big]] = True
        vals[~is_int] = 0
    if not is_float.any():
        return [(pc.cast(pa.array(vals), pa.large_string(), memory_pool=TEXT_POOL),
                 np.arange(n))]
    floats, other = np.flatnonzero(is_float), np.flatnonzero(~is_float)
    return [(_double_column(data, start[floats], value[floats], slow), floats),
            (pc.cast(pa.array(vals[other]), pa.large_string(), memory_pool=TEXT_POOL), other)]


def _double_column(data: np.ndarray, start: np.ndarray, value: np.ndarray,
                   slow: np.ndarray) -> pa.Array:
    """The texts of the doubles whose items start at ``start`` (tag byte, then 8 bytes)."""
    xs = fixed_at(data, start + 1, 8).view(">f8").astype(np.float64)
    finite = np.isfinite(xs)
    if not finite.all():  # (infinities and NaNs: the per-value printer raises)
        slow[value[~finite]] = True
        xs[~finite] = 0.0
    return double_texts(xs)


def double_texts(fx: np.ndarray) -> pa.Array:
    """The texts of finite doubles ``fx``, as Python's ``repr`` (hence pylance) prints them."""
    # Arrow prints the same shortest digits as Python's repr; in fixed notation only an
    # integral value differs ("100" for "100.0"). The rest is printed by Python.
    text = pc.cast(pa.array(fx), pa.large_string(), memory_pool=TEXT_POOL)
    # (Python's fixed notation, hence pylance's, covers 1e-4 <= |x| < 1e16 only)
    mag = np.abs(fx)
    plain = (fx == 0) | ((mag >= 1e-4) & (mag < 1e16))
    # Inside that range Arrow writes an exponent only for large values (from about 1e10 up,
    # measured over millions of doubles): only texts of values from 1e6 up are searched.
    # Without an exponent, Arrow's text has a point exactly when the value is not integral.
    large = np.flatnonzero(plain & (mag >= 1e6))
    if len(large):
        searched = pc.match_substring(pc.take(text, pa.array(large)), "e")
        plain[large[np.asarray(searched, dtype=bool)]] = False
    integral = plain & (fx == np.trunc(fx))
    if plain.all() and not integral.any():
        return text
    fraction = plain & ~integral
    parts = [pc.filter(text, pa.array(fraction), memory_pool=TEXT_POOL)]
    where = [np.flatnonzero(fraction)]
    if integral.any():
        parts.append(pc.binary_join_element_wise(
            pc.filter(text, pa.array(integral), memory_pool=TEXT_POOL),
            pa.scalar(".0", pa.large_string()), pa.scalar("", pa.large_string()),
            memory_pool=TEXT_POOL))
        where.append(np.flatnonzero(integral))
    if (~plain).any():
        parts.append(pa.array([_float_text(x) for x in fx[~plain].tolist()],
                              pa.large_string()))
        where.append(np.flatnonzero(~plain))
    index = np.empty(len(fx), np.int64)
    index[np.concatenate(where)] = np.arange(len(fx))
    return texts_at(parts, index)


def texts_at(parts: list[pa.Array], index: np.ndarray) -> pa.Array:
    """Item ``index[i]`` of ``parts`` laid end to end, for every i, as one large string
    array (in :data:`TEXT_POOL`)."""
    joined = pa.concat_arrays([p if p.type == pa.large_string() else p.cast(pa.large_string())
                               for p in parts], memory_pool=TEXT_POOL)
    return pc.take(joined, pa.array(index), memory_pool=TEXT_POOL)


def _key_heads(data: np.ndarray, start: np.ndarray, stop: np.ndarray,
               first: np.ndarray) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The text each object key opens its entry with: ``{"key":`` for a first key,
    ``,"key":`` for the others. Each distinct key is printed twice (both forms) and every
    key refers to one of those: the heads, the head of each key and which keys this path
    cannot print (escapes, not UTF-8)."""
    raw = ranges_binary(data, start, stop)
    encoded = pc.dictionary_encode(raw)
    index = np.asarray(encoded.indices, dtype=np.int64)
    keys = encoded.dictionary
    bad = needs_escape(_as(keys, pa.large_binary()))
    try:
        text = keys.cast(pa.large_string())
    except pa.ArrowInvalid:  # not UTF-8: the per-value path raises the error
        bad[:] = True
        text = pa.array([""] * len(keys), pa.large_string())
    empty = pa.scalar("", pa.large_string())
    close = pa.scalar('":', pa.large_string())
    opened = pc.binary_join_element_wise(pa.scalar('{"', pa.large_string()), text, close, empty)
    later = pc.binary_join_element_wise(pa.scalar(',"', pa.large_string()), text, close, empty)
    # head 2u: key u as a first key; 2u + 1: key u after another
    both = pa.concat_arrays([opened, later]).take(
        pa.array(np.arange(2 * len(keys)).reshape(2, -1).T.ravel()))
    return both, 2 * index + (~first).astype(np.int64), bad[index]


def _object_heads(data: np.ndarray, lvl: _Level, slot: np.ndarray, slow: np.ndarray,
                  ) -> tuple[pa.Array, np.ndarray]:
    """The key heads of the non-empty objects of ``lvl`` and the head of each of their
    values (in value order; ``slot``: each such value's index in its object).

    Objects of one column mostly repeat their keys: objects are grouped by their header,
    key JEntries and key bytes together (which fix the keys), and only one object of each
    group has its keys printed."""
    obj = np.flatnonzero((lvl.kind == OBJECT) & (lvl.count > 0))
    count, first, node = lvl.count[obj], lvl.first[obj], lvl.node_start[obj]
    # ranges: the header and key JEntries, then the key bytes, of every object
    bounds = np.empty((len(obj), 4), np.int64)
    bounds[:, 0], bounds[:, 1] = node, node + 4 + 4 * count
    bounds[:, 2], bounds[:, 3] = lvl.start[first], lvl.stop[first + count - 1]
    pairs = ranges_binary(data, bounds[:, 0::2].ravel(), bounds[:, 1::2].ravel())
    offsets = np.frombuffer(pairs.buffers()[1], np.int64, 2 * len(obj) + 1, pairs.offset * 8)
    signature = pa.Array.from_buffers(pa.large_binary(), len(obj),
                                      [None, pa.py_buffer(np.ascontiguousarray(offsets[::2])),
                                       pairs.buffers()[2]])
    encoded = pc.dictionary_encode(signature)
    group = np.asarray(encoded.indices, dtype=np.int64)
    rep = np.empty(len(encoded.dictionary), np.int64)
    rep[group] = np.arange(len(obj))  # any object of a group stands for it
    rep_count = count[rep]
    rep_first = np.cumsum(rep_count) - rep_count
    rank = _ranks(rep_count)
    key_entry = np.repeat(first[rep], rep_count) + rank
    heads, head, bad = _key_heads(data, lvl.start[key_entry], lvl.stop[key_entry], rank == 0)
    if bad.any():
        bad_group = np.zeros(len(rep), dtype=bool)
        bad_group[np.repeat(np.arange(len(rep)), rep_count)[bad]] = True
        slow[lvl.node_value[obj[bad_group[group]]]] = True
    return heads, head[np.repeat(rep_first[group], count) + slot]


def _assemble(data: np.ndarray, levels: list[_Level], slow: np.ndarray) -> pa.Array:
    """Each top-level value's text, as one run of tokens.

    A node prints as its slots (objects: a key head then the value; arrays: ``[`` or ``,``
    then the item; a top-level scalar: the item alone) and a closing ``]``/``}``; an empty
    container as ``[]``/``{}``. A container item is not printed on its own: its node's
    tokens stand in its slot. Sizes (tokens per node) are summed deepest level first, then
    every token's position is laid out from the top, and one take gathers all tokens."""
    pieces: list[pa.Array] = [_PUNCT_TEXT]
    n_pieces = len(_PUNCT)
    leads, tokens = [], []  # per level, per value: the token before it and its own token
    for lvl in levels:
        lead = np.where(lvl.vslot == 0, np.int32(_OPEN_A), np.int32(_COMMA))
        in_obj = np.repeat(lvl.kind == OBJECT, lvl.per_node)
        if in_obj.any():
            heads, head = _object_heads(data, lvl, lvl.vslot[in_obj], slow)
            lead[in_obj] = n_pieces + head
            pieces.append(heads)
            n_pieces += len(heads)
        vtyp = lvl.vtyp
        own = _CONST_TOKEN[vtyp]  # (types are 3 bits)
        leafy = np.flatnonzero((vtyp == STRING) | (vtyp == NUMBER))
        entry = lvl.ventry[leafy]
        parts, piece = leaf_texts(data, vtyp[leafy], lvl.start[entry], lvl.stop[entry],
                                   lvl.vvalue[leafy], slow)
        own[leafy] = n_pieces + piece
        pieces.extend(parts)
        n_pieces += sum(len(p) for p in parts)
        leads.append(lead)
        tokens.append(own)

    # tokens per node, deepest level first
    sizes: list[np.ndarray] = [np.zeros(0, np.int64)] * len(levels)
    widths: list[np.ndarray] = [np.zeros(0, np.int64)] * len(levels)  # running sums
    below = np.zeros(0, np.int64)
    for depth in range(len(levels) - 1, -1, -1):
        lvl = levels[depth]
        cont = lvl.vtyp == CONTAINER
        if lvl.has_scalar:
            has_lead = np.repeat(lvl.kind != SCALAR, lvl.per_node).astype(np.int64)
            width = has_lead + 1
            width[cont] = has_lead[cont] + below
        else:  # (every value has a lead token)
            width = np.full(len(cont), 2, np.int64)
            width[cont] = below + 1
        ends = np.concatenate(([0], np.cumsum(width)))
        vfirst = lvl.vfirst
        widths[depth] = ends
        sizes[depth] = below = (ends[vfirst + lvl.per_node] - ends[vfirst]
                                + (lvl.kind != SCALAR))

    # positions, from the top
    bounds = np.concatenate(([0], np.cumsum(sizes[0])))
    tok = np.zeros(int(bounds[-1]), dtype=np.int32)  # (fewer pieces than data bytes)
    node_start = bounds[:-1]
    for depth, lvl in enumerate(levels):
        ends = widths[depth]  # tokens before each value in its level
        slot_pos = np.repeat(node_start - ends[lvl.vfirst], lvl.per_node) + ends[:-1]
        scalar = lvl.kind == SCALAR
        if lvl.has_scalar:
            has_lead = np.repeat(~scalar, lvl.per_node)
            tok[slot_pos[has_lead]] = leads[depth][has_lead]
            value_pos = slot_pos + has_lead
        else:
            tok[slot_pos] = leads[depth]
            value_pos = slot_pos + 1
        cont = lvl.vtyp == CONTAINER
        tok[value_pos[~cont]] = tokens[depth][~cont]
        closing = node_start + sizes[depth] - 1  # (an empty node: its one token)
        empty = lvl.per_node == 0
        close = np.where(lvl.kind == OBJECT, np.where(empty, _EMPTY_O, _CLOSE_O),
                         np.where(empty, _EMPTY_A, _CLOSE_A))
        tok[closing[~scalar]] = close[~scalar]
        node_start = value_pos[cont]  # the next level's nodes, in order

    text = texts_at(pieces, tok)
    # the tokens' bytes lie back to back in value order: a value's text is the run of its
    # tokens' bytes
    token_ends = np.frombuffer(text.buffers()[1], np.int64, len(text) + 1, text.offset * 8)
    return pa.Array.from_buffers(pa.large_string(), len(bounds) - 1,
                                 [None, pa.py_buffer(np.ascontiguousarray(token_ends[bounds])),
                                  text.buffers()[2] or pa.py_buffer(b"")])


def bulk_text(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, depth: int = 0,
              ) -> tuple[pa.Array, np.ndarray]:
    """JSON text of the JSONB values ``data[starts[i]:ends[i]]``, and which of them this path
    could not print (their texts are then empty; print those one by one). ``depth``: how
    deep in their top-level values these are (0: they are the top-level values)."""
    n = len(starts)
    slow = np.zeros(n, dtype=bool)
    levels: list[_Level] = []
    s, e, v = starts.astype(np.int64), ends.astype(np.int64), np.arange(n)
    while len(s):
        if len(levels) + depth > MAX_DEPTH:
            slow[v] = True
            break
        lvl = _read_level(data, s, e, v, slow, not levels and not depth)
        levels.append(lvl)
        cont = np.flatnonzero(lvl.vtyp == CONTAINER)
        entry = lvl.ventry[cont]
        s, e, v = lvl.start[entry], lvl.stop[entry], lvl.vvalue[cont]
    if not levels:
        return pa.array([""] * n, pa.large_string()), slow
    return _assemble(data, levels, slow), slow

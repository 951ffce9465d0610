"""JSONB: the binary JSON Lance stores in ``json`` columns, to and from JSON text.

Lance keeps JSON columns (logical type ``json``, extension ``lance.json`` over
``large_binary``) in the JSONB layout of the ``jsonb`` Rust crate; pylance converts text to
it on write and back to ``arrow.json`` text on read. All integers below are big endian.

A value is either a *container* or a *scalar*:

* a container starts with a u32 header: ``0x80000000 | n`` for an array of ``n`` items,
  ``0x40000000 | n`` for an object of ``n`` entries; a top-level scalar has the header
  ``0x20000000`` and exactly one entry;
* then one u32 *JEntry* per item (objects: the ``n`` keys' entries, then the ``n`` values'),
  then the items' bytes in the same order. A JEntry holds the type in bits 28..30 (0 null,
  1 string, 2 number, 3 false, 4 true, 5 container) and the item's byte length in bits
  0..27 (if bit 31 is set, those bits are instead the item's end offset within the data);
* strings are UTF-8 bytes; object keys are strings, sorted by their bytes, unique;
* a number is a tag byte and its value: ``0x00`` zero; ``0x40`` a negative integer and
  ``0x50`` a positive one, each in the fewest of 1, 2, 4 or 8 bytes; ``0x60`` an IEEE double
  (8 bytes). Integer literals outside the signed/unsigned 64-bit ranges and every literal
  with a fraction or exponent are doubles.

pylance prints the text back compactly (no spaces), keys in stored order, strings escaped
as JSON requires (non-ASCII kept), doubles in the shortest form that round-trips, with a
``.0`` on integral values below 1e16, and an exponent (``1e+16``, ``1e-6``) outside
``1e-5 <= |x| < 1e16``.

JSONB is a per-value format: no numpy or pyarrow kernel reads or writes it, so this module
converts value by value in Python. That is the only place alance does so; it is bounded by
:data:`MAX_VALUE_BYTES` per value and :data:`MAX_DEPTH` levels of nesting, and callers run it
off the event loop for large batches.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pyarrow as pa

from alance.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError

#: Largest JSON value (text or JSONB bytes) converted; larger values are refused.
MAX_VALUE_BYTES = 64 * 1024 * 1024
#: Deepest nesting of arrays and objects converted.
MAX_DEPTH = 128

_ARRAY, _OBJECT, _SCALAR = 0x80000000, 0x40000000, 0x20000000
_COUNT_MASK = 0x1FFFFFFF
_OFFSET_FLAG = 0x80000000
_LENGTH_MASK = 0x0FFFFFFF
_NULL, _STRING, _NUMBER, _FALSE, _TRUE, _CONTAINER = 0, 1, 2, 3, 4, 5
_NUM_ZERO, _NUM_INT, _NUM_UINT, _NUM_FLOAT = 0x00, 0x40, 0x50, 0x60
_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)


# -- JSONB -> text ---------------------------------------------------------------------------
def _float_text(x: float) -> str:
    text = repr(x)
    if text in ("inf", "-inf", "nan"):
        raise CorruptFileError("JSONB number is not finite")
    if "e" not in text:
        return text
    mantissa, exp_text = text.split("e")
    exp = int(exp_text)
    if exp == -5:  # pylance prints this decade without an exponent
        sign = "-" if mantissa.startswith("-") else ""
        return f"{sign}0.0000{mantissa.lstrip('-').replace('.', '')}"
    return f"{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"


def _number_text(data: bytes) -> str:
    if not data:
        raise CorruptFileError("empty JSONB number")
    tag, body = data[0], data[1:]
    if tag == _NUM_ZERO and not body:
        return "0"
    if tag == _NUM_INT and len(body) in (1, 2, 4, 8):
        return str(int.from_bytes(body, "big", signed=True))
    if tag == _NUM_UINT and len(body) in (1, 2, 4, 8):
        return str(int.from_bytes(body, "big", signed=False))
    if tag == _NUM_FLOAT and len(body) == 8:
        return _float_text(struct.unpack(">d", body)[0])
    raise UnsupportedFeatureError(f"JSONB number with tag {tag:#04x} and {len(body)} bytes")


def _string_text(data: bytes) -> str:
    try:
        return json.dumps(data.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError as exc:
        raise CorruptFileError(f"JSONB string is not UTF-8: {exc}") from exc


def _entries(buf: bytes, pos: int, count: int, end: int) -> tuple[list[tuple[int, int, int]],
                                                                   int]:
    """(type, start, stop) of ``count`` items whose JEntries start at ``pos``."""
    table = pos + 4 * count
    if table > end:
        raise CorruptFileError("JSONB entries run past the value")
    out = []
    start = table
    for entry in struct.unpack_from(f">{count}I", buf, pos):
        kind = (entry >> 28) & 0x7
        if entry & _OFFSET_FLAG:
            stop = table + (entry & _LENGTH_MASK)
        else:
            stop = start + (entry & _LENGTH_MASK)
        if stop < start or stop > end:
            raise CorruptFileError("JSONB item runs past its container")
        out.append((kind, start, stop))
        start = stop
    return out, start


def _item_text(buf: bytes, kind: int, start: int, stop: int, out: list[str],
               depth: int) -> None:
    if kind == _NULL:
        out.append("null")
    elif kind == _TRUE:
        out.append("true")
    elif kind == _FALSE:
        out.append("false")
    elif kind == _STRING:
        out.append(_string_text(buf[start:stop]))
    elif kind == _NUMBER:
        out.append(_number_text(buf[start:stop]))
    elif kind == _CONTAINER:
        _container_text(buf, start, stop, out, depth + 1)
    else:
        raise CorruptFileError(f"unknown JSONB entry type {kind}")


def _container_text(buf: bytes, pos: int, end: int, out: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise UnsupportedFeatureError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if pos + 4 > end:
        raise CorruptFileError("JSONB container is truncated")
    (header,) = struct.unpack_from(">I", buf, pos)
    kind, count = header & ~_COUNT_MASK, header & _COUNT_MASK
    if kind == _ARRAY:
        items, _ = _entries(buf, pos + 4, count, end)
        out.append("[")
        for i, (k, s, e) in enumerate(items):
            if i:
                out.append(",")
            _item_text(buf, k, s, e, out, depth)
        out.append("]")
    elif kind == _OBJECT:
        items, _ = _entries(buf, pos + 4, 2 * count, end)
        out.append("{")
        for i in range(count):
            k, s, e = items[i]
            if k != _STRING:
                raise CorruptFileError("JSONB object key is not a string")
            if i:
                out.append(",")
            out.append(_string_text(buf[s:e]))
            out.append(":")
            vk, vs, ve = items[count + i]
            _item_text(buf, vk, vs, ve, out, depth)
        out.append("}")
    elif kind == _SCALAR and depth == 0:
        items, _ = _entries(buf, pos + 4, 1, end)
        vk, vs, ve = items[0]
        _item_text(buf, vk, vs, ve, out, depth)
    else:
        raise CorruptFileError(f"unknown JSONB container header {header:#010x}")


def _float_value(data: bytes, specials: list[str]) -> Any:
    x = struct.unpack(">d", data)[0]
    text = repr(x)
    if "e-0" in text:  # an exponent Python writes differently from pylance
        specials.append(text)
    elif text in ("inf", "-inf", "nan"):
        raise CorruptFileError("JSONB number is not finite")
    return x


def _item_value(buf: bytes, kind: int, start: int, stop: int, depth: int,
                specials: list[str]) -> Any:
    if kind == _STRING:
        try:
            return buf[start:stop].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFileError(f"JSONB string is not UTF-8: {exc}") from exc
    if kind == _NUMBER:
        tag, size = (buf[start] if stop > start else -1), stop - start - 1
        if tag == _NUM_FLOAT and size == 8:
            return _float_value(buf[start + 1:stop], specials)
        if tag == _NUM_UINT and size in (1, 2, 4, 8):
            return int.from_bytes(buf[start + 1:stop], "big")
        if tag == _NUM_INT and size in (1, 2, 4, 8):
            return int.from_bytes(buf[start + 1:stop], "big", signed=True)
        return int(_number_text(buf[start:stop]))  # zero, or a typed error
    if kind == _CONTAINER:
        return _container_value(buf, start, stop, depth + 1, specials)
    if kind == _NULL:
        return None
    if kind == _TRUE:
        return True
    if kind == _FALSE:
        return False
    raise CorruptFileError(f"unknown JSONB entry type {kind}")


def _container_value(buf: bytes, pos: int, end: int, depth: int,
                     specials: list[str]) -> Any:
    if depth > MAX_DEPTH:
        raise UnsupportedFeatureError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if pos + 4 > end:
        raise CorruptFileError("JSONB container is truncated")
    (header,) = struct.unpack_from(">I", buf, pos)
    kind, count = header & ~_COUNT_MASK, header & _COUNT_MASK
    if kind == _ARRAY:
        items, _ = _entries(buf, pos + 4, count, end)
        return [_item_value(buf, k, s, e, depth, specials) for k, s, e in items]
    if kind == _OBJECT:
        items, _ = _entries(buf, pos + 4, 2 * count, end)
        out = {}
        for i in range(count):
            k, s, e = items[i]
            if k != _STRING:
                raise CorruptFileError("JSONB object key is not a string")
            vk, vs, ve = items[count + i]
            key = _item_value(buf, k, s, e, depth, specials)
            if key in out:  # never written by Lance; the slow path prints it as stored
                raise _DuplicateKey
            out[key] = _item_value(buf, vk, vs, ve, depth, specials)
        return out
    if kind == _SCALAR and depth == 0:
        items, _ = _entries(buf, pos + 4, 1, end)
        vk, vs, ve = items[0]
        return _item_value(buf, vk, vs, ve, depth, specials)
    raise CorruptFileError(f"unknown JSONB container header {header:#010x}")


class _DuplicateKey(Exception):
    pass


def to_text(value: bytes) -> str:
    """The JSON text pylance prints for one JSONB value."""
    if len(value) > MAX_VALUE_BYTES:
        raise UnsupportedFeatureError(f"JSONB value of {len(value)} bytes is over the "
                                      f"{MAX_VALUE_BYTES}-byte limit")
    try:
        # Fast path: Python objects printed by json's C encoder. Values holding a float
        # Python prints differently (exponents -5..-9), or a repeated key, take the slow
        # path, which prints item by item.
        specials: list[str] = []
        try:
            obj = _container_value(value, 0, len(value), 0, specials)
        except _DuplicateKey:
            obj, specials = None, ["slow"]
        if not specials:
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        out: list[str] = []
        _container_text(value, 0, len(value), out, 0)
        return "".join(out)
    except struct.error as exc:
        raise CorruptFileError(f"JSONB value is truncated: {exc}") from exc


# -- text -> JSONB ---------------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidInputError(f"JSON object has the key {key!r} more than once")
            seen.add(key)
    return out


def _reject_constant(name: str) -> Any:
    raise InvalidInputError(f"{name} is not valid JSON")


def _uint_bytes(v: int) -> bytes:
    width = 1 if v <= 0xFF else 2 if v <= 0xFFFF else 4 if v <= 0xFFFFFFFF else 8
    return bytes([_NUM_UINT]) + v.to_bytes(width, "big")


def _int_bytes(v: int) -> bytes:
    width = 1 if v >= -0x80 else 2 if v >= -0x8000 else 4 if v >= -0x80000000 else 8
    return bytes([_NUM_INT]) + v.to_bytes(width, "big", signed=True)


def _float_bytes(v: float) -> bytes:
    if v != v or v in (float("inf"), float("-inf")):
        raise InvalidInputError("JSON numbers must be finite")
    return bytes([_NUM_FLOAT]) + struct.pack(">d", v)


def _encode(v: Any, depth: int) -> tuple[int, bytes]:
    """(JEntry type, bytes) of one value."""
    if v is None:
        return _NULL, b""
    if v is True:
        return _TRUE, b""
    if v is False:
        return _FALSE, b""
    if isinstance(v, str):
        try:
            return _STRING, v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"JSON string is not valid Unicode: {exc}") from exc
    if isinstance(v, int):
        if v == 0:
            return _NUMBER, bytes([_NUM_ZERO])
        if 0 < v <= _U64_MAX:
            return _NUMBER, _uint_bytes(v)
        if _I64_MIN <= v < 0:
            return _NUMBER, _int_bytes(v)
        try:
            return _NUMBER, _float_bytes(float(v))
        except OverflowError as exc:
            raise InvalidInputError("JSON integer is too large for a double") from exc
    if isinstance(v, float):
        return _NUMBER, _float_bytes(v)
    if depth >= MAX_DEPTH:
        raise InvalidInputError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if isinstance(v, list):
        return _CONTAINER, _container(_ARRAY, [], [_encode(x, depth + 1) for x in v])
    if isinstance(v, dict):
        keys = sorted(v)
        return _CONTAINER, _container(_OBJECT, [(_STRING, k.encode("utf-8")) for k in keys],
                                      [_encode(v[k], depth + 1) for k in keys])
    raise InvalidInputError(f"not a JSON value: {type(v).__name__}")


def _entry(kind: int, data: bytes) -> bytes:
    if len(data) > _LENGTH_MASK:
        raise InvalidInputError("a JSON value is too large for JSONB (256 MiB per item)")
    return struct.pack(">I", (kind << 28) | len(data))


def _container(header: int, keys: list[tuple[int, bytes]],
               values: list[tuple[int, bytes]]) -> bytes:
    items = keys + values
    count = len(values)
    if count > _COUNT_MASK:
        raise InvalidInputError("a JSON container has too many items for JSONB")
    entries = [(k << 28) | len(d) for k, d in items]
    if any(len(d) > _LENGTH_MASK for _, d in items):
        raise InvalidInputError("a JSON value is too large for JSONB (256 MiB per item)")
    head = struct.pack(f">{1 + len(entries)}I", header | count, *entries)
    return head + b"".join([d for _, d in items])


def from_text(text: str) -> bytes:
    """The JSONB bytes pylance stores for one JSON text (:class:`InvalidInputError` if it is
    not JSON that Lance accepts: duplicate keys, NaN/Infinity, non-finite numbers)."""
    if len(text) > MAX_VALUE_BYTES:
        raise InvalidInputError(f"JSON text of {len(text)} characters is over the "
                                f"{MAX_VALUE_BYTES}-character limit")
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates,
                           parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidInputError("JSON is nested too deeply") from exc
    kind, data = _encode(value, 0)
    if kind == _CONTAINER:
        return data
    return struct.pack(">I", _SCALAR) + _entry(kind, data) + data


# -- Arrow arrays ----------------------------------------------------------------------------
def array_from_text(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """JSONB values (large_binary) of an array of JSON text (string or ``arrow.json``)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    values = storage.to_pylist()
    return pa.array([None if v is None else from_text(v) for v in values], pa.large_binary())


__all__ = ["MAX_DEPTH", "MAX_VALUE_BYTES", "array_from_text", "from_text", "to_text"]

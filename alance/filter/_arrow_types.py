"""Arrow type names as SQL filters write them in ``arrow_cast(value, 'Type')`` (the names
DataFusion displays: ``Int32``, ``Utf8``, ``FixedSizeList(32, Float32)``,
``Timestamp(Microsecond, None)``, ``List(Int64)``, ``Decimal128(10, 2)``, ...)."""

from __future__ import annotations

import re

import pyarrow as pa

from alance.errors import InvalidInputError

__all__ = ["arrow_type_name", "arrow_type_named"]

_SIMPLE = {
    "Null": pa.null(), "Boolean": pa.bool_(),
    "Int8": pa.int8(), "Int16": pa.int16(), "Int32": pa.int32(), "Int64": pa.int64(),
    "UInt8": pa.uint8(), "UInt16": pa.uint16(), "UInt32": pa.uint32(), "UInt64": pa.uint64(),
    "Float16": pa.float16(), "Float32": pa.float32(), "Float64": pa.float64(),
    "Utf8": pa.string(), "LargeUtf8": pa.large_string(), "Utf8View": pa.string_view(),
    "Binary": pa.binary(), "LargeBinary": pa.large_binary(), "BinaryView": pa.binary_view(),
    "Date32": pa.date32(), "Date64": pa.date64(),
}
_PARAMETERISED = frozenset({"List", "LargeList", "FixedSizeList", "FixedSizeBinary",
                            "Decimal128", "Decimal256", "Timestamp", "Time32", "Time64",
                            "Duration"})
_UNITS = {"Second": "s", "Millisecond": "ms", "Microsecond": "us", "Nanosecond": "ns"}
_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<num>-?\d+)|"
                    r"(?P<str>\"[^\"]*\")|(?P<punct>[(),]))")


def arrow_type_name(dtype: pa.DataType) -> str:
    """The name Arrow (and pylance's messages) give ``dtype`` (``Int32``, ``Utf8``...; other
    types by pyarrow's name)."""
    for name, simple in _SIMPLE.items():
        if dtype == simple:
            return name
    return str(dtype)


def arrow_type_named(text: str) -> pa.DataType:
    """The Arrow type ``text`` names (:class:`InvalidInputError` if it names none)."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise InvalidInputError(f"cannot read the Arrow type {text!r} (at {text[pos:]!r})")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    parser = _Parser(text, tokens)
    result = parser.type()
    if parser.at < len(tokens):
        raise InvalidInputError(f"cannot read the Arrow type {text!r}: unexpected "
                                f"{tokens[parser.at][1]!r}")
    return result


class _Parser:
    def __init__(self, text: str, tokens: list[tuple[str, str]]) -> None:
        self.text, self.tokens, self.at = text, tokens, 0

    def _next(self, kind: str | None = None, value: str | None = None) -> str:
        if self.at >= len(self.tokens):
            raise InvalidInputError(f"cannot read the Arrow type {self.text!r}: it ends early")
        k, v = self.tokens[self.at]
        if (kind and k != kind) or (value and v != value):
            raise InvalidInputError(f"cannot read the Arrow type {self.text!r}: expected "
                                    f"{value or kind}, found {v!r}")
        self.at += 1
        return v

    def _peek(self, value: str) -> bool:
        return self.at < len(self.tokens) and self.tokens[self.at][1] == value

    def type(self) -> pa.DataType:
        name = self._next("name")
        if name in _SIMPLE:
            return _SIMPLE[name]
        if name not in _PARAMETERISED:
            raise InvalidInputError(f"unknown Arrow type {name!r} in {self.text!r}")
        self._next("punct", "(")
        if name in ("List", "LargeList"):
            item = self._item()
            self._next("punct", ")")
            return pa.list_(item) if name == "List" else pa.large_list(item)
        if name == "FixedSizeList":
            size = int(self._next("num"))
            self._next("punct", ",")
            item = self._item()
            self._next("punct", ")")
            return pa.list_(item, size)
        if name == "FixedSizeBinary":
            size = int(self._next("num"))
            self._next("punct", ")")
            return pa.binary(size)
        if name in ("Decimal128", "Decimal256"):
            precision = int(self._next("num"))
            self._next("punct", ",")
            scale = int(self._next("num"))
            self._next("punct", ")")
            return (pa.decimal128 if name == "Decimal128" else pa.decimal256)(precision, scale)
        if name in ("Timestamp", "Time32", "Time64", "Duration"):
            unit = _UNITS.get(self._next("name"))
            if unit is None:
                raise InvalidInputError(f"unknown time unit in {self.text!r}")
            tz: str | None = None
            if name == "Timestamp" and self._peek(","):
                self._next("punct", ",")
                zone = self._next()
                tz = None if zone in ("None",) else zone.strip('"')
                if zone.startswith("Some"):
                    self._next("punct", "(")
                    tz = self._next("str").strip('"')
                    self._next("punct", ")")
            self._next("punct", ")")
            try:
                if name == "Timestamp":
                    return pa.timestamp(unit, tz)
                if name == "Duration":
                    return pa.duration(unit)
                return pa.time32(unit) if name == "Time32" else pa.time64(unit)
            except (ValueError, pa.ArrowInvalid) as exc:
                raise InvalidInputError(f"{self.text!r}: {exc}") from exc
        raise InvalidInputError(f"unknown Arrow type {name!r} in {self.text!r}")

    def _item(self) -> pa.DataType:
        # ``List(Int64)`` or the long form ``List(Field { name: "item", ... })`` is not
        # accepted; the short form is what filters use.
        return self.type()

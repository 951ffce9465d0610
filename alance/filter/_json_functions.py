"""JSON functions in filters, as pylance's SQL dialect names them.

``json_extract(j, '$.a.b')`` (the value's JSON text), ``json_exists(j, path)``,
``json_array_contains(j, path, value)``, ``json_array_length(j, path)``,
``json_get(j, key)`` (the member's JSON text, for chaining), and ``json_get_string`` /
``json_get_int`` / ``json_get_float`` / ``json_get_bool`` (the member, converted: ``"35"`` is
35 for ``json_get_int``). Paths are ``$`` followed by ``.name`` and ``[index]`` steps; a key
is a member name or an array index. A null document, a missing member or a value that does
not convert gives null.

They are pyarrow scalar UDFs over JSON text (a JSON column is compared as its text); each
document is parsed with :mod:`json`, so they cost Python time per row.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from alance.errors import InvalidInputError

__all__ = ["JSON_FUNCTIONS", "json_call"]

_MISSING = object()
_STEP = re.compile(r"\.([A-Za-z_][^.\[\]]*)|\[(\d+)\]|\['([^']*)'\]|\.\"([^\"]*)\"")


def parse_path(path: str) -> list[str | int]:
    """``$.a[0].b`` as steps (member names and array indices)."""
    text = path.strip()
    if not text.startswith("$"):
        raise InvalidInputError(f"JSON path {path!r} must start with '$'")
    steps: list[str | int] = []
    pos = 1
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None:
            raise InvalidInputError(f"cannot read the JSON path {path!r} at {text[pos:]!r}")
        name, index, quoted, dquoted = m.groups()
        steps.append(int(index) if index is not None else (name or quoted or dquoted or ""))
        pos = m.end()
    return steps


def _step(value: Any, step: str | int) -> Any:
    if isinstance(step, int) and isinstance(value, list):
        return value[step] if step < len(value) else _MISSING
    if isinstance(value, dict):
        key = str(step)
        return value.get(key, _MISSING)
    return _MISSING


def _walk(doc: Any, steps: list[str | int]) -> Any:
    for step in steps:
        doc = _step(doc, step)
        if doc is _MISSING:
            return _MISSING
    return doc


def _key(text: str) -> list[str | int]:
    return [int(text)] if text.isdigit() else [text]


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            try:
                number = float(value)
            except ValueError:
                return None
            return int(number) if number.is_integer() else None
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        lowered = value.strip().lower()
        return True if lowered in ("true", "1") else False if lowered in ("false", "0") else None
    return None


def _as_string(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, dict | list):
        return None if value is None else _dump(value)
    return _dump(value)


def _contains(array: Any, wanted: str) -> bool | None:
    if not isinstance(array, list):
        return None
    return any(item == wanted or _as_string(item) == wanted for item in array)


#: name -> (arguments after the document, result type, per-row function of (doc, *args)).
JSON_FUNCTIONS: dict[str, tuple[int, pa.DataType, Callable[..., Any]]] = {
    "json_extract": (1, pa.string(), lambda d, p: None if (v := _walk(d, parse_path(p)))
                     is _MISSING else _dump(v)),
    "json_exists": (1, pa.bool_(), lambda d, p: _walk(d, parse_path(p)) is not _MISSING),
    "json_array_contains": (2, pa.bool_(), lambda d, p, x: None if (
        v := _walk(d, parse_path(p))) is _MISSING else _contains(v, x)),
    "json_array_length": (1, pa.int64(), lambda d, p: len(v) if isinstance(
        v := _walk(d, parse_path(p)), list) else None),
    "json_get": (1, pa.string(), lambda d, k: None if (v := _walk(d, _key(k))) is _MISSING
                 else _dump(v)),
    "json_get_string": (1, pa.string(), lambda d, k: None if (v := _walk(d, _key(k)))
                        is _MISSING else _as_string(v)),
    "json_get_int": (1, pa.int64(), lambda d, k: None if (v := _walk(d, _key(k)))
                     is _MISSING else _as_int(v)),
    "json_get_float": (1, pa.float64(), lambda d, k: None if (v := _walk(d, _key(k)))
                       is _MISSING else _as_float(v)),
    "json_get_bool": (1, pa.bool_(), lambda d, k: None if (v := _walk(d, _key(k)))
                      is _MISSING else _as_bool(v)),
}
_REGISTERED: set[str] = set()
_LOCK = threading.Lock()


def _kernel(name: str) -> Callable[..., pa.Array]:
    _, out_type, fn = JSON_FUNCTIONS[name]

    def run(ctx: Any, docs: Any, *args: Any) -> pa.Array:
        texts = docs.to_pylist() if isinstance(docs, pa.Array) else [docs.as_py()]
        consts = [a.as_py() if isinstance(a, pa.Scalar) else a[0].as_py() for a in args]
        out: list[Any] = []
        for text in texts:
            if text is None:
                out.append(None)
                continue
            try:
                doc = json.loads(text)
            except ValueError:
                out.append(None)
                continue
            out.append(fn(doc, *consts))
        return pa.array(out, out_type)
    return run


def json_call(name: str, document: pc.Expression, args: list[str]) -> tuple[pc.Expression,
                                                                              pa.DataType]:
    """The expression calling JSON function ``name`` on ``document`` (JSON text) with
    constant string ``args``; and its result type."""
    arity, out_type, _ = JSON_FUNCTIONS[name]
    if len(args) != arity:
        raise InvalidInputError(f"{name} takes {arity + 1} arguments")
    if name in ("json_extract", "json_exists", "json_array_contains", "json_array_length"):
        parse_path(args[0])  # refuse a bad path now, not per row
    udf = f"alance_{name}"
    with _LOCK:
        if udf not in _REGISTERED:
            in_types = {"document": pa.string(),
                        **{f"arg{i}": pa.string() for i in range(arity)}}
            pc.register_scalar_function(
                _kernel(name), udf, {"summary": name, "description": "alance JSON function"},
                in_types, out_type)
            _REGISTERED.add(udf)
    return (pc.Expression._call(udf, [document, *(pc.scalar(a) for a in args)]), out_type)

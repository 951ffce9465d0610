"""The shape kernel (values that share shapes, printed by columns) prints exactly what the
per-value printer prints, and hands what it cannot print to the generic kernel."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alance.errors import AlanceError, CorruptFileError
from alance.format import jsonb, jsonb_shapes
from alance.format.jsonb_text import array_to_text

_INTS = [0, 1, -1, 7, 255, -256, 65536, 1 << 40, -(1 << 40), 2**63 - 1, -(2**63), 2**64 - 1]
_FLOATS = [0.5, -0.0, 0.0, 1.0, 100.0, 0.1, 1e15, 1e16, 1e17, 1e-4, 1e-5, 2.5e-7, 123.456,
           1e300, 5e-324, -3.75]
_TEXTS = ["", "ok", "user_12", "é", "日本", 'a"b', "line\nbreak", "back\\slash", "x" * 40]


def _vary(value: Any, rng: random.Random) -> Any:
    """``value`` with every leaf replaced by another leaf of its type (its shape kept)."""
    if isinstance(value, dict):
        return {k: _vary(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        return [_vary(v, rng) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return rng.choice(_INTS)
    if isinstance(value, float):
        return rng.choice(_FLOATS)
    return rng.choice(_TEXTS)


def _column(docs: list[Any]) -> pa.Array:
    return pa.array([None if d is None else jsonb.from_text(json.dumps(d)) for d in docs],
                    pa.large_binary())


def _per_value(column: pa.Array) -> list[str | None]:
    return [None if v is None else jsonb.to_text(v) for v in column.to_pylist()]


_keys = st.sampled_from(["id", "name", "a\"b", "é", "tags", "", "n"])
_leaf = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
         | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
_shape = st.recursive(_leaf, lambda kids: st.lists(kids, max_size=4)
                      | st.dictionaries(_keys, kids, max_size=5), max_leaves=12)


@settings(max_examples=40, deadline=None)
@given(st.lists(_shape, min_size=1, max_size=4), st.integers(0, 2**32 - 1),
       st.integers(4, 40))
def test_values_of_a_few_shapes_print_like_the_value_printer(
        templates: list[Any], seed: int, copies: int) -> None:
    rng = random.Random(seed)
    docs = [_vary(t, rng) for t in templates for _ in range(copies)]
    rng.shuffle(docs)
    docs[:: 7] = [None] * len(docs[:: 7])
    column = _column(docs)
    with pytest.MonkeyPatch.context() as patch:  # (shapes of a few rows printed by columns)
        patch.setattr(jsonb_shapes, "MIN_SHAPE_ROWS", 4)
        got = array_to_text(column).storage.to_pylist()
    assert got == _per_value(column)


def test_one_shape_is_printed_without_the_generic_kernel(monkeypatch) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("the generic kernel was called")

    monkeypatch.setattr(jsonb_shapes, "bulk_text", refuse)
    rng = random.Random(5)
    template = {"id": 1, "name": "n", "score": 0.5, "tags": ["a", "b"],
                "nested": {"x": 3, "ok": True, "n": None, "e": [], "o": {}}}
    docs = [_vary(template, rng) for _ in range(3 * jsonb_shapes.MIN_SHAPE_ROWS)]
    column = _column(docs)
    assert array_to_text(column).storage.to_pylist() == _per_value(column)


def test_rare_and_wide_shapes_go_through_the_generic_kernel() -> None:
    rng = random.Random(6)
    common = {"a": 1, "b": [1.5, "x"]}
    wide = {f"k{i}": i for i in range(jsonb_shapes.MAX_SHAPE_ITEMS + 1)}
    docs: list[Any] = [_vary(common, rng) for _ in range(jsonb_shapes.MIN_SHAPE_ROWS)]
    docs += [_vary(wide, rng) for _ in range(jsonb_shapes.MIN_SHAPE_ROWS)]
    docs += [{"rare": i} for i in range(5)] + [3, "top-level string", None, 2.5, [], {}]
    rng.shuffle(docs)
    column = _column(docs)
    assert array_to_text(column).storage.to_pylist() == _per_value(column)


@pytest.fixture
def by_columns(monkeypatch, shape_kernel_calls: dict[str, int]) -> dict[str, int]:
    """Shapes of a few objects printed by columns; how often each column path ran."""
    monkeypatch.setattr(jsonb_shapes, "MIN_SHAPE_ROWS", 8)
    return shape_kernel_calls


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except AlanceError as exc:
        return type(exc)


@pytest.mark.parametrize("damage", ["truncated", "nested header", "item length", "key type"])
def test_damaged_values_among_shapes_fail_as_the_value_printer_fails(
        damage: str, by_columns: dict[str, int]) -> None:
    docs = [{"k": i, "v": {"s": "abc", "t": [1, 2]}} for i in range(200)]
    values = [jsonb.from_text(json.dumps(d)) for d in docs]
    bad = bytearray(values[77])
    if damage == "truncated":
        bad = bad[:-3]
    elif damage == "nested header":
        at = bytes(bad).index(bytes.fromhex("40000002"), 4)  # the object {"s":..., "t":...}
        bad[at: at + 4] = bytes.fromhex("20000001")
    elif damage == "item length":
        bad[12:16] = (int.from_bytes(bad[12:16], "big") + 1000).to_bytes(4, "big")
    else:
        bad[4] = (bad[4] & 0x8F) | 0x20  # the first key's JEntry says: a number
    values[77] = bytes(bad)
    column = pa.array(values, pa.large_binary())
    expected = _outcome(lambda: [jsonb.to_text(v) for v in values])
    got = _outcome(lambda: array_to_text(column).storage.to_pylist())
    assert got == expected
    assert expected is CorruptFileError
    assert by_columns["objects"]


def test_integers_of_every_width_in_one_column() -> None:
    values = [0, 1, -1, 127, 128, -129, 40000, -40000, 2**31, -(2**31) - 1, 2**62, 2**63 - 1,
              -(2**63), 2**63, 2**64 - 1, 0.25, -2.0, 1e16]
    docs = [{"v": values[i % len(values)]} for i in range(10 * jsonb_shapes.MIN_SHAPE_ROWS)]
    column = _column(docs)
    got = array_to_text(column).storage.to_pylist()
    assert got == _per_value(column)
    assert got[: len(values)] == [json.dumps({"v": v}, separators=(",", ":")) for v in values]


def test_offsets_past_the_data_are_not_read() -> None:
    docs = [{"a": "x" * (i % 5)} for i in range(300)]
    column = _column(docs)
    data = np.frombuffer(column.buffers()[2], np.uint8)
    offsets = np.frombuffer(column.buffers()[1], np.int64, len(column) + 1)
    texts, slow = jsonb_shapes.shaped_text(data, offsets[:-1], offsets[1:])
    assert not slow.any()
    assert texts.to_pylist() == _per_value(column)


def test_arrays_of_every_kind_print_as_lists(by_columns: dict[str, int]) -> None:
    rng = random.Random(8)
    docs: list[Any] = []
    for i in range(400):
        n = i % 12  # (beyond SHORT_ARRAY items too: entries gathered by ranges)
        docs.append({"s": [rng.choice(_TEXTS) for _ in range(n)],
                     "f": [rng.choice(_FLOATS) for _ in range(n)],
                     "mixed": [1, "a", None, True, 2.5, [], {}, [1, [2]], {"k": "v"}][: n],
                     "objs": [{"a": j, "b": [j, "x"]} for j in range(n % 3)]})
    docs += [[1, 2, 3], [], ["top", "level"], [[], [[]]]]
    column = _column(docs)
    assert array_to_text(column).storage.to_pylist() == _per_value(column)
    assert by_columns["arrays"] and by_columns["objects"]


@pytest.mark.parametrize("damage", ["item type", "item length"])
def test_damaged_arrays_fail_as_the_value_printer_fails(damage: str,
                                                        by_columns: dict[str, int]) -> None:
    values = [jsonb.from_text(json.dumps({"a": ["x", "yz"], "i": i})) for i in range(300)]
    bad = bytearray(values[123])
    at = bytes(bad).index(bytes.fromhex("80000002"))  # the array's header
    entry = at + 4
    if damage == "item type":
        bad[entry] = (bad[entry] & 0x8F) | 0x70
    else:
        bad[entry + 4: entry + 8] = (int.from_bytes(bad[entry + 4: entry + 8], "big")
                                     + 500).to_bytes(4, "big")
    values[123] = bytes(bad)
    column = pa.array(values, pa.large_binary())
    expected = _outcome(lambda: [jsonb.to_text(v) for v in values])
    assert expected is CorruptFileError
    assert _outcome(lambda: array_to_text(column).storage.to_pylist()) == expected
    assert by_columns["arrays"]


def test_values_of_one_key_may_differ_in_type(by_columns: dict[str, int]) -> None:
    rng = random.Random(9)
    kinds: list[Any] = [None, True, False, 7, -2.5, 2**64 - 1, "s", 'q"uote', [1, "a"], [],
                        {"x": 1}, {}]
    docs = [{"flag": rng.choice([True, False]), "v": rng.choice(kinds),
             "n": rng.choice([None, False, True]), "id": i} for i in range(500)]
    column = _column(docs)
    assert array_to_text(column).storage.to_pylist() == _per_value(column)
    assert by_columns["objects"]

"""The column kernel for JSONB -> JSON text prints exactly what the per-value printer prints."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alance.errors import CorruptFileError
from alance.format import jsonb
from alance.format.jsonb_text import BULK_MIN_VALUES, array_to_text

_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=12))
_values = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=5)
                       | st.dictionaries(st.text(max_size=6), kids, max_size=5), max_leaves=20)


def _column(docs: list[object | None]) -> pa.Array:
    return pa.array([None if d is None else jsonb.from_text(json.dumps(d)) for d in docs],
                    pa.large_binary())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.none() | _values, min_size=BULK_MIN_VALUES,
                max_size=3 * BULK_MIN_VALUES))
def test_column_kernel_prints_what_the_value_printer_prints(docs: list[object | None]) -> None:
    column = _column(docs)
    got = array_to_text(column).storage.to_pylist()
    assert got == [None if v is None else jsonb.to_text(v) for v in column.to_pylist()]


#: Few keys, so objects repeat their key sets (the kernel prints each set once), one needing
#: an escape and one beyond ASCII.
_keys = st.sampled_from(["id", "name", "a\"b", "é", "tags", ""])
_shaped = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=3)
                       | st.dictionaries(_keys, kids, max_size=4), max_leaves=10)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.none() | _shaped, min_size=BULK_MIN_VALUES, max_size=3 * BULK_MIN_VALUES))
def test_objects_sharing_keys_print_like_the_value_printer(docs: list[object | None]) -> None:
    column = _column(docs)
    got = array_to_text(column).storage.to_pylist()
    assert got == [None if v is None else jsonb.to_text(v) for v in column.to_pylist()]


def test_floats_and_integers_at_the_edges() -> None:
    values = [0.0, -0.0, 1.0, 100.0, 1e15, 1e16, 1e17, 1.5e-5, 1e-5, 1e-4, 1e-6, 2.5e-7, 0.1,
              123.456, 9999999999999998.0,
              2**63 - 1, -(2**63), 2**64 - 1, 0, -1, 255, 65536, 1e300, 5e-324]
    docs = [[v] for v in values] * 4
    column = _column(docs)
    got = array_to_text(column).storage.to_pylist()
    assert got == [jsonb.to_text(v) for v in column.to_pylist()]


def test_damaged_values_raise_the_per_value_error() -> None:
    good = [jsonb.from_text('{"a":[1,2]}')] * BULK_MIN_VALUES
    column = pa.array([*good, b"\x80\x00\x00\x05\x00"], pa.large_binary())
    with pytest.raises(CorruptFileError):
        array_to_text(column)


def test_columns_beyond_the_piece_size_convert_in_pieces(monkeypatch) -> None:
    from alance.format import jsonb_text
    monkeypatch.setattr(jsonb_text, "PIECE_BYTES", 1000)
    docs = [{"i": i, "s": "x" * (i % 7)} if i % 5 else None for i in range(500)]
    column = _column(docs)
    got = array_to_text(column).storage.to_pylist()
    assert got == [None if v is None else jsonb.to_text(v) for v in column.to_pylist()]


def test_double_texts_match_pythons_repr_across_magnitudes() -> None:
    import numpy as np

    from alance.format.jsonb import _float_text
    from alance.format.jsonb_bulk import double_texts
    rng = np.random.default_rng(11)
    values = np.concatenate([
        10.0 ** rng.uniform(-8, 20, 20_000), -np.trunc(10.0 ** rng.uniform(0, 17, 5_000)),
        np.round(10.0 ** rng.uniform(-5, 12, 5_000), 2),
        [0.0, -0.0, 1e16, 1e-4, 9.99e-5, 1e10, 9999999999.5, 5e-324, 1.7976931348623157e308]])
    assert double_texts(values).to_pylist() == [_float_text(v) for v in values.tolist()]

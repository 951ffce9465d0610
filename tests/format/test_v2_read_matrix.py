"""A generated matrix of pylance-written 2.x datasets that alance must read identically.

pylance 14 writes every file version it supports ({2.0, 2.1, 2.2}) for every kind of data
(:data:`FLAVORS`: nulls, empties, nested nulls, long values, large lists, low cardinality,
random) over every type of the schema spec that version can hold, at 0, 1 and many rows (and
1M rows for a few types). alance must return what pylance returns for a full read, a
projection, a take of random rows and a filter. Data is generated from fixed seeds, and each
dataset is written once per test session (lazily, on first use).
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from alance import sync as al

VERSIONS = ("2.0", "2.1", "2.2")
MANY = 50_000  # rows of the "many rows" datasets (fewer for the heavy flavors below)

# -- value generators (vectorised; a few small Python list builds for nested values) ------


def _mask(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    return rng.random(n) < p


def _ints(rng: np.random.Generator, n: int, dtype: str, flavor: str) -> np.ndarray:
    info = np.iinfo(dtype)
    if flavor == "dict":
        return rng.integers(0, 4, n).astype(dtype) + np.array(info.max // 2, dtype)
    if flavor == "empties":
        return np.zeros(n, dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def _strings(rng: np.random.Generator, n: int, flavor: str) -> list[str]:
    if flavor == "dict":
        words = ["alpha", "beta", "gamma", "", "delta-delta"]
        return [words[i] for i in rng.integers(0, len(words), n)]
    if flavor == "empties":
        return [""] * n
    if flavor == "long":
        big = rng.integers(97, 123, 1_100_000, dtype=np.uint8).tobytes().decode()
        return [f"{i}{big}" if i % 10 == 3 else f"s{i}" for i in range(n)]
    lens = rng.integers(0, 40, n)
    pool = rng.integers(32, 127, int(lens.sum()), dtype=np.uint8).tobytes().decode()
    ends = np.cumsum(lens)
    return [pool[e - k: e] for e, k in zip(ends.tolist(), lens.tolist(), strict=True)]


def _with_nulls(arr: pa.Array, rng: np.random.Generator, flavor: str) -> pa.Array:
    if flavor not in ("nulls", "nested_nulls", "random") or len(arr) == 0:
        return arr
    p = {"nulls": 0.3, "nested_nulls": 0.1, "random": 0.05}[flavor]
    mask = pa.array(_mask(rng, len(arr), p))
    if pa.types.is_struct(arr.type):
        # Struct-level nulls: rebuild with a validity bitmap.
        return pa.StructArray.from_arrays(arr.flatten(), fields=list(arr.type), mask=mask)
    if pa.types.is_fixed_size_list(arr.type):
        return pa.FixedSizeListArray.from_arrays(arr.values, arr.type.list_size, mask=mask)
    return pa.compute.if_else(mask, pa.scalar(None, arr.type), arr)


def _list_lengths(rng: np.random.Generator, n: int, flavor: str) -> np.ndarray:
    if flavor == "empties":
        return np.zeros(n, np.int64)
    if flavor == "large_lists":
        return rng.integers(0, 4000, n)
    return rng.integers(0, 6, n)


def _list_array(rng: np.random.Generator, n: int, flavor: str, values: pa.Array,
                large: bool = False) -> pa.Array:
    lens = _list_lengths(rng, n, flavor)
    offsets = np.concatenate(([0], np.cumsum(lens)))
    items = values.slice(0, int(offsets[-1])) if len(values) >= offsets[-1] else values
    if len(items) < offsets[-1]:
        raise AssertionError("not enough list items generated")
    cls = pa.LargeListArray if large else pa.ListArray
    off = pa.array(offsets, pa.int64() if large else pa.int32())
    return cls.from_arrays(off, items)


def _item_ints(rng: np.random.Generator, k: int, flavor: str) -> pa.Array:
    vals = pa.array(_ints(rng, k, "int32", "dict" if flavor == "dict" else "random"))
    if flavor in ("nested_nulls", "nulls"):
        vals = pa.compute.if_else(pa.array(_mask(rng, k, 0.25)), pa.scalar(None, pa.int32()),
                                  vals)
    return vals


Gen = Callable[[np.random.Generator, int, str], pa.Array | None]


def _fixed(dtype: str, arrow: pa.DataType | None = None) -> Gen:
    def gen(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
        vals = _ints(rng, n, dtype, flavor)
        arr = pa.array(vals)
        return arr if arrow is None else arr.cast(arrow)
    return gen


def _float(dtype: str) -> Gen:
    def gen(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
        if flavor == "dict":
            vals = rng.integers(0, 3, n).astype(dtype) / 2
        elif flavor == "empties":
            vals = np.zeros(n, dtype)
        else:
            vals = (rng.standard_normal(n) * 1000).astype(dtype)
            if n > 8 and flavor == "random":
                vals[:4] = np.array([np.nan, np.inf, -np.inf, -0.0], dtype)
        return pa.array(vals)
    return gen


def _bool(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    if flavor == "dict":
        return pa.array(np.ones(n, bool))
    return pa.array(rng.random(n) < 0.4)


def _decimal(width: int) -> Gen:
    def gen(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
        ints = _ints(rng, n, "int64", flavor) // 7
        typ = pa.decimal128(25, 3) if width == 128 else pa.decimal256(45, 5)
        return pa.array(ints).cast(pa.decimal128(25, 0)).cast(typ) if width == 128 else \
            pa.array([decimal.Decimal(int(v)) / 1000 for v in ints.tolist()], typ)
    return gen


def _time(arrow: pa.DataType, mod: int, dtype: str) -> Gen:
    def gen(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
        vals = np.abs(_ints(rng, n, dtype, flavor)) % mod
        return pa.array(vals.astype(dtype)).cast(arrow)
    return gen


def _string(arrow: pa.DataType) -> Gen:
    def gen(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
        vals = _strings(rng, n, flavor)
        if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
            return pa.array([v.encode() for v in vals], arrow)
        return pa.array(vals, arrow)
    return gen


def _fsb(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    raw = _ints(rng, n * 2, "uint64", flavor).tobytes()
    return pa.Array.from_buffers(pa.binary(16), n, [None, pa.py_buffer(raw)])


def _list_int(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    lens_cap = 4000 * n if flavor == "large_lists" else 6 * n
    return _list_array(rng, n, flavor, _item_ints(rng, lens_cap, flavor))


def _large_list_str(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    cap = 4000 * n if flavor == "large_lists" else 6 * n
    sub = "dict" if flavor in ("dict", "large_lists") else flavor
    items = pa.array(_strings(rng, cap, "random" if sub == "long" else sub), pa.string())
    if flavor == "nested_nulls":
        items = pa.compute.if_else(pa.array(_mask(rng, cap, 0.3)), pa.scalar(None, pa.string()),
                                   items)
    return _list_array(rng, n, flavor, items, large=True)


def _fsl(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    dim = 8
    vals = pa.array(rng.standard_normal(n * dim).astype(np.float32) if flavor != "dict"
                    else rng.integers(0, 2, n * dim).astype(np.float32))
    if flavor == "nested_nulls":
        vals = pa.compute.if_else(pa.array(_mask(rng, n * dim, 0.2)),
                                  pa.scalar(None, pa.float32()), vals)
    return pa.FixedSizeListArray.from_arrays(vals, dim)


def _vec(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    """Wide vectors (stored full-zip in 2.1+) with some null items."""
    dim = 300
    vals = pa.array(rng.standard_normal(n * dim).astype(np.float32))
    vals = pa.compute.if_else(pa.array(_mask(rng, n * dim, 0.1)), pa.scalar(None, pa.float32()),
                              vals)
    return pa.FixedSizeListArray.from_arrays(vals, dim)


def _packed(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    """A struct of fixed-width fields, stored packed (see :data:`PACKED`)."""
    return pa.StructArray.from_arrays(
        [pa.array(_ints(rng, n, "int32", flavor)), pa.array(_float("float64")(rng, n, "dict")),
         pa.array(_ints(rng, n, "uint8", flavor)),
         pa.array(_ints(rng, n, "int64", flavor)).cast(pa.timestamp("ms"))],
        names=["a", "b", "c", "d"])


def _struct(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    a = pa.array(_ints(rng, n, "int32", flavor))
    s = pa.array(_strings(rng, n, "random" if flavor == "long" else flavor), pa.string())
    inner_x = pa.array(_float("float64")(rng, n, "nulls" if flavor == "random" else flavor))
    if flavor == "nested_nulls":
        a = _with_nulls(a, rng, "nulls")
        inner_x = _with_nulls(inner_x, rng, "nulls")
    inner = pa.StructArray.from_arrays([inner_x], names=["x"])
    if flavor == "nested_nulls":
        inner = _with_nulls(inner, rng, "nulls")
    return pa.StructArray.from_arrays([a, s, inner], names=["a", "s", "inner"])


def _map(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    lens = _list_lengths(rng, n, "random" if flavor == "large_lists" else flavor)
    k = int(lens.sum())
    keys = pa.array([f"k{i}" for i in rng.integers(0, 50, k)], pa.string())
    vals = pa.array(_ints(rng, k, "int64", flavor))
    if flavor in ("nulls", "nested_nulls"):
        vals = _with_nulls(vals, rng, "nulls")
    offsets = pa.array(np.concatenate(([0], np.cumsum(lens))).astype(np.int32))
    return pa.MapArray.from_arrays(offsets, keys, vals)


def _dictionary(rng: np.random.Generator, n: int, flavor: str) -> pa.Array:
    return pa.array(_strings(rng, n, "dict" if flavor != "empties" else flavor),
                    pa.string()).dictionary_encode()


#: column name -> (generator, oldest version that can hold it)
TYPES: dict[str, tuple[Gen, str]] = {
    "i8": (_fixed("int8"), "2.0"), "i16": (_fixed("int16"), "2.0"),
    "i32": (_fixed("int32"), "2.0"), "i64": (_fixed("int64"), "2.0"),
    "u8": (_fixed("uint8"), "2.0"), "u16": (_fixed("uint16"), "2.0"),
    "u32": (_fixed("uint32"), "2.0"), "u64": (_fixed("uint64"), "2.0"),
    "f16": (_float("float16"), "2.0"), "f32": (_float("float32"), "2.0"),
    "f64": (_float("float64"), "2.0"), "bool": (_bool, "2.0"),
    "dec128": (_decimal(128), "2.0"), "dec256": (_decimal(256), "2.0"),
    "date32": (_time(pa.date32(), 100_000, "int32"), "2.0"),
    "date64": (lambda r, n, f: pa.array(
        (np.abs(_ints(r, n, "int32", f)).astype(np.int64) % 100_000) * 86_400_000
    ).cast(pa.date64()), "2.0"),
    "t32s": (_time(pa.time32("s"), 86_400, "int32"), "2.0"),
    "t32ms": (_time(pa.time32("ms"), 86_400_000, "int32"), "2.0"),
    "t64us": (_time(pa.time64("us"), 86_400 * 10**6, "int64"), "2.0"),
    "t64ns": (_time(pa.time64("ns"), 86_400 * 10**9, "int64"), "2.0"),
    **{f"ts_{u}": (_fixed("int64", pa.timestamp(u)), "2.0") for u in ("s", "ms", "us", "ns")},
    "ts_tz": (_fixed("int64", pa.timestamp("us", tz="America/New_York")), "2.0"),
    **{f"dur_{u}": (_fixed("int64", pa.duration(u)), "2.0") for u in ("s", "ms", "us", "ns")},
    "str": (_string(pa.string()), "2.0"), "lstr": (_string(pa.large_string()), "2.0"),
    "bin": (_string(pa.binary()), "2.0"), "lbin": (_string(pa.large_binary()), "2.0"),
    "fsb": (_fsb, "2.0"),
    "list": (_list_int, "2.0"), "llist": (_large_list_str, "2.0"),
    "fsl": (_fsl, "2.0"), "vec": (_vec, "2.0"), "struct": (_struct, "2.0"),
    "packed": (_packed, "2.0"),
    "map": (_map, "2.2"), "dict": (_dictionary, "2.0"),
}

#: Columns written with field metadata asking for a packed struct.
PACKED = {"packed": {"lance-encoding:packed": "true"}}

#: flavor -> rows of its "many" dataset and which columns it applies to (None: all)
FLAVORS: dict[str, tuple[int, tuple[str, ...] | None]] = {
    "nulls": (MANY, None),
    "empties": (MANY, None),
    "nested_nulls": (MANY, ("list", "llist", "fsl", "struct", "map", "i32", "str", "packed")),
    "long": (40, ("str", "lstr", "bin", "lbin", "llist", "struct", "vec")),
    "large_lists": (1000, ("list", "llist", "map", "i64", "vec")),
    "dict": (MANY, None),
    "random": (MANY, None),
}


def make_table(version: str, flavor: str, n: int, seed: int = 0) -> pa.Table:
    """The deterministic table of one matrix cell (plus an ``id`` column)."""
    _, only = FLAVORS[flavor]
    cols: dict[str, pa.Array] = {"id": pa.array(np.arange(n, dtype=np.int64))}
    for i, (name, (gen, oldest)) in enumerate(TYPES.items()):
        if version < oldest or (only is not None and name not in only):
            continue
        rng = np.random.default_rng([seed, i, n, len(flavor)])
        arr = gen(rng, n, flavor)
        if arr is None:
            continue
        arr = _with_nulls(arr, rng, flavor)
        if version == "2.0" and pa.types.is_struct(arr.type):
            arr = _no_struct_nulls(arr)  # pylance refuses struct-level nulls in 2.0
        cols[name] = arr
    fields = [pa.field(k, v.type, metadata=PACKED.get(k)) for k, v in cols.items()]
    return pa.table(list(cols.values()), schema=pa.schema(fields))


def _no_struct_nulls(arr: pa.StructArray) -> pa.StructArray:
    kids = [arr.field(i) for i in range(arr.type.num_fields)]
    kids = [_no_struct_nulls(k) if pa.types.is_struct(k.type) else k for k in kids]
    return pa.StructArray.from_arrays(kids, fields=list(arr.type))


# -- the cache of written datasets ----------------------------------------------------------


class Matrix:
    """Writes matrix datasets with pylance on first use (one directory per cell)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.uris: dict[tuple[str, str, int], str] = {}

    def uri(self, version: str, flavor: str, n: int) -> str:
        key = (version, flavor, n)
        if key not in self.uris:
            path = self.root / f"{flavor}-{version}-{n}"
            table = make_table(version, flavor, n)
            lance.write_dataset(table, str(path), data_storage_version=version)  # type: ignore[arg-type]
            self.uris[key] = str(path)
        return self.uris[key]


@pytest.fixture(scope="session")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    return Matrix(tmp_path_factory.mktemp("v2_matrix"))


def _same(got: pa.Table, want: pa.Table, what: str) -> None:
    assert got.schema.names == want.schema.names, what
    assert got.num_rows == want.num_rows, what
    for name in want.column_names:
        a, b = got.column(name).combine_chunks(), want.column(name).combine_chunks()
        if pa.types.is_dictionary(b.type):  # dictionaries may be ordered apart
            assert a.type == b.type, (what, name)
            a, b = a.cast(b.type.value_type), b.cast(b.type.value_type)
        assert a.type == b.type, (what, name, a.type, b.type)
        if pa.types.is_floating(b.type):  # bit-exact, so NaN equals NaN
            width = b.type.bit_width
            a, b = (x.view(pa.int16() if width == 16 else pa.int32() if width == 32
                           else pa.int64()) for x in (a, b))
        assert a.equals(b), f"{what}: column {name!r} differs"


def _check_all(uri: str, seed: int) -> None:
    theirs, ours = lance.dataset(uri), al.open_dataset(uri)
    want = theirs.to_table()
    n = want.num_rows
    _same(ours.to_table(), want, "to_table")
    names = want.column_names
    cols = names[::-3][:4] or names
    _same(ours.to_table(columns=cols), theirs.to_table(columns=cols), "projection")
    if n:
        rng = np.random.default_rng(seed)
        idx = rng.choice(n, min(n, 300), replace=False)
        idx = np.concatenate([idx, idx[:3], [0, n - 1]])
        _same(ours.take(idx, columns=cols), want.select(cols).take(pa.array(idx)), "take")
    flt = f"id % 3 = 1 OR id > {n - 5}"
    _same(ours.to_table(filter=flt), theirs.to_table(filter=flt), "filter")


CELLS = [(v, f) for v in VERSIONS for f in FLAVORS]


@pytest.mark.parametrize(("version", "flavor"), CELLS)
def test_many_rows(matrix: Matrix, version: str, flavor: str) -> None:
    rows, _ = FLAVORS[flavor]
    _check_all(matrix.uri(version, flavor, rows), seed=rows)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [0, 1])
def test_tiny(matrix: Matrix, version: str, n: int) -> None:
    for flavor in ("nulls", "random", "empties"):
        _check_all(matrix.uri(version, flavor, n), seed=n)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_million_rows(tmp_path: Path, version: str) -> None:
    n = 1_000_000
    rng = np.random.default_rng(11)
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "i32": _with_nulls(pa.array(_ints(rng, n, "int32", "random")), rng, "nulls"),
        "low": _string(pa.string())(rng, n, "dict"),
        "list": _list_int(rng, n, "random"),
    })
    uri = str(tmp_path / "m")
    lance.write_dataset(table, uri, data_storage_version=version)  # type: ignore[arg-type]
    _check_all(uri, seed=5)


def test_variable_packed_struct(tmp_path: Path) -> None:
    """2.2 packs structs with variable-width fields row by row (full-zip) when asked to."""
    n = 20_000
    rng = np.random.default_rng(3)
    lens = rng.integers(0, 60, n)
    for nulls in (False, True):
        st = pa.StructArray.from_arrays(
            [pa.array(_ints(rng, n, "int32", "random")),
             pa.array([f"s{i}" * int(k) for i, k in enumerate(lens.tolist())])],
            names=["a", "s"], mask=pa.array(_mask(rng, n, 0.2)) if nulls else None)
        field = pa.field("p", st.type, metadata={"packed": "true"})
        table = pa.table({"p": st}, schema=pa.schema([field]))
        uri = str(tmp_path / f"vp{nulls}")
        lance.write_dataset(table, uri, data_storage_version="2.2")
        ours = al.open_dataset(uri)
        # pylance 14 reads this file back only on its own (not next to other columns, nor
        # through a filter), so the input is the oracle here, and pylance where it can.
        _same(ours.to_table(), lance.dataset(uri).to_table(), "to_table")
        assert ours.to_table().column("p").combine_chunks().equals(st)
        idx = rng.choice(n, 300, replace=False)
        assert ours.take(idx).column("p").combine_chunks().equals(st.take(pa.array(idx)))


@pytest.mark.parametrize("version", VERSIONS)
def test_blob_columns_read_as_descriptors(tmp_path: Path, version: str) -> None:
    """Blob columns read as pylance's descriptors (bytes: tests/test_blobs.py); the other
    columns of the dataset still read."""
    n = 50
    blob = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    table = pa.table({"id": pa.array(np.arange(n)),
                      "b": pa.array([bytes(i % 7) * i for i in range(n)], pa.large_binary())},
                     schema=pa.schema([pa.field("id", pa.int64()), blob]))
    uri = str(tmp_path / "blob")
    lance.write_dataset(table, uri, data_storage_version=version)  # type: ignore[arg-type]
    ours = al.open_dataset(uri)
    assert ours.to_table().equals(lance.dataset(uri).to_table())
    assert ours.take([7, 2]).equals(lance.dataset(uri).take([7, 2]))
    _same(ours.to_table(columns=["id"]), lance.dataset(uri).to_table(columns=["id"]), "id")

"""Compression in the 2.1 / 2.2 writer: bit-packed values and levels, dictionary strings and
zstd-compressed variable-width chunks. Every file is read back by pylance and by alance
(whole table and random rows), and the pages are checked to use the encoding expected."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from alance import sync as al
from alance.format.legacy.plan import fetch_from, run_plan
from alance.format.v2 import open_file
from alance.format.v2.encode_compress import bitpack, fastlanes_pack, pack_levels, rle
from alance.format.v2.kernels import unpack_fastlanes
from tests.format.test_v2_read_matrix import _same

VERSIONS = ("2.1", "2.2")
I64 = np.iinfo(np.int64)
RNG = np.random.default_rng(11)


# -- kernels ----------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [8, 16, 32, 64])
def test_fastlanes_pack_undone_by_the_reader(t: int) -> None:
    dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[t]
    for w in range(t + 1):
        vals = (RNG.integers(0, 2**w, (3, 1024), dtype=np.uint64, endpoint=False)
                if w < 64 else RNG.integers(0, 2**63, (3, 1024), dtype=np.uint64) * 2 + 1)
        vals = vals.astype(dtype)
        packed = fastlanes_pack(vals, w)
        assert packed.shape == (3, w * 1024 // t)
        assert np.array_equal(unpack_fastlanes(packed, t, w), vals), (t, w)


def test_bitpack_widths_per_chunk() -> None:
    vals = np.zeros(3000, np.int64)
    vals[:1024] = 5  # 3 bits
    vals[1024:2048] = np.arange(1024)  # 10 bits
    vals[2050] = -1  # negative: every bit
    coded = bitpack(vals.view(np.uint8).reshape(-1, 8), 8)
    assert coded is not None
    words = coded.datas[0].view("<u8")
    first_words = coded.offsets[0][:-1] // 8
    assert words[first_words].tolist() == [3, 10, 64]
    assert coded.sizes[0].tolist() == [8 * (1 + 3 * 16), 8 * (1 + 10 * 16), 8 * (1 + 64 * 16)]
    # Nothing saved: not bit-packed.
    assert bitpack(np.full(10, -1, np.int64).view(np.uint8).reshape(-1, 8), 8) is None


def test_levels_tail_raw_or_padded() -> None:
    levels = (np.arange(2084) % 2).astype(np.uint16)
    # Chunks of 1024 + 1000 levels (the tail padded: cheaper) and of 60 (kept raw: 60 u16
    # take less than a padded 1-bit block).
    i0, i1 = np.array([0, 2024]), np.array([2024, 2084])
    enc, pieces = pack_levels(levels, i0, i1) or (None, [])
    assert enc is not None and enc.out_of_line_bitpacking.values.flat.bits_per_value == 1
    assert [len(p) for p in pieces] == [2 * 128, 60 * 2]
    assert np.array_equal(pieces[1].view("<u2"), levels[2024:])
    assert np.array_equal(unpack_fastlanes(pieces[0].view("<u2").reshape(2, 64), 16, 1)
                          .reshape(-1)[:2024], levels[:2024])
    assert pack_levels(levels[:1024], i0[:1], np.array([1024])) is None


# -- files ------------------------------------------------------------------------------------
def _encodings(uri: str) -> list[set[str]]:
    """Per column, the encodings of its pages (value compression, + dict, + level kinds)."""
    out: list[set[str]] = []
    for path in sorted(Path(uri, "data").glob("*.lance")):
        data = path.read_bytes()
        f = run_plan(open_file(len(data)), fetch_from(data))
        for c in range(f.num_columns):
            if c >= len(out):
                out.append(set())
            for page in f.column(c).pages:
                which = page.encoding.WhichOneof("layout")
                sub = getattr(page.encoding, which)
                if which != "mini_block_layout":
                    out[c].add(which)
                    continue
                enc = sub.value_compression
                name = enc.WhichOneof("compression")
                if name == "general":
                    name += ":" + enc.general.values.WhichOneof("compression")
                out[c].add(name)
                if sub.HasField("dictionary"):
                    out[c].add("dictionary")
                for lv in ("rep_compression", "def_compression"):
                    if sub.HasField(lv):
                        out[c].add(f"{lv[:3]}:{getattr(sub, lv).WhichOneof('compression')}")
    return out


def _roundtrip(table: pa.Table, uri: str, version: str) -> list[set[str]]:
    al.write_dataset(table, uri, data_storage_version=version)
    theirs = lance.dataset(uri).to_table()
    assert theirs.schema.equals(table.schema)
    _same(theirs, table, "pylance reads")
    ds = al.open_dataset(uri)
    _same(ds.to_table(), table, "alance reads")
    if table.num_rows:
        idx = np.unique(RNG.integers(0, table.num_rows, min(50, table.num_rows)))
        _same(ds.take(idx.tolist()), table.take(idx), "alance takes")
        _same(lance.dataset(uri).take(idx.tolist()), table.take(idx), "pylance takes")
    return _encodings(uri)


INT_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def _int_cases(dtype: str, n: int) -> dict[str, Callable[[], pa.Array]]:
    info = np.iinfo(dtype)
    np_t = np.dtype(dtype)
    return {
        "seq": lambda: pa.array((np.arange(n) // 64).astype(np_t)),
        "wrap": lambda: pa.array((np.arange(n) % min(int(info.max) + 1, 2**40)).astype(np_t)),
        "equal": lambda: pa.array(np.full(n, 3, np_t)),
        "zeros": lambda: pa.array(np.zeros(n, np_t)),
        "extremes": lambda: pa.array(RNG.choice(np.array([info.min, info.max, 0, 1], np_t), n)),
        "random": lambda: pa.array(RNG.integers(info.min, info.max, n, dtype=np_t,
                                                endpoint=True)),
        "random_small": lambda: pa.array(RNG.integers(0, 50, n).astype(np_t)),
        "small_nulls": lambda: pa.array(RNG.integers(0, 50, n).astype(np_t),
                                        mask=RNG.random(n) < 0.3),
        "equal_nulls": lambda: pa.array(np.full(n, 9, np_t), mask=RNG.random(n) < 0.3),
        "runs_nulls": lambda: pa.array((np.arange(n) // 300).astype(np_t),
                                       mask=RNG.random(n) < 0.01),
    }


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integers(tmp_path: Path, version: str, dtype: str) -> None:
    n = 2500  # two whole 1024-value chunks and a partial one
    cases = _int_cases(dtype, n)
    table = pa.table({k: f() for k, f in cases.items()})
    enc = _roundtrip(table, str(tmp_path / "ds"), version)
    got = dict(zip(cases, enc, strict=True))
    assert got["seq"] == {"rle"}  # runs of 64
    for name in ("random_small", "small_nulls"):
        assert "inline_bitpacking" in got[name], (name, got)
    assert "def:out_of_line_bitpacking" in got["small_nulls"]
    # One value: a constant page in 2.2 (as pylance), runs in 2.1.
    for name in ("equal", "zeros"):
        assert got[name] == ({"constant_layout"} if version == "2.2" else {"rle"}), name


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [0, 1, 2, 1023, 1024, 1025, 2048, 4097])
def test_chunk_boundaries(tmp_path: Path, version: str, n: int) -> None:
    table = pa.table({
        "neg": pa.array(-np.arange(n, dtype=np.int64)),
        "seq": pa.array(np.arange(n, dtype=np.int32)),
        "nulls": pa.array(np.arange(n, dtype=np.int16), mask=np.arange(n) % 3 == 0),
        "s": pa.array([f"v{i % 7}" for i in range(n)], pa.string()),
        "long": pa.array([f"value-{i}-{i * 7919}" for i in range(n)], pa.string()),
    })
    enc = _roundtrip(table, str(tmp_path / "ds"), version)
    if n >= 1024:
        assert "inline_bitpacking" in enc[1]
        assert "def:out_of_line_bitpacking" in enc[2] or n < 1025
        assert "dictionary" in enc[3]
        assert "general:variable" in enc[4]


@pytest.mark.parametrize("version", VERSIONS)
def test_floats_and_temporal(tmp_path: Path, version: str) -> None:
    n = 3000
    base = np.datetime64("2024-01-01T00:00:00", "us")
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-308, -1e308])
    table = pa.table({
        "f64": pa.array(RNG.random(n)),
        "f32": pa.array(RNG.random(n).astype(np.float32), mask=RNG.random(n) < 0.1),
        "f16": pa.array(RNG.random(n).astype(np.float16)),
        "special": pa.array(RNG.choice(specials, n)),
        "date": pa.array((np.arange(n) + 19000).astype("datetime64[D]")),
        "ts": pa.array(base + np.arange(n) * 1_000_000, pa.timestamp("us", tz="UTC")),
        "t64": pa.array(np.arange(n, dtype=np.int64) * 1000, pa.time64("us")),
        "dur": pa.array(np.arange(n, dtype=np.int64) - 1500, pa.duration("ms")),
        "date_neg": pa.array([dt.date(1900 + i % 200, 1, 1) for i in range(n)]),
    })
    enc = _roundtrip(table, str(tmp_path / "ds"), version)
    assert enc[0] == {"flat"}  # random doubles: packing would save 3 % only
    for col in (4, 5, 6):
        assert "inline_bitpacking" in enc[col]


@pytest.mark.parametrize("version", VERSIONS)
def test_strings(tmp_path: Path, version: str) -> None:
    n = 5000
    words = np.array(["", "alpha", "béta", "gamma-gamma", "δ" * 20])
    rand = [f"{x:x}-{x * 31:x}" for x in RNG.integers(0, 2**40, n).tolist()]
    table = pa.table({
        "low": pa.array(words[RNG.integers(0, 5, n)]),
        "low_nulls": pa.array(words[RNG.integers(0, 5, n)], mask=RNG.random(n) < 0.25),
        "high": pa.array(rand),
        "high_nulls": pa.array(rand, mask=RNG.random(n) < 0.25),
        "bin_low": pa.array([bytes([i % 3]) * 5 for i in range(n)], pa.binary()),
        "large_low": pa.array(words[RNG.integers(0, 5, n)], pa.large_string()),
        "large_high": pa.array(rand, pa.large_binary()),
        "all_empty": pa.array([""] * n),
        "one_value": pa.array(["same"] * n),
    })
    enc = _roundtrip(table, str(tmp_path / "ds"), version)
    for col in (0, 1, 4, 8):
        assert "dictionary" in enc[col], (col, enc[col])
    for col in (2, 3, 6, 7):
        assert "general:variable" in enc[col], (col, enc[col])
    assert "dictionary" not in enc[5]  # large types keep plain (64-bit) offsets


@pytest.mark.parametrize("version", VERSIONS)
def test_nested_levels_bit_packed(tmp_path: Path, version: str) -> None:
    n = 3000
    lists = [None if i % 11 == 0 else [] if i % 7 == 0 else
             [j if j % 5 else None for j in range(i % 4)] for i in range(n)]
    structs = [None if i % 13 == 0 else {"a": None if i % 3 == 0 else i - 1500,
                                          "s": f"k{i % 4}"} for i in range(n)]
    table = pa.table({
        "lists": pa.array(lists, pa.list_(pa.int64())),
        "structs": pa.array(structs, pa.struct([("a", pa.int32()), ("s", pa.string())])),
        "str_lists": pa.array([None if x is None else [str(v) for v in x] for x in lists],
                              pa.list_(pa.string())),
    })
    enc = _roundtrip(table, str(tmp_path / "ds"), version)
    assert "rep:out_of_line_bitpacking" in enc[0]
    assert "def:out_of_line_bitpacking" in enc[0]
    assert "inline_bitpacking" in enc[1]


@pytest.mark.parametrize("version", VERSIONS)
def test_appends_across_batches(tmp_path: Path, version: str) -> None:
    """Several files and pages: each page chooses its own encoding."""
    uri = str(tmp_path / "ds")
    parts = [pa.table({"x": pa.array(np.arange(3000, dtype=np.int64) * k),
                       "s": pa.array([f"{k}-{i % (1 + k * 900)}" for i in range(3000)])})
             for k in range(3)]
    al.write_dataset(parts[0], uri, data_storage_version=version)
    for p in parts[1:]:
        al.write_dataset(p, uri, mode="append")
    expected = pa.concat_tables(parts)
    assert lance.dataset(uri).to_table().equals(expected)
    assert al.open_dataset(uri).to_table().equals(expected)
    enc = _encodings(uri)
    assert {"dictionary", "general:variable"} <= enc[1]
    assert I64.max > 0


def test_rle_chunks() -> None:
    vals = np.repeat(np.array([5, -7, 2**40], np.int64), [3000, 600, 1400])
    coded = rle(vals.view(np.uint8).reshape(-1, 8), 8)
    assert coded is not None and coded.starts.tolist() == [0, 2048, 4096]
    run_vals, lengths = coded.datas[0].view("<i8"), coded.datas[1]
    # Chunk 0: 2048 fives (255 * 8 + 8); chunk 1: 952 fives, 600 sevens, 496; chunk 2: 904.
    assert lengths[: coded.offsets[1][1]].tolist() == [255] * 8 + [8]
    assert np.array_equal(np.repeat(run_vals, lengths), vals)
    assert (np.diff(coded.offsets[1]) <= 2048).all()
    assert rle(np.arange(100, dtype=np.int64).view(np.uint8).reshape(-1, 8), 8) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_runs(tmp_path: Path, version: str) -> None:
    n = 10_000
    lens = [3000, 1, 1, 4000, 255, 256, 2487]
    table = pa.table({
        "i64": pa.array(np.repeat(np.array([5, -7, 0, 2**40, I64.min, I64.max, 3]), lens)),
        "i8": pa.array(np.repeat(np.array([1, -1, 0, 127, -128, 2, 3], np.int8), lens)),
        "f64": pa.array(np.repeat(np.array([0.5, np.nan, -0.0, 1e300, -np.inf, 2.0, 3.0]),
                                  lens)),
        "u16": pa.array(np.arange(n, dtype=np.uint16) // 7),
        "sorted_words": pa.array(np.repeat(np.array(["a", "bb", "", "c", "dd", "e", "f"]),
                                           lens)),
        "ts": pa.array(np.repeat(np.arange(7, dtype=np.int64) * 10**9, lens),
                       pa.timestamp("ns")),
    })
    enc = _roundtrip(table, str(tmp_path / "ds"), version)
    for col in range(len(enc)):
        assert "rle" in enc[col], (col, enc[col])
    assert "dictionary" in enc[4]


@pytest.mark.parametrize("version", VERSIONS)
def test_one_value_pages_keep_their_type(tmp_path: Path, version: str) -> None:
    """Columns holding one value: dictionary-typed columns keep their indices, lists and
    nullable columns keep their levels (no constant page for them), small ints stay exact."""
    n = 3000
    table = pa.table({
        "dict": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                               pa.array(["only"])),
        "lists": pa.array([[1, 1]] * n, pa.list_(pa.int32())),
        "nullable": pa.array([None if i % 5 == 0 else 4 for i in range(n)], pa.int64()),
        "u8": pa.array(np.full(n, 255, np.uint8)),
        "ts": pa.array(np.full(n, -1, np.int64), pa.timestamp("s")),
    })
    enc = _roundtrip(table, str(tmp_path / "ds"), version)
    assert "constant_layout" not in enc[0] | enc[1] | enc[2]
    assert enc[3] == enc[4] == ({"constant_layout"} if version == "2.2" else {"rle"})


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("index_type", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
def test_dictionary_typed_columns(tmp_path: Path, version: str, index_type: pa.DataType,
                                  ) -> None:
    """Arrow dictionary columns keep their index width; the indices get bit-packed / RLE."""
    n = 3000
    words = pa.array([f"w{i}" for i in range(20)])
    dtype = pa.dictionary(index_type, pa.string())
    table = pa.table({
        "packed": pa.DictionaryArray.from_arrays(
            pa.array(RNG.integers(0, 20, n), index_type, mask=RNG.random(n) < 0.1), words),
        "runs": pa.DictionaryArray.from_arrays(pa.array(np.arange(n) // 500, index_type),
                                               words),
    })
    assert table.schema.field("packed").type == dtype
    enc = _roundtrip(table, str(tmp_path / "ds"), version)
    assert {"inline_bitpacking", "dictionary"} <= enc[0]
    assert {"rle", "dictionary"} <= enc[1]


@pytest.mark.parametrize("version", VERSIONS)
def test_other_fixed_width_types(tmp_path: Path, version: str) -> None:
    """Fixed-size binary, small floats and 32-bit temporal types go through the same
    integer encodings (bytes reinterpreted as unsigned words)."""
    n = 3000
    cols: dict[str, pa.Array] = {}
    for width in (1, 2, 4, 8):
        raw = [bytes([i % 3]) * width for i in range(n)]
        cols[f"fsb{width}"] = pa.array(raw, pa.binary(width))
        cols[f"fsb{width}_same"] = pa.array([b"\x07" * width] * n, pa.binary(width))
        cols[f"fsb{width}_runs"] = pa.array(sorted(raw), pa.binary(width))
    cols["f16"] = pa.array(np.full(n, 1.5, np.float16))
    cols["time32"] = pa.array((np.arange(n) % 86400).astype(np.int32), pa.time32("s"))
    cols["date_same"] = pa.array(np.full(n, 19000, np.int32), pa.date32())
    cols["bools"] = pa.array(np.arange(n) % 3 == 0)
    _roundtrip(pa.table(cols), str(tmp_path / "ds"), version)


@pytest.mark.parametrize("t", [8, 16, 32, 64])
def test_fastlanes_pack_into_rows_that_lie_apart(t: int) -> None:
    """Packing into a strided view (the words of each chunk follow its width word) writes
    every packed word in place, for every width."""
    dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[t]
    lanes = 1024 // t
    for w in range(t + 1):
        vals = (RNG.integers(0, 2**w, (70, 1024), dtype=np.uint64, endpoint=False)
                if w < 64 else RNG.integers(0, 2**63, (70, 1024), dtype=np.uint64) * 2 + 1)
        vals = vals.astype(dtype)
        rows = np.full((70, 1 + w * lanes), 7, dtype=dtype)
        fastlanes_pack(vals, w, rows[:, 1:])
        assert (rows[:, 0] == 7).all()
        assert np.array_equal(rows[:, 1:], fastlanes_pack(vals, w)), (t, w)
        assert np.array_equal(unpack_fastlanes(np.ascontiguousarray(rows[:, 1:]), t, w),
                              vals), (t, w)


@pytest.mark.parametrize("layout", ["runs", "scattered", "ragged tail", "zeros between"])
def test_bitpack_runs_and_scattered_widths(layout: str) -> None:
    """Blocks of one width in a few long runs (packed run by run) or changing block to block
    (packed width by width): every value comes back, and each chunk has its own width."""
    n = 1024 * 150 + (300 if layout == "ragged tail" else 0)
    if layout in ("runs", "ragged tail"):
        vals = np.arange(n, dtype=np.int64) * 3  # widths growing block by block, in runs
    elif layout == "scattered":
        bits = RNG.integers(1, 40, -(-n // 1024))
        vals = (RNG.integers(0, 2**62, n) % (np.int64(1) << np.repeat(bits, 1024)[:n]))
    else:
        vals = np.zeros(n, np.int64)
        vals[::5000] = RNG.integers(0, 2**30, len(vals[::5000]))
    coded = bitpack(vals.view(np.uint8).reshape(-1, 8), 8)
    assert coded is not None
    words = coded.datas[0].view("<u8")
    heads = coded.offsets[0][:-1] // 8
    k = len(heads)
    blocks = np.zeros(k * 1024, np.int64)
    blocks[:n] = vals
    expected = np.array([int(b).bit_length() for b in
                         np.bitwise_or.reduce(blocks.reshape(k, 1024), axis=1)])
    assert words[heads].tolist() == expected.tolist()
    out = np.concatenate([
        unpack_fastlanes(words[h + 1: h + 1 + int(w) * 16].reshape(1, -1), 64, int(w))[0]
        if w else np.zeros(1024, np.uint64) for h, w in zip(heads, expected, strict=True)])
    assert np.array_equal(out[:n].view(np.int64), vals)


def test_plain_leaves_shred_as_the_walk_does() -> None:
    """A leaf column (nulls or not) skips the per-item walk: the result is the walk's."""
    from alance.format.schema import LanceSchema
    from alance.format.v2 import encode_levels as lv

    n = 300
    table = pa.table({
        "i": pa.array(np.arange(n, dtype=np.int64)),
        "f": pa.array(RNG.random(n)),
        "s": pa.array([f"s{i}" for i in range(n)]),
        "b": pa.array(np.arange(n) % 2 == 0),
        "fsl": pa.FixedSizeListArray.from_arrays(pa.array(RNG.random(4 * n)), 4),
        "d": pa.array([f"k{i % 3}" for i in range(n)]).dictionary_encode(),
        "ts": pa.array(np.arange(n), pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal(i) for i in range(n)], pa.decimal128(10, 0)),
        "i8": pa.array(np.arange(n) % 100, pa.int8()),
        "i_nulls": pa.array(np.arange(n), mask=np.arange(n) % 7 == 0),
        "s_nulls": pa.array([None if i % 5 == 0 else f"s{i}" for i in range(n)]),
        "all_null_ints": pa.nulls(n, pa.int32()),
        "fsl_nulls": pa.FixedSizeListArray.from_arrays(pa.array(RNG.random(2 * n)), 2,
                                                       mask=pa.array(np.arange(n) % 3 == 0)),
    })
    schema = LanceSchema.from_arrow(table.schema)
    for field, name in zip(schema.fields, table.column_names, strict=True):
        arr = table.column(name).combine_chunks()
        assert lv._plain_leaf(field, arr), name
        fast = lv.shred(field, arr)
        items = lv._Items(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                          np.full(n, -1, dtype=np.int64))
        slow: list[lv.Shredded] = []
        lv._walk(field, arr, items, [], 0, n, slow)
        assert len(fast) == len(slow) == 1
        a, b = fast[0], slow[0]
        assert (a.layers, a.rep, a.visible, a.num_rows, a.max_rep, a.max_def) == (
            b.layers, b.rep, b.visible, b.num_rows, b.max_rep, b.max_def), name
        assert (a.defs is None) == (b.defs is None), name
        if a.defs is not None:
            assert a.defs.dtype == b.defs.dtype and np.array_equal(a.defs, b.defs), name
        assert a.values.equals(b.values), name
    # Not plain: the null type, lists, structs of columns.
    nulls = pa.nulls(3)
    lists = pa.array([[1], [], [2, 3]])
    struct = pa.array([{"x": 1}, {"x": 2}, {"x": 3}])
    for arr in (nulls, lists, struct):
        field = LanceSchema.from_arrow(pa.schema([("c", arr.type)])).fields[0]
        assert not lv._plain_leaf(field, arr)


def test_chunk_parts_interleaved_as_concatenated() -> None:
    """Mini-block chunks laid out as a matrix (equal chunks) equal the chunk-by-chunk
    concatenation, padding included; anything irregular takes the concatenation."""
    from alance.format.v2 import encode_pages as ep

    data = RNG.integers(0, 256, 100_000, dtype=np.uint8)
    k = 50
    heads = RNG.integers(0, 256, (k, 6), dtype=np.uint8)
    head_parts = ep._Ranges(heads.reshape(-1), np.arange(k) * 6, np.full(k, 6))
    run_sizes = np.r_[np.full(10, 100), np.full(20, 203), np.full(2, 7), np.full(18, 50)]
    cases = {
        "equal chunks": ep._Ranges(data, np.arange(k) * 1003, np.r_[np.full(k - 1, 1003), 17]),
        "gaps between": ep._Ranges(data, np.arange(k) * 1100, np.r_[np.full(k - 1, 1003), 5]),
        "sizes vary": ep._Ranges(data, np.arange(k) * 1003, RNG.integers(1, 1003, k)),
        "uneven starts": ep._Ranges(data, np.sort(RNG.choice(50_000, k, replace=False)),
                                    np.full(k, 40)),
        "runs of sizes": ep._Ranges(data, np.r_[0, np.cumsum(run_sizes)[:-1]], run_sizes),
    }
    assert cases["equal chunks"].rows(k - 1) is not None  # (the matrix path is taken)
    assert cases["sizes vary"].rows(k - 1) is None
    for name, values in cases.items():
        for columns in ([head_parts, values], [head_parts, values, values]):
            got = ep._interleave(list(columns))
            assert np.array_equal(got, ep._concatenated(list(columns))), name
    lists = ([heads[c] for c in range(k)], np.full(k, 6))  # arrays per chunk: concatenated
    assert np.array_equal(ep._interleave([lists, cases["equal chunks"]]),
                          ep._concatenated([head_parts, cases["equal chunks"]]))


@pytest.mark.parametrize("large", [False, True])
def test_variable_chunks_laid_out_at_once(large: bool) -> None:
    """The zstd input of variable-width chunks, built for all chunks at once, is each chunk's
    relative offsets and padded data, chunk after chunk."""
    from alance.format.v2 import encode_pages as ep
    from alance.format.v2.encode_values import value_data

    words = [("x" * int(n)) for n in RNG.integers(0, 9, 5000)]
    arr = pa.array(words, pa.large_string() if large else pa.string())
    vd = value_data(arr)
    starts = np.array([0, 1, 700, 701, 2500, 4999])
    data, offsets = ep._variable_chunk_bytes(vd, starts)
    raw = ep._raw_values(vd)
    ends = np.append(starts[1:], vd.n)
    expected = [np.concatenate(ep._chunk_values(vd, raw, a, b))
                for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    assert np.array_equal(data, np.concatenate(expected))
    assert offsets.tolist() == np.concatenate(([0], np.cumsum([len(e) for e in expected]))
                                              ).tolist()

"""Reading Lance 2.x data files that pylance writes (2.1 and the default 2.2).

pylance is the oracle: every dataset is written by pylance and read back by both engines.
"""

from __future__ import annotations

import decimal
import os
import random
import shutil
import struct
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

from alance import sync as al
from alance.errors import AlanceError, CorruptFileError, UnsupportedFeatureError
from alance.format.legacy.plan import fetch_from, run_plan
from alance.format.schema import LanceSchema
from alance.format.v2.container import open_file, parse_footer
from alance.format.v2.kernels import (
    decompress,
    fastlanes_at,
    fastlanes_at_widths,
    fsst_decode,
    unpack_fastlanes,
)
from alance.format.v2.reader import V2FileReader


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 1_000_000, n)
    small = rng.integers(0, 5, n)
    nulls = rng.random(n) < 0.2
    words = [f"word{v}_{'z' * (v % 13)}" for v in range(2000)]
    picks = rng.integers(0, 2000, n)
    return pa.table({
        "i8": pa.array(small.astype(np.int8) - 2),
        "i16n": pa.array(ints.astype(np.int16), mask=nulls),
        "u16": pa.array(ints.astype(np.uint16)),
        "i32": pa.array(ints.astype(np.int32)),
        "u32n": pa.array(ints.astype(np.uint32), mask=nulls),
        "i64neg": pa.array(-ints.astype(np.int64) * 1000003),
        "u64": pa.array(ints.astype(np.uint64) << np.uint64(40)),
        "sorted": pa.array(np.sort(small).astype(np.int64)),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
        "f64": pa.array(rng.standard_normal(n)),
        "f16n": pa.array(rng.random(n).astype(np.float16), mask=nulls),
        "bool": pa.array(rng.random(n) < 0.3),
        "booln": pa.array(rng.random(n) < 0.3, mask=nulls),
        "s_rand": pa.array([f"{words[p]}-{i}" for i, p in enumerate(picks)], pa.string()),
        "s_low": pa.array([["", "a", "bb", "ccc"][v] if v < 4 else None for v in small],
                          pa.string()),
        "s_empty": pa.array([""] * n, pa.string()),
        "lstr": pa.array([f"L{v}" for v in ints], pa.large_string()),
        "bin": pa.array([bytes(rng.integers(0, 256, v % 9, dtype=np.uint8)) for v in ints],
                        pa.binary()),
        "lbin": pa.array([None if k else b"\x00\xff" * (v % 4)
                          for v, k in zip(ints, nulls, strict=True)], pa.large_binary()),
        "date": pa.array(ints.astype(np.int32), pa.int32()).cast(pa.date32()),
        "date64": pa.array(ints.astype(np.int64) * 86400000, pa.int64()).cast(pa.date64()),
        "t32": pa.array((ints % 86400).astype(np.int32), pa.int32()).cast(pa.time32("s")),
        "t64": pa.array((ints % 86400).astype(np.int64) * 10**6, pa.int64()).cast(
            pa.time64("us")),
        "ts": pa.array(ints * 10**6, pa.timestamp("us", tz="UTC")),
        "tsn": pa.array(ints * 10**9, pa.timestamp("ns"), mask=nulls),
        "dur": pa.array(ints, pa.duration("ms")),
        "dec": pa.array([None if k else decimal.Decimal(int(v)) / 100
                         for v, k in zip(ints, nulls, strict=True)], pa.decimal128(12, 2)),
        "vec": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 4).astype(np.float32)), 4),
        "vec128": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 128).astype(np.float32)), 128),
        "vec128n": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 128).astype(np.float32)), 128,
            mask=pa.array(nulls)),
        "fsb": pa.array([int(v).to_bytes(8, "little") for v in ints], pa.binary(8)),
        "st": pa.array([None if k else {"x": int(v), "y": None if v % 3 == 0 else f"y{v}",
                                        "z": {"q": float(v)}}
                        for v, k in zip(ints, nulls, strict=True)],
                       pa.struct([("x", pa.int64()), ("y", pa.string()),
                                  ("z", pa.struct([("q", pa.float64())]))])),
        "li": pa.array([None if k else [int(x) if x % 4 else None for x in range(v % 5)]
                        for v, k in zip(ints, nulls, strict=True)], pa.list_(pa.int64())),
        "lls": pa.array([[[f"a{v}"] * (v % 2), []] if v % 3 else None for v in ints],
                        pa.list_(pa.list_(pa.string()))),
        "lst": pa.array([[{"a": int(v), "b": "q"}] * (v % 3) for v in ints],
                        pa.list_(pa.struct([("a", pa.int32()), ("b", pa.string())]))),
        "stl": pa.array([{"l": [int(v)] * (v % 3), "k": int(v)} for v in ints],
                        pa.struct([("l", pa.list_(pa.int64())), ("k", pa.int64())])),
        "llarge": pa.array([list(range(v % 6)) for v in ints], pa.large_list(pa.int16())),
        "allnull": pa.nulls(n, pa.string()),
        "const": pa.array(np.full(n, 7, np.int32)),
        "const_s": pa.array(["same"] * n, pa.string()),
        "long": pa.array([None if k else f"{v}" * 60 for v, k in zip(ints, nulls, strict=True)],
                         pa.string()),
        "long_list": pa.array([[f"y{v}" * 200] * (v % 3) for v in ints],
                              pa.list_(pa.string())),
    })


def _write(path: Path, table: pa.Table, version: str | None = None,
           meta: dict[str, str] | None = None, **kw: object) -> str:
    if meta:
        table = pa.table(table.columns,
                         schema=pa.schema([f.with_metadata(meta) for f in table.schema]))
    if version is not None:
        kw["data_storage_version"] = version
    lance.write_dataset(table, str(path), mode="overwrite", **kw)  # type: ignore[arg-type]
    return str(path)


CASES: dict[str, dict[str, Any]] = {
    "v22": dict(n=3000),
    "v21": dict(n=3000, version="2.1"),
    "v20": dict(n=3000, version="2.0"),
    "v20_one": dict(n=1, version="2.0"),
    "v22_zstd": dict(n=3000, meta={"lance-encoding:compression": "zstd"}),
    "v22_lz4": dict(n=3000, meta={"lance-encoding:compression": "lz4"}),
    "v22_one": dict(n=1),
    "v22_empty": dict(n=0),
}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("v2_reader")
    out = {}
    for name, case in CASES.items():
        n = int(case["n"])
        table = _table(n)
        if case.get("version") == "2.0":
            table = table.drop(["st"])  # 2.0 cannot store null structs
        out[name] = _write(root / name, table, case.get("version"), case.get("meta"))
    return out


def _assert_same(got: pa.Table, expected: pa.Table) -> None:
    assert got.schema.names == expected.schema.names
    for name in expected.column_names:
        a = got.column(name).combine_chunks()
        b = expected.column(name).combine_chunks()
        assert a.type == b.type, name
        assert a.equals(b), f"column {name!r} differs"


@pytest.mark.parametrize("case", list(CASES))
def test_to_table_matches_pylance(datasets: dict[str, str], case: str) -> None:
    uri = datasets[case]
    _assert_same(al.open_dataset(uri).to_table(), lance.dataset(uri).to_table())


@pytest.mark.parametrize("case", ["v22", "v21", "v20", "v22_zstd"])
def test_take_matches_pylance(datasets: dict[str, str], case: str) -> None:
    uri = datasets[case]
    expected = lance.dataset(uri).to_table()
    rng = np.random.default_rng(7)
    idx = rng.choice(expected.num_rows, 60, replace=False)
    idx = np.concatenate([idx, idx[:5], [0, expected.num_rows - 1]])  # repeats and ends
    _assert_same(al.open_dataset(uri).take(idx), expected.take(pa.array(idx)))


def test_projection_and_filter(datasets: dict[str, str]) -> None:
    uri = datasets["v22"]
    theirs = lance.dataset(uri)
    ours = al.open_dataset(uri)
    cols = ["st", "li", "s_rand", "i32"]
    flt = "i32 > 500000 AND s_low IS NOT NULL"
    _assert_same(ours.to_table(columns=cols, filter=flt),
                 theirs.to_table(columns=cols, filter=flt))
    _assert_same(ours.to_table(columns=["lst"], offset=10, limit=100),
                 theirs.to_table(columns=["lst"], offset=10, limit=100))


def test_many_pages_fragments_and_deletions(tmp_path: Path) -> None:
    table = _table(70_000, seed=3).select(["i64neg", "s_rand", "li", "st", "vec128", "long"])
    uri = _write(tmp_path / "big", table, max_rows_per_file=40_000)
    theirs = lance.dataset(uri)
    theirs.delete("i64neg % 7 = 0")
    theirs = lance.dataset(uri)
    ours = al.open_dataset(uri)
    _assert_same(ours.to_table(), theirs.to_table())
    rng = np.random.default_rng(1)
    idx = rng.choice(theirs.count_rows(), 300, replace=False)
    _assert_same(ours.take(idx), theirs.take(idx))
    batches = list(ours.to_batches(batch_size=5000)) if hasattr(ours, "to_batches") else []
    if batches:
        assert sum(b.num_rows for b in batches) == theirs.count_rows()


def _special_tables(n: int = 4000) -> dict[str, pa.Table]:
    half = n // 2
    return {
        "dict": pa.table({"d": pa.array(["a", "b", None, "c"] * (n // 4)).dictionary_encode()}),
        "fsl_null_items": pa.table({"f": pa.FixedSizeListArray.from_arrays(
            pa.array([None if i % 7 == 0 else float(i) for i in range(n * 3)], pa.float32()),
            3)}),
        "list_of_fsl": pa.table({"l": pa.array([[[1.0, 2.0]] * (i % 3) for i in range(n)],
                                               pa.list_(pa.list_(pa.float32(), 2)))}),
        "huge_strings": pa.table({"h": pa.array([f"z{i}" * 20000 if i % 50 == 0 else "s"
                                                 for i in range(400)])}),
        "null_then_values": pa.table({
            "m": pa.array([None] * half + list(range(half)), pa.int64()),
            "k": pa.array([7] * half + list(range(half)), pa.int64())}),
        "only_empties": pa.table({"e": pa.array([[] for _ in range(n)], pa.list_(pa.int32())),
                                  "es": pa.array([""] * n)}),
        "list_struct_list": pa.table({"x": pa.array(
            [[{"a": [i, None] if i % 2 else None, "b": i}] * (i % 3) if i % 5 else None
             for i in range(n)])}),
        "map": pa.table({"mp": pa.array([[("a", i)] * (i % 3) for i in range(n)],
                                        pa.map_(pa.string(), pa.int64()))}),
    }


#: Combinations pylance 14 refuses to write (maps need 2.2).
_UNWRITABLE = {("map", "2.1"), ("map", "2.0")}


@pytest.mark.parametrize(("name", "version"), sorted(_UNWRITABLE))
def test_pylance_refuses_what_we_do_not_test(tmp_path: Path, name: str, version: str) -> None:
    with pytest.raises(OSError):
        _write(tmp_path / name, _special_tables()[name], version)


@pytest.mark.parametrize(("name", "version"), [
    (n, v) for n in _special_tables(8) for v in ("2.2", "2.1", "2.0")
    if (n, v) not in _UNWRITABLE])
def test_special_columns(tmp_path: Path, name: str, version: str) -> None:
    table = _special_tables()[name]
    uri = _write(tmp_path / name, table, version)
    expected = lance.dataset(uri).to_table()
    ours = al.open_dataset(uri)
    try:
        got = ours.to_table()
    except UnsupportedFeatureError:
        assert (name, version) == ("fsl_null_items", "2.0")
        return
    idx = np.random.default_rng(3).choice(expected.num_rows, 40, replace=False)
    taken = ours.take(idx)
    for col in expected.column_names:
        want, have = expected.column(col).combine_chunks(), got.column(col).combine_chunks()
        want_t = expected.take(pa.array(idx)).column(col).combine_chunks()
        have_t = taken.column(col).combine_chunks()
        if pa.types.is_dictionary(want.type):  # same values; dictionaries may be ordered apart
            want, have = want.cast(want.type.value_type), have.cast(want.type.value_type)
            want_t, have_t = want_t.cast(want.type), have_t.cast(want.type)
        assert have.equals(want), col
        assert have_t.equals(want_t), col


def test_v20_many_pages(tmp_path: Path) -> None:
    table = _table(60_000, seed=4).select(["i64neg", "s_rand", "s_low", "li", "lls", "vec"])
    uri = _write(tmp_path / "v20big", table, "2.0", max_rows_per_file=25_000)
    theirs = lance.dataset(uri).to_table()
    ours = al.open_dataset(uri)
    _assert_same(ours.to_table(), theirs)
    idx = np.random.default_rng(2).choice(60_000, 200, replace=False)
    _assert_same(ours.take(idx), theirs.take(pa.array(idx)))


def test_open_file_costs_one_request(datasets: dict[str, str]) -> None:
    path = next((Path(datasets["v22"]) / "data").glob("*.lance"))
    data = path.read_bytes()
    calls = []

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        calls.append(ranges)
        return fetch_from(data)(ranges)

    file = run_plan(open_file(len(data)), fetch)
    assert len(calls) == 1
    assert file.version == (2, 2) and file.num_rows == 3000
    assert file.schema is not None and "st" in file.schema.names


def test_take_reads_only_needed_chunks(tmp_path: Path) -> None:
    n = 200_000
    table = pa.table({"x": pa.array(np.arange(n, dtype=np.int64) * 7919 % 1_000_003)})
    uri = _write(tmp_path / "t", table)
    path = next((tmp_path / "t" / "data").glob("*.lance"))
    data = path.read_bytes()
    file = run_plan(open_file(len(data)), fetch_from(data))
    reader = V2FileReader(file, LanceSchema.from_arrow(table.schema))
    read: list[int] = []

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        read.extend(e - s for s, e in ranges)
        return fetch_from(data)(ranges)

    batch = run_plan(reader.take([5, 150_000]), fetch)
    assert batch.column(0).to_pylist() == [table.column(0)[5].as_py(),
                                           table.column(0)[150_000].as_py()]
    assert sum(read) < len(data) // 20
    assert lance.dataset(uri).take([5]).column(0)[0] == batch.column(0)[0]


# -- kernels -------------------------------------------------------------------------------


def _fastlanes_pack(values: np.ndarray, t: int, w: int) -> np.ndarray:
    """A slow reference packer (test only) for the transposed 1024-value layout."""
    lanes = 1024 // t
    order = (0, 4, 2, 6, 1, 5, 3, 7)
    out = np.zeros((w, lanes), dtype=np.uint64)
    for lane in range(lanes):
        bits = 0
        for row in range(t):
            idx = order[row // 8] * 16 + (row % 8) * 128 + lane
            bits |= (int(values[idx]) & ((1 << w) - 1)) << (row * w)
        for k in range(w):
            out[k, lane] = (bits >> (k * t)) & ((1 << t) - 1)
    return out.reshape(-1).astype(f"<u{t // 8}")


@pytest.mark.parametrize(("t", "w"), [(8, 3), (16, 1), (32, 17), (64, 10), (64, 64), (8, 0),
                                    (8, 8), (16, 16), (32, 32)])
def test_unpack_fastlanes(t: int, w: int) -> None:
    rng = np.random.default_rng(t * 100 + w)
    vals = rng.integers(0, 1 << w, 1024, dtype=np.uint64) if w < 64 else \
        rng.integers(0, 1 << 63, 1024, dtype=np.uint64)
    packed = _fastlanes_pack(vals, t, w).reshape(1, -1)
    assert np.array_equal(unpack_fastlanes(packed, t, w)[0], vals.astype(f"<u{t // 8}"))


@pytest.mark.parametrize("t", [8, 16, 32, 64])
def test_unpack_fastlanes_every_width(t: int) -> None:
    """Every width of a word size, whichever way its spilling rows are merged in (picked out
    by index, by evenly spaced runs, or every row alike)."""
    from alance.format.v2.kernels import _fastlanes_rows

    assert _fastlanes_rows(64, 22).spill_runs is not None  # runs
    assert _fastlanes_rows(64, 16).spill_runs is None  # (no row spills)
    assert _fastlanes_rows(64, 15).few_spill and _fastlanes_rows(64, 15).spill_runs is None
    rng = np.random.default_rng(t)
    for w in range(t + 1):
        vals = rng.integers(0, 1 << min(w, 63), (2, 1024), dtype=np.uint64)
        packed = np.stack([_fastlanes_pack(v, t, w) for v in vals])
        assert np.array_equal(unpack_fastlanes(packed, t, w), vals.astype(f"<u{t // 8}")), w


@pytest.mark.parametrize("t", [8, 16, 32, 64])
def test_full_width_blocks_unpack_across_tiles(t: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many full-width blocks (the rows only move) unpack block by block alike."""
    from alance.format.v2 import kernels

    monkeypatch.setattr(kernels, "UNPACK_TILE_BYTES", 7 * 128 * t)  # 7 blocks a tile
    rng = np.random.default_rng(t)
    vals = rng.integers(0, 1 << (t - 1), (300, 1024), dtype=np.uint64)
    packed = np.stack([_fastlanes_pack(v, t, t) for v in vals[:3]] * 100)
    assert np.array_equal(unpack_fastlanes(packed, t, t), np.concatenate(
        [vals[:3].astype(f"<u{t // 8}")] * 100))


@pytest.mark.parametrize(("t", "w"), [(8, 3), (16, 5), (32, 17), (64, 15), (64, 22), (64, 24),
                                    (64, 51), (64, 62), (64, 63)])
def test_tiles_of_blocks_unpack_like_one_pass(t: int, w: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks unpacked in tiles of a few blocks (a ragged last tile) give what one pass over
    all of them gives, whichever way the width's spilling rows are merged in."""
    from alance.format.v2 import kernels

    rng = np.random.default_rng(t * w)
    vals = rng.integers(0, 1 << w, (4, 1024), dtype=np.uint64)
    packed = np.stack([_fastlanes_pack(v, t, w) for v in vals] * 5)  # 20 blocks
    want = np.concatenate([vals.astype(f"<u{t // 8}")] * 5)
    monkeypatch.setattr(kernels, "UNPACK_TILE_BYTES", 1 << 30)
    assert np.array_equal(unpack_fastlanes(packed, t, w), want)
    monkeypatch.setattr(kernels, "UNPACK_TILE_BYTES", 3 * 128 * t)  # 3 blocks a tile
    out = np.full((20, 1024), 7, dtype=f"<u{t // 8}")
    assert np.array_equal(unpack_fastlanes(packed, t, w, out=out), want)


@pytest.mark.parametrize(("t", "w"), [(8, 3), (16, 1), (16, 16), (32, 17), (64, 10), (64, 63)])
def test_fastlanes_single_values_match_block_unpacking(t: int, w: int) -> None:
    rng = np.random.default_rng(t + w)
    k = 3
    words = rng.integers(0, 2**63, (k, w * 1024 // t), dtype=np.uint64).astype(f"<u{t // 8}")
    full = unpack_fastlanes(words, t, w)
    block, pos = rng.integers(0, k, 400), rng.integers(0, 1024, 400)
    starts = block * (w * 1024 // t) * (t // 8)
    got = fastlanes_at(words.reshape(-1).view(np.uint8), starts, pos, t, w)
    assert np.array_equal(got, full[block, pos])


@pytest.mark.parametrize("t", [8, 16, 32, 64])
def test_fastlanes_values_of_blocks_of_mixed_widths_match_block_unpacking(t: int) -> None:
    """One pass over values whose blocks have different widths (0 and t included) gives what
    unpacking each whole block gives."""
    rng = np.random.default_rng(t)
    widths = np.array([0, 1, t // 2, t - 1, t, 3 % (t + 1)])
    blocks = [rng.integers(0, 2**63, w * 1024 // t, dtype=np.uint64).astype(f"<u{t // 8}")
              for w in widths]
    data = np.concatenate([b.view(np.uint8) for b in blocks] + [np.zeros(16, np.uint8)])
    starts = np.concatenate(([0], np.cumsum([b.nbytes for b in blocks])[:-1]))
    block, pos = rng.integers(0, len(widths), 500), rng.integers(0, 1024, 500)
    got = fastlanes_at_widths(data, starts[block], pos, t, widths[block])
    want = [unpack_fastlanes(blocks[b].reshape(1, -1), t, int(widths[b]))[0][p]
            for b, p in zip(block.tolist(), pos.tolist(), strict=True)]
    assert np.array_equal(got, np.array(want, dtype=f"<u{t // 8}"))


def test_fsst_decode_escapes() -> None:
    header = (0x46535354 << 32) | (1 << 24) | 2
    symbols = b"ab" + b"\0" * 6 + b"xyz" + b"\0" * 5
    table = header.to_bytes(8, "little") + symbols + bytes([2, 3])
    # "ab" "xyz" esc(255) esc('q') | "ab" esc(255)
    data = np.frombuffer(bytes([0, 1, 255, 255, 255, ord("q"), 0, 255, 255]), np.uint8)
    out, offs = fsst_decode(table, data, np.array([0, 6, 9]))
    assert out.tobytes() == b"abxyz\xffqab\xff"
    assert offs.tolist() == [0, 7, 10]


def test_chunks_for_rows_follows_rows_across_chunks() -> None:
    """A row that does not end in its chunk needs the following chunks up to the one where
    some row ends (chunks where no row starts hold only the middle of a long row)."""
    from alance.format.v2.miniblock import MiniBlockState, chunks_for_range, chunks_for_rows

    rng = np.random.default_rng(5)
    n = 400
    starts = rng.integers(0, 3, n)  # rows starting in each chunk (0: a row's middle)
    trailer = rng.random(n) < 0.4  # the chunk's last row goes on into the next chunk
    starts[0] = 1
    trailer[:-1] |= starts[1:] == 0  # a chunk where no row starts continues the one before
    trailer[-1] = False
    first_row = np.concatenate(([0], np.cumsum(starts)))
    counts = np.full(n, 8)
    state = MiniBlockState(counts, np.arange(n) * 64, np.full(n, 64), first_row, starts,
                           trailer, None)
    rows = np.arange(int(first_row[-1]))
    # Reference: the chunk where each row starts, then chunks while the row goes on.
    chunk_of_start = np.repeat(np.arange(n), starts)
    for r in rows.tolist():
        c = int(chunk_of_start[r])
        want = [c]
        is_last = r == first_row[c + 1] - 1
        if is_last and trailer[c]:
            c += 1
            while c < n:
                want.append(c)
                if starts[c] > 0 or not trailer[c]:
                    break
                c += 1
        assert chunks_for_rows(state, np.array([r])).tolist() == want, r
    picked = np.sort(rng.choice(rows, 50, replace=False))
    together = chunks_for_rows(state, picked)
    singles = np.unique(np.concatenate([chunks_for_rows(state, np.array([r]))
                                        for r in picked.tolist()]))
    assert together.tolist() == singles.tolist()
    lo, hi = 37, 290
    span = chunks_for_range(state, lo, hi)
    assert span.tolist() == list(range(int(span[0]), int(span[-1]) + 1))
    assert set(chunks_for_rows(state, np.arange(lo, hi)).tolist()) == set(span.tolist())


@pytest.mark.parametrize(("starts", "lengths"), [
    ([0, 10, 20, 30], [6, 6, 6, 6]),  # evenly spaced, equal: one strided copy
    ([3, 13, 23, 33], [6, 6, 6, 2]),  # ... with a short last range
    ([5, 15, 25, 90], [6, 6, 6, 9]),  # ... the last elsewhere, longer
    ([0, 4, 8, 12], [6, 6, 6, 6]),  # overlapping ranges
    ([0, 10, 21, 30], [6, 6, 6, 6]),  # uneven spacing: the general path
    ([0, 10, 20, 30], [6, 5, 6, 6]),  # unequal lengths: the general path
    ([40, 30, 20, 10], [6, 6, 6, 6]),  # descending
    ([0, 50], [64, 64]),
])
def test_gather_ranges_matches_slices(starts: list[int], lengths: list[int]) -> None:
    from alance.format.v2.kernels import gather_ranges

    data = np.arange(120, dtype=np.uint8)
    want = np.concatenate([data[s: s + n] for s, n in zip(starts, lengths, strict=True)])
    got = gather_ranges(data, np.array(starts), np.array(lengths))
    assert got.tolist() == want.tolist()
    with pytest.raises(CorruptFileError):
        gather_ranges(data, np.array(starts) + 115, np.array(lengths))


@pytest.mark.parametrize("order", ["sorted", "touching", "with_empty", "unsorted", "overlapping"])
def test_gather_ranges_of_many_short_ranges(order: str) -> None:
    """Many short ranges in order are copied by one Arrow take over the gaps and ranges;
    out of order or overlapping ones by index arithmetic: the same bytes either way."""
    from alance.format.v2 import kernels

    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 20_000, dtype=np.uint8)
    k = 3 * kernels.SPAN_TAKE_RANGES
    lengths = rng.integers(0 if order == "with_empty" else 1, 40, k)
    gaps = np.zeros(k, np.int64) if order == "touching" else rng.integers(1, 30, k)
    starts = np.cumsum(lengths + gaps) - lengths
    if order == "unsorted":
        perm = rng.permutation(k)
        starts, lengths = starts[perm], lengths[perm]
    if order == "overlapping":
        starts = starts - lengths // 2
        starts[0] = 0
    want = np.concatenate([data[s: s + n] for s, n in zip(starts, lengths, strict=True)])
    got = kernels.gather_ranges(data, starts, lengths)
    assert got.dtype == np.uint8
    assert got.tobytes() == want.tobytes()
    with pytest.raises(CorruptFileError):
        kernels.gather_ranges(data, starts + (len(data) - int(starts.max()) - 1) + 40, lengths)


def test_fixed_at_and_merged_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from alance.format.legacy import plan
    from alance.format.legacy.plan import merge_runs
    from alance.format.v2.kernels import fixed_at

    data = np.arange(100, dtype=np.uint8)
    assert fixed_at(data, np.array([5, 0, 97]), 3).tolist() == [5, 6, 7, 0, 1, 2, 97, 98, 99]
    with pytest.raises(CorruptFileError):
        fixed_at(data, np.array([98]), 3)
    few, at = merge_runs(np.array([0, 10]), np.array([4, 12]), gap=8)
    assert few == [(0, 4), (10, 12)] and at.tolist() == [0, 4]  # a few: left to the store
    monkeypatch.setattr(plan, "MERGE_MIN_RANGES", 1)
    starts, ends = np.array([0, 10, 12, 50, 200]), np.array([4, 12, 20, 60, 210])
    ranges, at = merge_runs(starts, ends, gap=8)
    assert ranges == [(0, 20), (50, 60), (200, 210)]
    assert at.tolist() == [0, 10, 12, 20, 30]
    ranges, at = merge_runs(starts, ends, gap=0)  # touching ranges still join
    assert ranges == [(0, 4), (10, 20), (50, 60), (200, 210)]
    assert at.tolist() == [0, 4, 6, 14, 24]
    overlapping, at = merge_runs(np.array([0, 3]), np.array([5, 9]), gap=0)
    assert overlapping == [(0, 9)] and at.tolist() == [0, 3]


@pytest.mark.parametrize("wb", [1, 2, 4, 8])
def test_words_at_reads_unaligned_little_endian_words(wb: int) -> None:
    from alance.format.v2.kernels import words_at

    data = np.random.default_rng(wb).integers(0, 256, 101, dtype=np.uint8)
    addr = np.array([0, 1, 3, 50, 101 - wb])
    got = words_at(data, addr, wb)
    assert got.dtype == np.dtype(f"<u{wb}")
    assert got.tolist() == [int.from_bytes(data[a: a + wb].tobytes(), "little") for a in addr]
    for bad in ([101 - wb + 1], [-1]):
        with pytest.raises(CorruptFileError):
            words_at(data, np.array(bad), wb)
    assert words_at(data[:0], np.zeros(0, np.int64), wb).tolist() == []


@pytest.mark.parametrize("n_codes", [70_001, 70_000])
def test_fsst_pair_decoding_matches_single_codes(n_codes: int) -> None:
    """Long escape-free data is expanded two codes at a time; string boundaries may fall
    inside a pair, and an odd code count leaves a last code alone."""
    from alance.format.v2 import kernels

    rng = np.random.default_rng(n_codes)
    n_sym = 200  # codes 200..254 have no symbol: they expand to nothing, as before
    lens = rng.integers(1, 9, n_sym)
    syms = rng.integers(0, 256, (n_sym, 8), dtype=np.uint8)
    header = (0x46535354 << 32) | (1 << 24) | n_sym
    table = header.to_bytes(8, "little") + syms.tobytes() + lens.astype(np.uint8).tobytes()
    data = rng.integers(0, 255, n_codes, dtype=np.uint8)  # no 255: no escapes
    cuts = np.sort(rng.choice(np.arange(1, n_codes), 5000, replace=False))
    offsets = np.concatenate(([0], cuts, [n_codes]))
    assert n_codes >= kernels.PAIR_DECODE_CODES
    out, offs = fsst_decode(table, data, offsets)
    expand, length = kernels.fsst_symbols(table)
    single, single_offs = kernels._fsst_expand(expand, length, data.astype(np.int32), offsets)
    assert out.tobytes() == single.tobytes()
    assert offs.tolist() == single_offs.tolist()
    # and spot-check against a plain expansion of a few strings
    for i in (0, 17, len(offsets) - 2):
        want = b"".join(syms[c, : lens[c]].tobytes() if c < n_sym else b""
                        for c in data[offsets[i]: offsets[i + 1]].tolist())
        assert out[offs[i]: offs[i + 1]].tobytes() == want


def test_decompress_lz4_and_zstd() -> None:
    raw = b"hello lance " * 100
    lz = pa.Codec("lz4_raw").compress(raw).to_pybytes()
    assert decompress(1, len(raw).to_bytes(4, "little") + lz) == raw
    zs = pa.Codec("zstd").compress(raw).to_pybytes()
    assert decompress(2, len(raw).to_bytes(8, "little") + zs) == raw
    with pytest.raises(CorruptFileError):
        decompress(1, b"\x10\0\0\0\x00\x10\x00\x00\x00")  # match before any output


# -- bad input -------------------------------------------------------------------------------


def test_footer_errors() -> None:
    with pytest.raises(CorruptFileError):
        parse_footer(b"x" * 39, 39)
    with pytest.raises(CorruptFileError):
        parse_footer(b"\0" * 36 + b"NOPE", 100)
    future = struct.pack("<QQQIIHH", 0, 0, 0, 0, 0, 2, 9) + b"LANC"
    with pytest.raises(UnsupportedFeatureError):
        parse_footer(future, 40)
    bad = struct.pack("<QQQIIHH", 10, 5, 0, 0, 0, 2, 2) + b"LANC"
    with pytest.raises(CorruptFileError):
        parse_footer(bad, 40)


def _read_all(data: bytes, schema: LanceSchema) -> None:
    file = run_plan(open_file(len(data), tail_size=len(data)), fetch_from(data))
    reader = V2FileReader(file, schema)
    run_plan(reader.read_range(0, file.num_rows), fetch_from(data))
    if file.num_rows:
        run_plan(reader.take([0, file.num_rows - 1]), fetch_from(data))


#: Cases per file version in the fuzz test; raise it (e.g. 5000) for a longer local run.
FUZZ_CASES = int(os.environ.get("ALANCE_FUZZ_CASES", "150"))


@pytest.mark.parametrize("version", ["2.2", "2.1", "2.0"])
def test_fuzz_mutated_files(tmp_path: Path, version: str) -> None:
    """Flipped bytes and truncations give typed errors (or a result), never a crash."""
    table = _table(600, seed=5)
    if version == "2.0":
        table = table.drop(["st"])
    uri = _write(tmp_path / "fz", table, version)
    data = next((Path(uri) / "data").glob("*.lance")).read_bytes()
    schema = LanceSchema.from_arrow(table.schema)
    _read_all(data, schema)  # the intact file reads
    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    for i in range(FUZZ_CASES):
        buf = bytearray(data)
        if i % 5 == 0:
            buf = buf[: rng.randrange(len(buf))]
        else:
            for _ in range(rng.randint(1, 8)):
                # Bias mutations to the metadata at the end, where structure lives.
                pos = (len(buf) - 1 - rng.randrange(min(len(buf), 6000)) if rng.random() < 0.7
                       else rng.randrange(len(buf)))
                buf[pos] = rng.randrange(256)
        try:
            _read_all(bytes(buf), schema)
            outcomes["ok"] += 1
        except AlanceError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_fuzz_corrupt_dataset_file_gives_typed_error(tmp_path: Path) -> None:
    uri = _write(tmp_path / "cd", _table(500, seed=9))
    path = next((Path(uri) / "data").glob("*.lance"))
    data = bytearray(path.read_bytes())
    shutil.copy(path, tmp_path / "orig.lance")
    data[-20:-12] = (len(data) * 3).to_bytes(8, "little")  # the GBO table offset
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError):
        al.open_dataset(uri).to_table()


@pytest.mark.parametrize("version", ["2.2", "2.1", "2.0"])
def test_fuzz_structured_mutations(tmp_path: Path, version: str) -> None:
    """The mutations of ``benchmarks/fuzz_v2.py`` (corrupt footer / offset-table / metadata
    numbers, zeroed or swapped ranges, truncations, ...) on a small budget: each case gives
    data or a typed AlanceError. The script runs thousands of cases with per-case timeouts."""
    from benchmarks.fuzz_v2 import mutate, read_all, write_files

    files = write_files(300, [version], tmp_path)
    data, schema = files[version]
    read_all(data, schema)
    seen, typed = set(), 0
    for seed in range(FUZZ_CASES):
        mutated, kind = mutate(data, random.Random(seed))
        seen.add(kind)
        try:
            read_all(mutated, schema)
        except AlanceError:
            typed += 1
    assert len(seen) >= 6 and typed > 0  # the budget covers most kinds of mutation


def test_v20_row_ranges_at_odd_offsets_match_pylance(tmp_path: Path) -> None:
    """Range reads of 2.0 pages (a run of rows, never turned into an index per row) start
    and stop mid-byte of the validity bitmap, mid-list and mid-string."""
    n = 5_000
    rng = np.random.default_rng(11)
    nulls = rng.random(n) < 0.3
    table = pa.table({
        "i": pa.array(rng.integers(-99, 99, n), mask=nulls),
        "f": pa.array(rng.standard_normal(n)),
        "s": pa.array([f"v{i}" * (i % 5) for i in range(n)], mask=nulls[::-1].copy()),
        "v": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(n * 3).astype(np.float32)), 3),
    })
    _write(tmp_path / "t", table, "2.0", max_rows_per_group=1024)
    path = next((tmp_path / "t" / "data").glob("*.lance"))
    data = path.read_bytes()
    file = run_plan(open_file(len(data)), fetch_from(data))
    reader = V2FileReader(file, LanceSchema.from_arrow(table.schema))
    for lo, hi in [(0, n), (3, 9), (13, 1030), (1023, 1025), (4093, 4999), (7, 7)]:
        got = pa.Table.from_batches([run_plan(reader.read_range(lo, hi), fetch_from(data))])
        _assert_same(got, table.slice(lo, hi - lo))


def test_fsst_output_proven_ascii_skips_only_the_utf8_scan() -> None:
    """FSST output is known to be ASCII (so valid UTF-8) when every symbol of an enabled table
    is ASCII and no escape brings in a literal byte; any other output is still checked."""
    from alance.format.v2.blocks import FsstVariable, to_arrow
    from alance.format.v2.kernels import fsst_yields_ascii

    def table_of(*symbols: bytes, on: bool = True) -> bytes:
        header = (0x46535354 << 32) | (int(on) << 24) | len(symbols)
        return (header.to_bytes(8, "little") + b"".join(s.ljust(8, b"\0") for s in symbols)
                + bytes(len(s) for s in symbols))

    plain, odd = table_of(b"ab", b"xyz"), table_of(b"ab", b"\xff\xfe")
    codes = np.array([0, 1, 0, 1, 1], np.uint8)
    assert fsst_yields_ascii(plain, 1)
    assert fsst_yields_ascii(plain, -1)  # no codes
    assert not fsst_yields_ascii(plain, 255)  # an escape: a literal byte follows
    assert not fsst_yields_ascii(odd, 1)
    assert not fsst_yields_ascii(table_of(b"ab", on=False), 1)
    escaped = FsstVariable(np.array([0, 3], np.int64), np.array([0, 255, 0xC3], np.uint8),
                           symbol_table=plain).decoded()
    assert not escaped.ascii
    with pytest.raises(CorruptFileError, match="UTF-8"):
        to_arrow(escaped, pa.string(), None)  # "ab" then a lone 0xC3

    offsets = np.array([0, 2, 5], np.int64)
    proven = FsstVariable(offsets, codes, symbol_table=plain).decoded()
    assert proven.ascii
    assert to_arrow(proven, pa.string(), None).to_pylist() == ["abxyz", "abxyzxyz"]
    damaged = FsstVariable(offsets, codes, symbol_table=odd).decoded()
    assert not damaged.ascii
    with pytest.raises(CorruptFileError, match="UTF-8"):
        to_arrow(damaged, pa.string(), None)
    # slices, takes and joins keep what is known
    assert proven.slice(1, 2).ascii and proven.take(np.array([1, 0])).ascii
    from alance.format.v2.blocks import concat_blocks
    joined = concat_blocks([proven, damaged])
    assert isinstance(joined, type(proven)) and not joined.ascii
    assert concat_blocks([proven, proven]).ascii  # type: ignore[union-attr]


@pytest.mark.parametrize("runs", ["few", "many"])
def test_bitpacked_pages_whose_chunks_change_width(tmp_path: Path, runs: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of one page packed at different widths: sorted values widen chunk by chunk
    (runs of one width, unpacked straight into the output) and jumbled magnitudes change
    width at nearly every chunk (unpacked width by width); both as pylance reads them."""
    from alance.format.v2 import compressive, kernels

    n = 300_000
    rng = np.random.default_rng(5)
    table = pa.table({
        "sorted": pa.array(np.arange(n, dtype=np.int64) * 3),
        "jumbled": pa.array(rng.integers(0, 2, n) << rng.integers(0, 40, n // 1024 + 1)
                            .repeat(1024)[:n]),
    })
    uri = _write(tmp_path / "t", table, "2.1")
    if runs == "many":
        monkeypatch.setattr(compressive, "MAX_WIDTH_RUNS", 1)  # the width-by-width path only
    into: list[bool] = []
    unpack = kernels.unpack_fastlanes

    def counting(words: np.ndarray, t: int, w: int, out: np.ndarray | None = None,
                 ) -> np.ndarray:
        into.append(out is not None)
        return unpack(words, t, w, out)

    monkeypatch.setattr(compressive, "unpack_fastlanes", counting)
    _assert_same(al.open_dataset(uri).to_table(), lance.dataset(uri).to_table())
    assert (runs == "few") == any(into)  # which path ran
    # unpacking into a given array fills and returns it; a wrong one is refused
    words = _fastlanes_pack(np.arange(1024, dtype=np.uint64), 64, 10).reshape(1, -1)
    target = np.empty((1, 1024), np.uint64)
    assert np.shares_memory(kernels.unpack_fastlanes(words, 64, 10, target), target)
    assert target[0].tolist() == list(range(1024))
    with pytest.raises(ValueError):
        kernels.unpack_fastlanes(words, 64, 10, np.empty((2, 1024), np.uint64))

"""Takes across many fragments decode the rows of every fragment's pages together.

``alance.dataset.query.take_pages`` reads the columns whose pages ``alance.format.v2.page_take``
handles (single-item mini-block rows: flat, bit-packed, fixed-size lists, variable and FSST
strings) in one pass over all fragments, and 2.0 pages by their row plans in lockstep; other
columns go the ordinary per-fragment way.
Checked against pylance on datasets of many fragments, with deletions, with pages of mixed
kinds, and with damaged chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance.dataset.query.take_pages import take_columns
from alance.errors import CorruptFileError
from alance.format.v2 import kernels
from alance.format.v2.page_take import kind_of

ROWS = 24_000
PER_FILE = 3_000


def _table(n: int, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"])
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "small": pa.array(rng.integers(0, 50, n).astype(np.int32)),
        "x": pa.array(rng.random(n)),
        "s": pa.array([f"{words[i % 7]}-{i:07d}-{words[(i * 3) % 7]}" for i in range(n)]),
        "rare": pa.array([bytes(rng.integers(0, 256, int(k), dtype=np.uint8))
                          for k in rng.integers(0, 12, n)], pa.binary()),
        "ls": pa.array([f"large-{i}" for i in range(n)], pa.large_string()),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)),
                                                 8),
        "nullable": pa.array([None if i % 5 == 0 else i for i in range(n)], pa.int64()),
        "flag": pa.array(rng.random(n) < 0.5),
        "st": pa.StructArray.from_arrays([pa.array(np.arange(n, dtype=np.int32))], ["a"]),
    })


@pytest.fixture(scope="module", params=["2.0", "2.1", "2.2"])
def dataset(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("take-pages") / f"v{request.param}")
    lance.write_dataset(_table(ROWS), uri, data_storage_version=request.param,
                        max_rows_per_file=PER_FILE)
    return uri


def _same(ours: pa.Table, theirs: pa.Table) -> None:
    assert ours.schema == theirs.schema
    for name in theirs.column_names:
        assert ours[name].combine_chunks().equals(theirs[name].combine_chunks()), name


# (5,000 and 20,000 of 24,000 rows: dense, so neighbouring rows are read as one range)
@pytest.mark.parametrize("count", [1, 9, 300, 5_000, 20_000])
async def test_take_across_fragments_matches_pylance(dataset: str, count: int) -> None:
    ds = await alance.open_dataset(dataset)
    theirs_ds = lance.dataset(dataset)
    assert len(theirs_ds.get_fragments()) == ROWS // PER_FILE
    rng = np.random.default_rng(count)
    idx = rng.choice(ROWS, count, replace=False)  # unsorted, across fragments
    _same(await ds.take(idx), theirs_ds.take(idx))
    dup = np.concatenate([idx[:5], idx[:3]])
    _same(await ds.take(dup, columns=["s", "id"]), theirs_ds.take(dup, columns=["s", "id"]))


async def test_supported_columns_are_read_together(dataset: str) -> None:
    """The page path takes the single-item columns and leaves the others (nulls in levels,
    booleans, structs) to the ordinary path."""
    ds = await alance.open_dataset(dataset)
    ctx = ds._ctx
    frags = ctx.snapshot.fragments
    parts = [(frags[0], np.array([0, 5, 2999])), (frags[3], np.array([17])),
             (frags[7], np.arange(100, 2000, 7))]
    fields = list(ctx.schema.fields)
    got = await take_columns(ctx, parts, fields)
    names = {f.name for f in fields if f.id in got}
    assert {"id", "small", "x", "s", "rare", "ls", "vec"} <= names
    assert "st" not in names
    # 2.0 pages of a nullable column are read by row too; 2.1 pages with levels are not.
    assert ("nullable" in names) == ctx.snapshot.data_storage_version.startswith("2.0")
    positions = [0, 5, 2999, 3 * PER_FILE + 17, *(7 * PER_FILE + np.arange(100, 2000, 7))]
    theirs = lance.dataset(dataset).take(positions)
    for f in fields:
        if f.id in got:
            assert got[f.id].equals(theirs[f.name].combine_chunks()), f.name


async def test_take_with_deletions(tmp_path: Path) -> None:
    uri = str(tmp_path / "del")
    lance.write_dataset(_table(9_000), uri, data_storage_version="2.1",
                        max_rows_per_file=PER_FILE)
    theirs = lance.dataset(uri)
    theirs.delete("id % 3 = 1 OR (id >= 3000 AND id < 3500)")
    theirs = lance.dataset(uri)
    ds = await alance.open_dataset(uri)
    n = theirs.count_rows()
    idx = np.random.default_rng(1).choice(n, 400, replace=False)
    _same(await ds.take(idx), theirs.take(idx))


async def test_fragments_written_apart_decode_together(tmp_path: Path) -> None:
    """Fragments appended separately have their own FSST tables and bit widths."""
    uri = str(tmp_path / "apart")
    for i, part in enumerate([_table(2_000, seed=1), _table(50, seed=2),
                              _table(5_000, seed=3)]):
        part = part.set_column(0, "id", pa.array(np.arange(len(part), dtype=np.int64) * (i + 1)
                                                 * 10**9))
        lance.write_dataset(part, uri, mode="append" if i else "create",
                            data_storage_version="2.1")
    theirs = lance.dataset(uri)
    ds = await alance.open_dataset(uri)
    idx = np.array([0, 1999, 2000, 2049, 2050, 7049, 1000, 2025, 4000])
    _same(await ds.take(idx), theirs.take(idx))


def _fsst_table(symbols: list[bytes], on: bool = True) -> bytes:
    """An FSST symbol table: header (magic, "on" flag, symbol count), symbols, lengths."""
    header = (0x46535354 << 32) | (int(on) << 24) | len(symbols)
    body = b"".join(sym.ljust(8, b"\0") for sym in symbols)
    return header.to_bytes(8, "little") + body + bytes(len(sym) for sym in symbols)


def test_fsst_decode_many_matches_one_table_at_a_time() -> None:
    a = _fsst_table([b"ab", b"xyz"])
    b = _fsst_table([b"q", b"hello"])
    off = _fsst_table([], on=False)  # bytes stored as they are
    strings = [  # (table, code bytes, expected)
        (a, bytes([0, 1, 255, ord("!")]), b"abxyz!"),
        (b, bytes([1, 0, 0]), b"helloqq"),
        (off, bytes([255, 255, 7]), b"\xff\xff\x07"),
        (a, bytes([255, 255, 1]), b"\xffxyz"),  # an escaped 255 byte
        (b, b"", b""),
        (a, bytes([1]), b"xyz"),
    ]
    tables = [a, b, off]
    table_of = np.array([tables.index(t) for t, _, _ in strings])
    data = np.frombuffer(b"".join(c for _, c, _ in strings), np.uint8)
    offsets = np.concatenate(([0], np.cumsum([len(c) for _, c, _ in strings])))
    out, offs = kernels.fsst_decode_many(tables, table_of, data, offsets)
    got = [bytes(out[offs[i]: offs[i + 1]]) for i in range(len(strings))]
    assert got == [e for _, _, e in strings]
    for (table, codes, expected) in strings:  # the one-table decoder agrees
        one, one_offs = kernels.fsst_decode(table, np.frombuffer(codes, np.uint8),
                                            np.array([0, len(codes)]))
        assert bytes(one[one_offs[0]: one_offs[1]]) == expected
    with pytest.raises(CorruptFileError):
        kernels.fsst_decode_many([a], np.array([0]), np.frombuffer(bytes([0, 255]), np.uint8),
                                 np.array([0, 2]))
    # Many codes take the Arrow path: the same bytes.
    many = strings * (2 * kernels.SMALL_EXPAND_CODES // len(data) + 1)
    table_of = np.array([tables.index(t) for t, _, _ in many])
    data = np.frombuffer(b"".join(c for _, c, _ in many), np.uint8)
    assert len(data) > kernels.SMALL_EXPAND_CODES
    offsets = np.concatenate(([0], np.cumsum([len(c) for _, c, _ in many])))
    out, offs = kernels.fsst_decode_many(tables, table_of, data, offsets)
    assert bytes(out) == b"".join(e for _, _, e in many)
    assert offs.tolist() == np.concatenate(([0], np.cumsum([len(e) for _, _, e in many]))).tolist()


async def test_damaged_chunk_is_a_typed_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "bad")
    lance.write_dataset(_table(6_000).select(["id", "s"]), uri, data_storage_version="2.1",
                        max_rows_per_file=PER_FILE)
    ds = await alance.open_dataset(uri)
    await ds.take([1, 4_000])  # chunk tables now known
    frag = ds._ctx.snapshot.fragments[1]
    path = Path(uri) / "data" / frag.files[0].path
    reader = await ds._ctx.fragment(frag).open_owner(ds._ctx.schema.field("s"))
    assert reader is not None and reader.v2_file is not None
    column = reader.column_of(ds._ctx.schema.field("s").id)
    state = reader.v2_file.page_state[(column, 0)]
    raw = bytearray(path.read_bytes())
    at = int(state.positions[0])
    raw[at + 2: at + 4] = b"\xff\xff"  # the value buffer runs past its chunk
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError) as info:
        await ds.take([1, 3_000], columns=["s"])
    assert path.name in str(info.value)  # names the damaged file
    assert (await ds.take([1, 3_000], columns=["id"])).column("id").to_pylist() == [1, 3_000]


def test_kind_of_refuses_what_it_cannot_read() -> None:
    from alance._proto import encodings_v2_1_pb2 as pb

    layout = pb.MiniBlockLayout(num_buffers=1)
    layout.layers.append(pb.RepDefLayer.REPDEF_ALL_VALID_ITEM)
    layout.value_compression.flat.bits_per_value = 64
    assert kind_of(layout) == (False, "flat", 64)
    layout.value_compression.flat.bits_per_value = 1
    assert kind_of(layout) is None
    layout.value_compression.flat.bits_per_value = 32
    layout.repetition_index_depth = 1
    assert kind_of(layout) is None


async def test_take_rows_by_stable_id_across_fragments(tmp_path: Path) -> None:
    uri = str(tmp_path / "ids")
    lance.write_dataset(_table(9_000), uri, data_storage_version="2.2",
                        max_rows_per_file=PER_FILE, enable_stable_row_ids=True)
    theirs = lance.dataset(uri)
    theirs.delete("id % 4 = 1")
    theirs = lance.dataset(uri)
    ds = await alance.open_dataset(uri)
    ids = theirs.to_table(columns=[], with_row_id=True)["_rowid"].to_numpy()
    pick = np.random.default_rng(2).choice(ids, 300, replace=False)  # unsorted
    pick = np.concatenate([pick, pick[:4]])
    cols = ["id", "s", "vec", "nullable", "_rowaddr"]
    _same(await ds.take_rows(pick, columns=cols), theirs._take_rows(pick, columns=cols))


def test_few_rows_are_located_as_many_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """A point read's rows are located row by row in Python; the result is the one the
    vectorised path gives (chunks, merged ranges, byte offsets, items), page by page."""
    from alance.format.v2 import page_take
    from alance.format.v2.miniblock import MiniBlockState

    rng = np.random.default_rng(3)

    def state(chunks: int, at: int) -> MiniBlockState:
        counts = rng.integers(1, 50, chunks)
        sizes = rng.integers(10, 100, chunks)
        positions = at + np.cumsum(sizes + rng.integers(0, 30, chunks)) - sizes
        return MiniBlockState(counts=counts, positions=positions, sizes=sizes,
                              first_row=np.concatenate(([0], np.cumsum(counts))),
                              starts=counts, trailer=np.zeros(chunks, bool), dictionary=None)

    for _ in range(200):
        states = [state(int(rng.integers(1, 20)), int(rng.integers(0, 10_000)))
                  for _ in range(int(rng.integers(1, 5)))]
        rows = [np.sort(rng.choice(n, int(rng.integers(0, min(n, 8) + 1)), replace=False))
                .astype(np.int64) for n in (int(s.first_row[-1]) for s in states)]
        if not sum(len(r) for r in rows):
            continue
        gap = int(rng.integers(0, 60))
        layouts = [None] * len(states)
        few = page_take.locate(layouts, states, rows, gap)  # type: ignore[arg-type]
        monkeypatch.setattr(page_take, "FEW_ROWS", -1)
        many = page_take.locate(layouts, states, rows, gap)  # type: ignore[arg-type]
        monkeypatch.setattr(page_take, "FEW_ROWS", 64)
        assert few.ranges == many.ranges
        for name in ("rows_per_page", "chunk_at", "sizes", "counts", "chunk_of_row", "item"):
            assert np.array_equal(getattr(few, name), getattr(many, name)), name
    with pytest.raises(CorruptFileError):
        page_take.locate([None], [state(3, 0)], [np.array([10_000])])  # type: ignore[list-item]


async def test_v20_row_plans_read_many_ranges_joined(dataset: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A take of scattered rows of 2.0 pages asks for many small ranges that its row plans
    join anyway: they are read from the local file straight into one buffer per plan step,
    with the rows pylance gives."""
    from alance.io.store import DatasetStore

    calls: list[int] = []
    original = DatasetStore.get_ranges_joined

    async def counting(self: DatasetStore, path: str, starts: Sequence[int],
                       ends: Sequence[int]) -> Any:
        calls.append(len(starts))
        return await original(self, path, starts, ends)

    monkeypatch.setattr(DatasetStore, "get_ranges_joined", counting)
    ds = await alance.open_dataset(dataset)
    idx = np.random.default_rng(5).choice(ROWS, 400, replace=False)
    _same(await ds.take(idx), lance.dataset(dataset).take(idx))
    if "2.0" in dataset:
        assert calls and max(calls) >= 16

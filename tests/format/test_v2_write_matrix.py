"""A generated matrix of datasets alance writes as 2.1 / 2.2 (and 2.0) that pylance must read
identically.

The tables are those of the read matrix (:mod:`tests.format.test_v2_read_matrix`: every type the
version holds x nulls, empties, nested nulls, long values, large lists, low cardinality and
random data), at 0, 1 and many rows, plus 1M rows of a few cheap types. alance writes them;
pylance must return exactly the source rows for a full read, a projection, a take of random
rows and a filter, and alance's own reader must agree on the full read.
"""

from __future__ import annotations

import functools
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from alance import sync as al
from tests.format.test_v2_read_matrix import FLAVORS, make_table
from tests.format.test_v2_read_matrix import _same as _same_plain

VERSIONS = ("2.1", "2.2")
#: 2.0 cells (files of 2.0 datasets alance appends to): fewer flavors, to keep the time down.
FLAVORS_2_0 = ("nulls", "nested_nulls", "long", "large_lists")
#: Rows of the "many rows" cells (the heavy flavors keep the read matrix's smaller sizes).
MANY = {"nulls": 60_000, "empties": 60_000, "nested_nulls": 60_000, "dict": 60_000,
        "random": 40_000, "long": 40, "large_lists": 1_000}
#: Cells whose full read is also checked with alance's reader (the read matrix covers
#: alance's reader at length; the unit tests read every type back).
ALANCE_READS = ("empties", "nested_nulls", "long")


@functools.cache
def source(version: str, flavor: str, n: int) -> pa.Table:
    """The table of a cell: 2.2's for 2.1 too (less what 2.1 cannot hold: maps); 2.0's has
    no maps and no null structs."""
    return make_table("2.0" if version == "2.0" else "2.2", flavor, n)


def table_for(version: str, flavor: str, n: int) -> pa.Table:
    table = source("2.0" if version == "2.0" else "2.2", flavor, n)
    if version == "2.1" and "map" in table.column_names:
        table = table.drop_columns(["map"])
    return table


def _decoded(table: pa.Table) -> pa.Table:
    """Dictionary columns as their values, chunk by chunk (2.0 dictionaries hold a null item,
    which Arrow cannot unify across chunks)."""
    cols = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
            for c in table.columns]
    return pa.table(cols, names=table.column_names)


def _same(got: pa.Table, want: pa.Table, what: str) -> None:
    assert got.schema.types == want.schema.types, what
    _same_plain(_decoded(got), _decoded(want), what)


def check_pylance_reads(uri: str, want: pa.Table, seed: int, *, ours: bool = True) -> None:
    ds = lance.dataset(uri)
    n = want.num_rows
    _same(ds.to_table(), want, "to_table")
    if ours:
        _same(al.open_dataset(uri).to_table(), want, "alance to_table")
    cols = want.column_names[::-3][:4] or want.column_names
    _same(ds.to_table(columns=cols), want.select(cols), "projection")
    if n:
        rng = np.random.default_rng(seed)
        idx = rng.choice(n, min(n, 300), replace=False)
        idx = np.concatenate([idx, idx[:3], [0, n - 1]])
        _same(ds.take(idx, columns=cols), want.select(cols).take(pa.array(idx)), "take")
    flt = f"id % 3 = 1 OR id > {n - 5}"
    ids = want.column("id")
    remainder = pc.subtract(ids, pc.multiply(pc.divide(ids, 3), 3))  # ids are >= 0
    mask = pc.or_(pc.equal(remainder, 1), pc.greater(ids, n - 5))
    _same(ds.to_table(filter=flt), want.filter(mask), "filter")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("v2_write_matrix")


@pytest.mark.parametrize(("version", "flavor"), [
    *((v, f) for v in VERSIONS for f in FLAVORS), *(("2.0", f) for f in FLAVORS_2_0)])
def test_many_rows(root: Path, version: str, flavor: str) -> None:
    n = MANY[flavor]
    want = table_for(version, flavor, n)
    uri = str(root / f"{flavor}-{version}-{n}")
    al.write_dataset(want, uri, data_storage_version=version, max_rows_per_file=40_000)
    assert lance.dataset(uri).data_storage_version == version
    check_pylance_reads(uri, want, seed=n, ours=flavor in ALANCE_READS)


@pytest.mark.parametrize("version", [*VERSIONS, "2.0"])
@pytest.mark.parametrize("n", [0, 1])
def test_tiny(root: Path, version: str, n: int) -> None:
    for flavor in ("nulls", "random", "empties", "nested_nulls", "long"):
        want = table_for(version, flavor, n)
        uri = str(root / f"tiny-{flavor}-{version}-{n}")
        al.write_dataset(want, uri, data_storage_version=version)
        check_pylance_reads(uri, want, seed=n)


@pytest.mark.parametrize("version", VERSIONS)
def test_million_rows(tmp_path: Path, version: str) -> None:
    n = 1_000_000
    rng = np.random.default_rng(11)
    values = rng.integers(-(2**40), 2**40, n)
    valid = rng.random(n) > 0.1
    want = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "i64": pa.array(values, mask=~valid),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
    })
    uri = str(tmp_path / "m")
    al.write_dataset(want, uri, data_storage_version=version)
    check_pylance_reads(uri, want, seed=5, ours=version == "2.2")

"""LABEL_LIST indices on list columns: built by alance in pylance's layout (pylance opens and
uses them) and used by alance for ``array_has_any`` / ``array_has_all`` / ``array_contains``
filters, whoever built them."""

from __future__ import annotations

import os
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import _loop
from alance import sync as al
from alance.dataset.query.indices.rowaddr import decode_row_addr_map
from alance.sync.file import LanceFileReader

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FILTERS = [
    "array_has_any(tags, ['a'])", "array_has_any(tags, ['a', 'c'])",
    "array_has_all(tags, ['a', 'b'])", "array_has_all(tags, ['a', 'zz'])",
    "array_contains(tags, 'b')", "array_has(tags, 'c')", "list_has_any(tags, ['e'])",
    "array_has_any(nums, [3, 40])", "array_has_all(nums, [1, 3])",
    "array_has_any(tags, ['a']) AND id > 100", "array_has_any(tags, ['c']) OR id < 3",
    "array_has_any(tags, ['a']) AND array_has_all(nums, [0, 2])",
]


def _table(n: int = 600) -> pa.Table:
    shapes = [["a", "b"], None, [], ["b", None], ["c"], ["a", "a", "d"], ["e", "b", "a"]]
    tags = [shapes[i % len(shapes)] for i in range(n)]
    nums = [None if i % 17 == 0 else [i % 4, i % 6, i % 50] for i in range(n)]
    return pa.table({"id": np.arange(n), "tags": pa.array(tags, pa.list_(pa.string())),
                     "nums": pa.array(nums, pa.list_(pa.int64()))})


def _index_content(uri: str, name: str) -> tuple[list, list, dict]:
    ix = next(i for i in lance.dataset(uri).list_indices() if i["name"] == name)
    reader = LanceFileReader(os.path.join(uri, "_indices", ix["uuid"],
                                          "bitmap_page_lookup.lance"))
    table = reader.read_all().to_table()
    meta = dict(table.schema.metadata)
    number = int(meta[b"lance:label_list_nulls"])
    nulls = decode_row_addr_map(_loop.run(reader._async.read_global_buffer(number)))
    maps = [decode_row_addr_map(b) for b in table.column("bitmaps").to_pylist()]
    return table.column("keys").to_pylist(), maps, {"nulls": nulls, "stats":
                                                     meta[b"lance:index_stats"]}


@pytest.mark.parametrize("stable", [False, True])
def test_alance_builds_what_pylance_builds(tmp_path: Path, stable: bool) -> None:
    ours, theirs = str(tmp_path / "a"), str(tmp_path / "b")
    for uri in (ours, theirs):
        lance.write_dataset(_table(), uri, max_rows_per_file=200, enable_stable_row_ids=stable)
        lance.dataset(uri).delete("id % 9 = 4")
    al.dataset(ours).create_scalar_index("tags", "LABEL_LIST")
    al.dataset(ours).create_scalar_index("nums", "label_list")
    lance.dataset(theirs).create_scalar_index("tags", "LABEL_LIST")
    lance.dataset(theirs).create_scalar_index("nums", "LABEL_LIST")
    for name in ("tags_idx", "nums_idx"):
        # the same keys, row sets, null lists and statistics as pylance's index
        assert _index_content(ours, name) == _index_content(theirs, name)
        assert (lance.dataset(ours).stats.index_stats(name)["indices"]
                == lance.dataset(theirs).stats.index_stats(name)["indices"])
    pl, mine = lance.dataset(ours), al.dataset(ours)
    assert {d.name: d.index_type for d in pl.describe_indices()} == {
        "tags_idx": "LabelList", "nums_idx": "LabelList"}
    for sql in FILTERS:
        want = pl.to_table(filter=sql, use_scalar_index=False)
        assert pl.to_table(filter=sql).equals(want), sql
        assert mine.to_table(filter=sql).equals(want), sql
        if "tags" in sql and " OR " not in sql:  # (no index on id here)
            assert "@tags_idx(LabelList)" in pl.scanner(filter=sql).explain_plan(True), sql


@pytest.mark.parametrize("stable", [False, True])
def test_alance_uses_pylance_index(tmp_path: Path, stable: bool) -> None:
    uri = str(tmp_path / "a")
    lance.write_dataset(_table(), uri, max_rows_per_file=250, enable_stable_row_ids=stable)
    lance.dataset(uri).create_scalar_index("tags", "LABEL_LIST")
    lance.dataset(uri).create_scalar_index("nums", "LABEL_LIST")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).delete("id % 5 = 1")
    lance.write_dataset(_table(40), uri, mode="append")  # an unindexed fragment
    mine = al.dataset(uri)
    for sql in FILTERS:
        want = lance.dataset(uri).to_table(filter=sql)
        assert mine.to_table(filter=sql).equals(want), sql
        assert mine.scanner(filter=sql, use_scalar_index=False).to_table().equals(want), sql
    text = mine.scanner(filter="array_has_all(tags, ['a', 'b'])").explain()
    assert "[array_has_all(tags, List([a, b]))]@tags_idx(LabelList)" in text
    text = mine.scanner(filter="array_contains(tags, 'b') AND id > 10").explain()
    assert "@tags_idx(LabelList)" in text and "@id_idx(BTree)" in text
    assert "scalar index" not in mine.scanner(filter="NOT array_has_any(tags, ['a'])").explain()
    plan = mine.scanner(filter="array_has_any(tags, ['a'])").explain_plan(True)
    assert "ScalarIndexQuery" in plan and "tags_idx" in plan


def test_label_list_refused_on_other_types(tmp_path: Path) -> None:
    uri = str(tmp_path / "a")
    ds = al.write_dataset(_table(20), uri)
    with pytest.raises(alance.InvalidInputError):
        ds.create_scalar_index("id", "LABEL_LIST")

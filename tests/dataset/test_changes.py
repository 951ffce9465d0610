"""The change data feed against a scripted history: every pair of versions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.errors import InvalidInputError, UnsupportedFeatureError

# a row of the model: rowid -> (id, v, created_at, last_updated_at)
State = dict[int, tuple[int, str, int, int]]


def _rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


class _Model:
    """What the history says: row ids handed out in order, versions per row."""

    def __init__(self) -> None:
        self.states: list[State] = [{}]
        self.next_row_id = 0

    def commit(self, change: Callable[[State, int], None]) -> None:
        state = dict(self.states[-1])
        change(state, len(self.states))
        self.states.append(state)

    def insert(self, ids: list[int], tag: str) -> Callable[[State, int], None]:
        def go(state: State, version: int) -> None:
            for i in ids:
                state[self.next_row_id] = (i, f"{tag}{i}", version, version)
                self.next_row_id += 1
        return go

    @staticmethod
    def update(ids: set[int], value: str) -> Callable[[State, int], None]:
        def go(state: State, version: int) -> None:
            for rid, (i, _, created, _) in list(state.items()):
                if i in ids:
                    state[rid] = (i, value, created, version)
        return go

    @staticmethod
    def delete(ids: set[int]) -> Callable[[State, int], None]:
        def go(state: State, version: int) -> None:
            for rid, row in list(state.items()):
                if row[0] in ids:
                    del state[rid]
        return go

    def upsert(self, rows: dict[int, str]) -> Callable[[State, int], None]:
        def go(state: State, version: int) -> None:
            present = {row[0]: rid for rid, row in state.items()}
            for i, value in rows.items():
                if i in present:
                    created = state[present[i]][2]
                    state[present[i]] = (i, value, created, version)
            for i, value in rows.items():
                if i not in present:
                    state[self.next_row_id] = (i, value, version, version)
                    self.next_row_id += 1
        return go

    def expected(self, a: int, b: int) -> set[tuple[Any, ...]]:
        before, after = self.states[a], self.states[b]
        out = set()
        for rid, (i, v, created, updated) in after.items():
            if a < created <= b:
                out.add(("insert", rid, i, v, created, updated))
            elif created <= a < updated <= b:
                out.add(("update", rid, i, v, created, updated))
        for rid, (i, v, created, updated) in before.items():
            if rid not in after:
                out.add(("delete", rid, i, v, created, updated))
        return out


def _scripted(path: str) -> tuple[al.LanceDataset, _Model]:
    m = _Model()
    ds = al.write_dataset(_rows(list(range(10)), "c"), path, enable_stable_row_ids=True,
                          max_rows_per_file=4, data_storage_version="legacy")
    m.commit(m.insert(list(range(10)), "c"))                                   # v1
    ds = al.write_dataset(_rows(list(range(10, 15)), "a"), path, mode="append")
    m.commit(m.insert(list(range(10, 15)), "a"))                               # v2
    ds = ds.update({"v": "'u3'"}, where="id IN (1, 2, 11)").dataset
    m.commit(m.update({1, 2, 11}, "u3"))                                       # v3
    ds = ds.delete("id IN (3, 12)").dataset
    m.commit(m.delete({3, 12}))                                                # v4
    src = pa.table({"id": pa.array([2, 13, 21, 20], pa.int64()),
                    "v": ["m5", "m5", "m5", "m5"]})
    ds = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all(
    ).execute(src).dataset
    m.commit(m.upsert({2: "m5", 13: "m5", 21: "m5", 20: "m5"}))  # source order  # v5
    ds = ds.update({"v": "'u6'"}, where="id = 20").dataset
    m.commit(m.update({20}, "u6"))                                             # v6
    ds = ds.delete("id = 1 OR id = 21").dataset
    m.commit(m.delete({1, 21}))                                                # v7
    ds = al.write_dataset(_rows([30, 31], "a"), path, mode="append")
    m.commit(m.insert([30, 31], "a"))                                          # v8
    ds = ds.update({"v": "'u9'"}, where="id = 30 OR id = 0").dataset
    m.commit(m.update({30, 0}, "u9"))                                          # v9
    assert ds.version == len(m.states) - 1
    return ds, m


def _as_set(table: pa.Table) -> set[tuple[Any, ...]]:
    return {(r["_change_type"], r["_rowid"], r["id"], r["v"], r["_row_created_at_version"],
             r["_row_last_updated_at_version"]) for r in table.to_pylist()}


def test_changes_match_the_history_for_every_pair(local_uri: str) -> None:
    ds, model = _scripted(local_uri)
    last = ds.version
    for b in range(1, last + 1):
        # the model's rows at b are what a scan of b shows
        at_b = ds.checkout_version(b).to_table(columns=["id", "v", "_rowid",
                                                        "_row_created_at_version",
                                                        "_row_last_updated_at_version"])
        assert {r["_rowid"]: (r["id"], r["v"], r["_row_created_at_version"],
                              r["_row_last_updated_at_version"])
                for r in at_b.to_pylist()} == model.states[b]
        for a in range(0, b + 1):
            got = ds.changes(a, b).to_table()
            assert len(got) == len(_as_set(got))
            assert _as_set(got) == model.expected(a, b), (a, b)
    # inserts first, then updates, then deletes; the schema names the change
    t = ds.changes(4, 7).to_table()
    kinds = t["_change_type"].to_pylist()
    assert kinds == sorted(kinds, key=["insert", "update", "delete"].index)
    assert t.column_names == ["id", "v", "_rowid", "_row_created_at_version",
                              "_row_last_updated_at_version", "_change_type"]


def test_projection_streaming_and_options(local_uri: str) -> None:
    ds, model = _scripted(local_uri)
    feed = ds.changes(2, 7, columns=["v"], batch_size=2)
    batches = list(feed)
    assert batches and all(b.num_rows <= 2 for b in batches)
    assert all(b.schema.names == ["v", "_rowid", "_row_created_at_version",
                                  "_row_last_updated_at_version", "_change_type"]
               for b in batches)
    assert sum(b.num_rows for b in batches) == len(model.expected(2, 7))
    no_deletes = ds.changes(2, 7, include_deleted=False).to_table()
    assert "delete" not in no_deletes["_change_type"].to_pylist()
    assert ds.changes(5, 5).to_table().num_rows == 0
    with pytest.raises(InvalidInputError, match="after end"):
        ds.changes(6, 3)


async def test_async_feed_equals_sync(local_uri: str) -> None:
    _, model = _scripted(local_uri)
    ads = await alance.open_dataset(local_uri)
    feed = await ads.changes(3, 8)
    rows = [b async for b in feed]
    assert _as_set(pa.Table.from_batches(rows)) == model.expected(3, 8)
    assert (await feed.to_table()).num_rows == sum(b.num_rows for b in rows)
    older = await ads.checkout_version(6)
    assert _as_set(await (await older.changes(1)).to_table()) == model.expected(1, 6)


def test_needs_stable_row_ids(local_uri: str) -> None:
    ds = al.write_dataset(_rows([1, 2], "x"), local_uri, data_storage_version="legacy")
    ds = al.write_dataset(_rows([3], "x"), local_uri, mode="append")
    with pytest.raises(UnsupportedFeatureError, match="enable_stable_row_ids"):
        ds.changes(1, 2)


def test_pylance_history_inserts_and_updates_match_its_own_filters(tmp_path: Path) -> None:
    path = str(tmp_path / "py.lance")
    lance.write_dataset(_rows(list(range(100)), "c"), path, enable_stable_row_ids=True,
                        max_rows_per_file=40)
    ds = lance.dataset(path)
    ds.update({"v": "'u'"}, where="id < 10")
    lance.write_dataset(_rows(list(range(100, 120)), "a"), path, mode="append")
    ds = lance.dataset(path)
    ds.delete("id >= 90 AND id < 95")
    ds = lance.dataset(path)
    ds.update({"v": "'w'"}, where="id >= 5 AND id < 15 OR id = 110")
    ref = lance.dataset(path)
    ours = al.open_dataset(path)
    for a in range(1, ref.version):
        got = ours.changes(a).to_table()
        cols = ["id", "v", "_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
        for kind, where in (
                ("insert", f"_row_created_at_version > {a} AND _row_created_at_version <= "
                           f"{ref.version}"),
                ("update", f"_row_created_at_version <= {a} AND "
                           f"_row_last_updated_at_version > {a} AND "
                           f"_row_last_updated_at_version <= {ref.version}")):
            expected = ref.to_table(columns=cols, filter=where).sort_by("_rowid")
            mine = got.filter(pa.compute.equal(got["_change_type"], kind)).select(cols)
            assert mine.sort_by("_rowid").to_pylist() == expected.to_pylist(), (a, kind)
        deleted = got.filter(pa.compute.equal(got["_change_type"], "delete"))
        if a < 4:
            assert sorted(deleted["id"].to_pylist()) == [90, 91, 92, 93, 94]

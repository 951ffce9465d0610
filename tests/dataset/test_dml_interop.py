"""delete / update / merge_insert interop with pylance 14, both ways and interleaved.

A Python dict models the table (id -> v); pylance and alance take turns changing one dataset
and after every step both must read exactly the model. Concurrent commits across the two
libraries exercise each one's conflict resolution over the other's transaction files.
"""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa

import alance
from alance._proto import table_pb2


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "v": ids.astype(np.float64)})


def as_model(t: pa.Table) -> dict[int, float]:
    ids = t["id"].to_pylist()
    assert len(ids) == len(set(ids)), "duplicate ids"
    return dict(zip(ids, t["v"].to_pylist(), strict=True))


async def check(uri: str, model: dict[int, float]) -> None:
    ds = await alance.open_dataset(uri)
    assert as_model(await ds.to_table()) == model
    assert await ds.count_rows() == len(model)
    pl = lance.dataset(uri)
    assert as_model(pl.to_table()) == model
    assert pl.count_rows() == len(model)
    assert pl.version == ds.version


async def test_pylance_reads_alance_deletions_of_both_kinds(local_uri: str) -> None:
    ds = await alance.write_dataset(rows(0, 20000), local_uri, max_rows_per_file=10000)
    ds = (await ds.delete("id < 10 or (id >= 10000 and id < 16000)")).dataset
    kinds = [f.deletion_file.file_type for f in ds.manifest.fragments]
    assert kinds == [table_pb2.DeletionFile.ARROW_ARRAY, table_pb2.DeletionFile.BITMAP]
    pl = lance.dataset(local_uri)
    assert pl.count_rows() == 20000 - 6010
    assert pl.count_rows("id < 20") == 10
    assert pl.take([0])["id"].to_pylist() == [10]
    got = sorted(pl.to_table(columns=["id"])["id"].to_pylist())
    assert got == [*range(10, 10000), *range(16000, 20000)]
    # pylance extends our files, and we read its extension
    pl.delete("id >= 16000 and id < 16005")
    ds = await alance.open_dataset(local_uri)
    assert await ds.count_rows() == 20000 - 6015


async def test_alance_reads_pylance_deletions_and_updates(local_uri: str) -> None:
    lance.write_dataset(rows(0, 20000), local_uri, max_rows_per_file=10000,
                        data_storage_version="legacy")
    pl = lance.dataset(local_uri)
    pl.delete("id < 10 or (id >= 10000 and id < 16000)")
    pl.update({"v": "v * 10"}, where="id = 5000")
    pl.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        pa.table({"id": pa.array([7000, 30000], pa.int64()), "v": [-1.0, -2.0]}))
    ds = await alance.open_dataset(local_uri)
    kinds = {f.deletion_file.file_type for f in ds.manifest.fragments
             if f.HasField("deletion_file")}
    assert kinds == {table_pb2.DeletionFile.ARROW_ARRAY, table_pb2.DeletionFile.BITMAP}
    assert as_model(await ds.to_table()) == as_model(lance.dataset(local_uri).to_table())
    t = await ds.to_table(filter="id in (5000, 7000, 30000)")
    assert sorted(zip(t["id"].to_pylist(), t["v"].to_pylist(), strict=True)) == [
        (5000, 50000.0), (7000, -1.0), (30000, -2.0)]


async def test_alternating_writers_stay_consistent(local_uri: str) -> None:
    lance.write_dataset(rows(0, 3000), local_uri, max_rows_per_file=1000,
                        data_storage_version="legacy")
    model = {i: float(i) for i in range(3000)}
    ds = await alance.open_dataset(local_uri)

    ds = (await ds.delete("id % 7 = 0")).dataset
    model = {k: v for k, v in model.items() if k % 7 != 0}
    await check(local_uri, model)

    lance.dataset(local_uri).delete("id >= 2900")
    model = {k: v for k, v in model.items() if k < 2900}
    await check(local_uri, model)

    ds = await alance.open_dataset(local_uri)
    ds = (await ds.update({"v": "v + 0.5"}, where="id >= 1000 and id < 1100")).dataset
    model.update({k: v + 0.5 for k, v in model.items() if 1000 <= k < 1100})
    await check(local_uri, model)

    lance.dataset(local_uri).update({"v": "v * 2"}, where="id >= 1050 and id < 1150")
    model.update({k: v * 2 for k, v in model.items() if 1050 <= k < 1150})
    await check(local_uri, model)

    await alance.write_dataset(rows(5000, 10), local_uri, mode="append")
    model.update({k: float(k) for k in range(5000, 5010)})
    await check(local_uri, model)

    lance.write_dataset(rows(6000, 10), local_uri, mode="append")
    model.update({k: float(k) for k in range(6000, 6010)})
    await check(local_uri, model)

    ds = await alance.open_dataset(local_uri)
    src = pa.table({"id": pa.array([1, 2, 5001, 6001, 9000], pa.int64()), "v": [-1.0] * 5})
    await (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
           .execute(src))
    model.update(dict.fromkeys([1, 2, 5001, 6001, 9000], -1.0))
    await check(local_uri, model)

    lance.dataset(local_uri).merge_insert("id").when_matched_update_all(
    ).when_not_matched_insert_all().execute(
        pa.table({"id": pa.array([3, 9000, 9001], pa.int64()), "v": [-3.0] * 3}))
    model.update(dict.fromkeys([3, 9000, 9001], -3.0))
    await check(local_uri, model)

    ds = await alance.open_dataset(local_uri)
    await ds.delete("v < 0")
    model = {k: v for k, v in model.items() if v >= 0}
    await check(local_uri, model)


async def test_concurrent_commits_across_libraries(local_uri: str) -> None:
    lance.write_dataset(rows(0, 1000), local_uri, max_rows_per_file=1000,
                        data_storage_version="legacy")
    # both read version 1; pylance commits first, alance rebases over pylance's transaction
    ds = await alance.open_dataset(local_uri)
    lance.dataset(local_uri).delete("id < 10")
    result = await ds.delete("id >= 500 and id < 510", conflict_retries=0)
    assert result.dataset.version == 3
    model = {i: float(i) for i in range(1000) if not (i < 10 or 500 <= i < 510)}
    await check(local_uri, model)
    # alance commits first, pylance (holding an older version) rebases over alance's
    stale = lance.dataset(local_uri)
    await (await alance.open_dataset(local_uri)).delete("id >= 900")
    stale.delete("id >= 100 and id < 110")
    model = {k: v for k, v in model.items() if k < 900 and not 100 <= k < 110}
    await check(local_uri, model)
    stale = lance.dataset(local_uri)
    await alance.write_dataset(rows(2000, 5), local_uri, mode="append")
    stale.update({"v": "v + 1"}, where="id = 200")
    model.update({k: float(k) for k in range(2000, 2005)})
    model[200] = 201.0
    await check(local_uri, model)


async def test_deletion_vectors_merge_across_libraries(local_uri: str) -> None:
    """Both libraries delete different rows of one fragment from the same read version."""
    lance.write_dataset(rows(0, 300), local_uri, max_rows_per_file=100,
                        data_storage_version="legacy")
    model = {i: float(i) for i in range(300)}
    stale = lance.dataset(local_uri)
    ds = await alance.open_dataset(local_uri)
    await ds.update({"v": "v + 1"}, where="id < 10")  # alance: rows 0-9 of fragment 0
    stale.delete("id >= 50 and id < 60")  # pylance rebases: merges with alance's vector
    model.update({k: k + 1.0 for k in range(10)})
    for k in range(50, 60):
        del model[k]
    await check(local_uri, model)
    stale = await alance.open_dataset(local_uri)
    lance.dataset(local_uri).delete("id >= 60 and id < 65")
    await stale.delete("id >= 70 and id < 75", conflict_retries=0)  # alance merges pylance's
    for k in [*range(60, 65), *range(70, 75)]:
        del model[k]
    await check(local_uri, model)
    frag0 = (await alance.open_dataset(local_uri)).manifest.fragments[0]
    assert frag0.deletion_file.num_deleted_rows == 30

"""Restore: an old version committed again as the newest, interop with pylance."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync
from alance.format.manifest import decode_transaction_file


def table(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "s": [f"r{i}" for i in range(start, start + n)]})


async def test_restore_by_number_and_tag_read_by_pylance(local_uri: str) -> None:
    ds = await alance.write_dataset(table(0, 100), local_uri, max_rows_per_file=30,
                                    data_storage_version="legacy")
    ds = (await ds.delete("id % 7 = 0")).dataset
    v2 = await ds.to_table()
    await ds.tags.create("after-delete", 2)
    ds = await alance.write_dataset(table(0, 5), local_uri, mode="overwrite",
                                    data_storage_version="legacy")
    assert ds.version == 3

    restored = await ds.restore(2)
    assert restored.version == 4
    assert (await restored.to_table()).equals(v2)
    txn = decode_transaction_file(
        await restored._store.get(f"_transactions/{restored.manifest.transaction_file}"))
    assert txn.WhichOneof("operation") == "restore" and txn.restore.version == 2
    assert txn.read_version == 3
    pl = lance.dataset(local_uri)
    assert pl.version == 4 and pl.to_table().equals(v2)
    # history is kept: version 3 still reads
    assert lance.dataset(local_uri, version=3).count_rows() == 5

    # by tag, and restoring the version an object reads (pylance's no-argument form)
    again = await (await alance.open_dataset(local_uri, version=1)).restore()
    assert again.version == 5 and await again.count_rows() == 100
    by_tag = await again.restore("after-delete")
    assert by_tag.version == 6 and (await by_tag.to_table()).equals(v2)
    # appending after a restore continues from the restored content
    ds = await alance.write_dataset(table(1000, 3), local_uri, mode="append")
    assert lance.dataset(local_uri).count_rows() == v2.num_rows + 3


async def test_alance_restores_pylance_history(local_uri: str) -> None:
    lance.write_dataset(table(0, 50), local_uri, data_storage_version="legacy")
    lance.write_dataset(table(50, 50), local_uri, mode="append")
    pl = lance.dataset(local_uri)
    pl.delete("id < 10")
    ds = await alance.open_dataset(local_uri)
    new = await ds.restore(2)
    assert await new.count_rows() == 100
    assert lance.dataset(local_uri).count_rows() == 100
    # pylance restores on top of alance's restore
    lance.dataset(local_uri, version=3).restore()
    assert (await alance.open_dataset(local_uri)).version == 5
    assert await (await alance.open_dataset(local_uri)).count_rows() == 90


async def test_restore_errors(uri: str) -> None:
    ds = await alance.write_dataset(table(0, 5), uri, data_storage_version="legacy")
    with pytest.raises(alance.NotFoundError):
        await ds.restore(7)
    with pytest.raises(alance.NotFoundError):
        await ds.restore("no-such-tag")
    with pytest.raises(alance.InvalidInputError):
        await ds.restore(0)


def test_sync_restore(tmp_path: object) -> None:
    uri = f"{tmp_path}/ds.lance"
    sync.write_dataset(table(0, 5), uri, data_storage_version="legacy")
    ds = sync.write_dataset(table(5, 5), uri, mode="append")
    new = ds.restore(1)
    assert isinstance(new, sync.LanceDataset)
    assert new.version == 3 and new.count_rows() == 5

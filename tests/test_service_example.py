"""examples/service.py runs (its self test starts the aiohttp service, calls every endpoint and
checks the answers), and the handle methods it relies on do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import alance

ROOT = Path(__file__).resolve().parents[1]


def test_service_example_selftest(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "service.py"), "--selftest",
                           "--uri", str(tmp_path / "svc.lance")], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "selftest ok: 100 -> 109 rows" in done.stdout


async def test_checkout_latest_and_auto_compaction(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = await alance.write_dataset(pa.table({"id": [0]}), uri)
    assert await ds.checkout_latest() is ds
    other = await alance.open_dataset(uri)
    await other.insert(pa.table({"id": [1]}))
    latest = await ds.checkout_latest()
    assert latest.version == 2 and await latest.count_rows() == 2
    for i in range(2, 4):
        latest = await latest.insert(pa.table({"id": [i]}), compact_after=5)
    assert len(latest.get_fragments()) == 4  # below the threshold: not compacted
    latest = await latest.insert(pa.table({"id": [4]}), compact_after=5)
    assert len(latest.get_fragments()) == 1 and await latest.count_rows() == 5
    # The policy can live in the dataset's config instead (every inserting handle follows it).
    latest = (await latest.update_config({"alance.auto_compact.small_fragments": "2"})).dataset
    latest = await latest.insert(pa.table({"id": [5]}))
    # Tiered: the 5-row fragment holds more than 4x the one new row, so it is left alone...
    assert [f.physical_rows for f in latest.get_fragments()] == [5, 1]
    latest = await latest.insert(pa.table({"id": [6]}))
    # ... until the newer fragments together hold at least a quarter of its rows.
    assert len(latest.get_fragments()) == 1 and await latest.count_rows() == 7
    table = await latest.to_table()
    assert sorted(table.column("id").to_pylist()) == list(range(7))


async def test_auto_compaction_leaves_large_fragments_alone(tmp_path: Path) -> None:
    """Small inserts are merged among themselves; the large fragment is never rewritten for
    them (each row is rewritten a logarithmic number of times), and no row is lost."""
    uri = str(tmp_path / "ds")
    ds = await alance.write_dataset(pa.table({"id": list(range(1000))}), uri)
    base = ds.get_fragments()[0]
    for i in range(40):
        ds = await ds.insert(pa.table({"id": [1000 + i]}), compact_after=4)
    fragments = ds.get_fragments()
    assert fragments[0].fragment_id == base.fragment_id
    assert fragments[0].data_files()[0].path == base.data_files()[0].path
    assert len(fragments) <= 5
    rows = [f.physical_rows for f in fragments]
    assert rows[0] == 1000 and sum(rows) == 1040
    # Tiers shrink from oldest to newest: each at most what the ratio lets through.
    table = await ds.to_table()
    assert sorted(table.column("id").to_pylist()) == list(range(1040))


def test_blocking_checkout_latest_moves(tmp_path: Path) -> None:
    from alance import sync as al

    uri = str(tmp_path / "ds")
    ds = al.write_dataset(pa.table({"id": [0]}), uri)
    al.open_dataset(uri).insert(pa.table({"id": [1]}))
    assert ds.checkout_latest() is None and ds.version == 2

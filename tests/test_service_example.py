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
    assert len(latest.get_fragments()) == 1 and await latest.count_rows() == 6


def test_blocking_checkout_latest_moves(tmp_path: Path) -> None:
    from alance import sync as al

    uri = str(tmp_path / "ds")
    ds = al.write_dataset(pa.table({"id": [0]}), uri)
    al.open_dataset(uri).insert(pa.table({"id": [1]}))
    assert ds.checkout_latest() is None and ds.version == 2

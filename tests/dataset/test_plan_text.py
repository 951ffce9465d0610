"""explain_plan / analyze_plan: the read node, and what a scan really read."""

from __future__ import annotations

import re
from pathlib import Path

import lance
import pyarrow as pa

import alance
from alance import sync as al
from alance.io.store import counting_io


def _dataset(tmp_path: Path) -> str:
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"a": range(1000), "b": range(1000)}), uri,
                        max_rows_per_file=400)
    return uri


def test_explain_plan_names_what_is_read(tmp_path: Path) -> None:
    ds = al.open_dataset(_dataset(tmp_path))
    plan = ds.scanner(columns=[], filter="a < 50", with_row_id=True).explain_plan(True)
    assert "projection=[a]" in plan and "row_id=true" in plan and "num_fragments=3" in plan
    assert plan.splitlines()[0].startswith("ProjectionExec: expr=[_rowid]")
    plain = ds.scanner(columns=["a", "b"], limit=5, offset=10).explain_plan()
    assert plain.startswith("LanceRead:") and "range_after=Some(10..15)" in plain


def test_analyze_plan_counts_rows_and_io(tmp_path: Path) -> None:
    uri = _dataset(tmp_path)
    lance.dataset(uri).delete("a >= 900")
    ds = al.open_dataset(uri)
    plan = ds.scanner(columns=[], filter="a < 50", with_row_id=True).analyze_plan()
    line = next(ln for ln in plan.splitlines() if "LanceRead:" in ln)
    found = dict(re.findall(r"(\w+)=(\d+)", line.split("metrics=[", 1)[1]))
    assert found["output_rows"] == "50"
    assert found["rows_scanned"] == "900"  # deleted rows are not scanned
    assert int(found["bytes_read"]) > 0 and int(found["requests"]) >= 1
    assert int(found["iops"]) >= int(found["requests"])
    full = ds.scanner().analyze_plan()
    assert re.search(r"^\s*LanceRead:.*bytes_read=\d+.*iops=\d+.*requests=\d+.*$", full,
                     re.MULTILINE)


async def test_counting_io_sees_only_its_own_reads(tmp_path: Path) -> None:
    ds = await alance.open_dataset(_dataset(tmp_path))
    await ds.to_table()  # file metadata now cached
    with counting_io() as one:
        table = await ds.to_table(columns=["a"])
    assert table.num_rows == 1000 and one.requests >= 1 and one.bytes_read > 0
    with counting_io() as both:
        await ds.to_table()
    assert both.bytes_read > one.bytes_read  # two columns read more than one
    counted = one.bytes_read
    await ds.to_table()
    assert one.bytes_read == counted  # reads outside the block are not counted

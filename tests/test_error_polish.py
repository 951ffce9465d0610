"""Messages people read: filter parse errors carry no terminal colour codes, unknown columns
get "did you mean", and scans of S3 objects (buffers at any alignment) print no Arrow
alignment warnings."""

from __future__ import annotations

import warnings

import lance
import pyarrow as pa
import pytest

import alance
from tests.s3_servers import S3Target

BAD_FILTERS = ["idx >> (", "idx = = 1", "name LIKE", "((idx > 1)", "idx IN (1,", "SELECT"]


@pytest.mark.parametrize("text", BAD_FILTERS)
async def test_filter_errors_have_no_ansi_codes(text: str) -> None:
    ds = await alance.write_dataset(pa.table({"idx": [1, 2], "name": ["a", "b"]}),
                                    "memory://")
    with pytest.raises(alance.InvalidInputError) as info:
        await ds.to_table(filter=text)
    assert "\x1b" not in str(info.value) and text.strip() in str(info.value)


async def test_unknown_columns_suggest_names() -> None:
    ds = await alance.write_dataset(pa.table({"idx": [1], "name": ["a"]}), "memory://")
    with pytest.raises(alance.InvalidInputError, match="Did you mean 'name'"):
        await ds.to_table(filter="nmae = 'a'")
    with pytest.raises(alance.InvalidInputError, match="Did you mean 'idx'"):
        await ds.to_table(columns=["idz"])


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
async def test_s3_scans_print_no_alignment_warnings(
        moto_target: S3Target, version: str, capfd: pytest.CaptureFixture[str]) -> None:
    n = 20_000
    table = pa.table({"i": pa.array(range(n), pa.int32()),
                      "s": [f"v{i % 7}" * (i % 5) for i in range(n)],
                      "f": pa.array([i / 3 for i in range(n)])})
    uri = moto_target.uri("aligned")
    lance.write_dataset(table, uri, storage_options=moto_target.storage_options,
                        data_storage_version=version)
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = await alance.open_dataset(uri, storage_options=moto_target.storage_options)
        assert (await ds.to_table()).equals(table)
        await ds.to_table(filter="i % 3 = 0")
        await ds.take([1, n - 1, 17])
    err = capfd.readouterr().err
    assert "aligned" not in err.lower()

"""Sessions (pylance's ``ds.session()``): the metadata a dataset open keeps, bounded in bytes."""

from __future__ import annotations

import gc
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.dataset.fragments.session import SESSION_OVERHEAD_BYTES
from alance.errors import InvalidInputError


def write(uri: str, fragments: int = 4) -> None:
    table = pa.table({"id": range(100 * fragments), "s": [f"v{i}" for i in range(100 * fragments)]})
    al.write_dataset(table, uri, max_rows_per_file=100)


@pytest.mark.parametrize("engine", ["alance", "pylance"])
def test_zero_metadata_cache_holds_nothing(tmp_path: Path, engine: str) -> None:
    """The shape pylance's test_metadata_cache_size checks, in both engines."""
    module = al if engine == "alance" else lance
    uri = str(tmp_path / "ds")
    write(uri)
    ds = module.dataset(uri)
    ds.to_table()
    default = ds.session().size_bytes()
    assert default > 0
    none = module.dataset(uri, metadata_cache_size_bytes=0)
    assert none.to_table().num_rows == 400
    assert none.session().size_bytes() < default
    assert repr(none.session()) == ("Session(index_cache_size_bytes=0, "
                                    "metadata_cache_size_bytes=0)")
    assert none.session().index_cache_size_bytes() == 0


def test_scans_fill_the_session_and_handles_share_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    write(uri)
    ds = al.dataset(uri)
    opened = ds.session().size_bytes()
    assert opened > SESSION_OVERHEAD_BYTES  # the manifest
    ds.to_table()
    scanned = ds.session().size_bytes()
    assert scanned > opened  # four data files' metadata
    ds.to_table()
    assert ds.session().size_bytes() == scanned  # nothing new to keep
    other = al.dataset(uri)
    assert not other.session().is_same_as(ds.session())
    shared = al.dataset(uri, session=ds.session())
    assert shared.session().is_same_as(ds.session())
    old = ds.checkout_version(1)
    assert old.session().is_same_as(ds.session())
    ds.delete("id < 10")  # the blocking handle moves to the new version, same session
    assert ds.version == 2 and ds.session().is_same_as(shared.session())


def test_capacity_bounds_what_is_kept(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    write(uri, fragments=8)
    full = al.dataset(uri)
    full.to_table()
    per_file = (full.session().metadata_cache_size_bytes()
                - al.dataset(uri).session().metadata_cache_size_bytes()) // 8
    capacity = 3 * per_file
    small = al.dataset(uri, metadata_cache_size_bytes=capacity)
    for _ in range(2):
        assert small.to_table().equals(full.to_table())
        assert 0 < small.session().metadata_cache_size_bytes() <= capacity
    assert small.take([0, 799]).column("id").to_pylist() == [0, 799]


def test_entries_leave_with_their_handles(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    write(uri)
    session = alance.Session()
    ds = al.dataset(uri, session=session)
    base = session.metadata_cache_size_bytes()
    for _ in range(3):
        al.dataset(uri, session=session).to_table()
    gc.collect()
    assert session.metadata_cache_size_bytes() == base
    assert ds.count_rows() == 400


async def test_async_open_takes_a_session(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    write(uri)
    session = alance.Session(metadata_cache_size_bytes=0)
    ds = await alance.open_dataset(uri, session=session)
    assert ds.session() is session
    assert (await ds.to_table()).num_rows == 400
    assert session.size_bytes() == SESSION_OVERHEAD_BYTES


def test_bad_capacities() -> None:
    with pytest.raises(InvalidInputError):
        alance.Session(metadata_cache_size_bytes=-1)
    with pytest.raises(InvalidInputError):
        al.Session(index_cache_size_bytes="big")  # type: ignore[arg-type]


def test_pickles(tmp_path: Path) -> None:
    """Sessions and the read state holding one travel to workers as capacities."""
    import pickle

    uri = str(tmp_path / "ds")
    write(uri)
    session = alance.Session(metadata_cache_size_bytes=12345)
    ds = al.dataset(uri, session=session)
    ds.to_table()
    copy = pickle.loads(pickle.dumps(session))
    assert repr(copy) == "Session(index_cache_size_bytes=0, metadata_cache_size_bytes=0)"
    assert copy._metadata.capacity == 12345
    fresh = al.dataset(uri, session=session)  # nothing opened yet, as change feeds ship it
    context = pickle.loads(pickle.dumps(fresh.read_context))
    assert context.snapshot.version == 1

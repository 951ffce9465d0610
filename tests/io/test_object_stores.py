"""Cloud URIs and pylance-style storage options (offline: stores are built, not contacted)."""

from __future__ import annotations

import pickle

import pytest

from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.io.object_stores import split_options
from alance.io.uri import open_store


def test_s3_option_spellings() -> None:
    config, client = split_options("s3", {
        "aws_endpoint": "http://127.0.0.1:9000", "aws_access_key_id": "k",
        "AWS_SECRET_ACCESS_KEY": "s", "aws_region": "eu-west-1", "allow_http": "true",
        "endpoint_url": "http://x", "aws_session_token": "t", "timeout": "30s"})
    assert config == {"endpoint": "http://x", "access_key_id": "k", "secret_access_key": "s",
                      "region": "eu-west-1", "session_token": "t"}
    assert client == {"allow_http": True, "timeout": "30s"}
    with pytest.raises(InvalidInputError, match="aws_endpiont"):
        split_options("s3", {"aws_endpiont": "http://typo"})


@pytest.mark.parametrize(("uri", "options", "root"), [
    ("s3://bucket/a/b.lance", {"aws_region": "us-east-1", "aws_access_key_id": "k",
                               "aws_secret_access_key": "s"}, "a/b.lance"),
    ("gs://bucket/x.lance", {}, "x.lance"),
    ("az://container/dir/x.lance", {"azure_storage_account_name": "acct",
                                     "azure_storage_account_key": "a2V5"}, "dir/x.lance"),
])
def test_cloud_stores_are_built_and_pickle(uri: str, options: dict, root: str) -> None:
    store = open_store(uri, options)
    assert store.root == root
    assert store.limiter_key.split("://")[1] in ("bucket", "container")
    again = pickle.loads(pickle.dumps(store))
    assert (again.uri, again.root, again.max_concurrency) == (uri, root, store.max_concurrency)


def test_bad_cloud_uris() -> None:
    with pytest.raises(InvalidInputError):
        open_store("s3://bucket", {})
    with pytest.raises(InvalidInputError):
        open_store("s3:///path.lance", {})
    with pytest.raises(UnsupportedFeatureError):
        open_store("ftp://host/x.lance", {})
    with pytest.raises(InvalidInputError, match="gs://bucket"):
        open_store("gs://bucket/x.lance", {"google_service_account_key": "{}"})
    with pytest.raises(InvalidInputError, match="max_concurrency"):
        open_store("s3://b/x.lance", {"max_concurrency": "many"})


def test_cloud_stores_are_built_once_per_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A URI opened again reuses the obstore store (its HTTP client and open connections);
    other settings, or other credentials in the environment, get their own."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    options = {"aws_access_key_id": "a", "aws_secret_access_key": "b", "aws_region": "us-east-1",
               "aws_endpoint": "http://127.0.0.1:9"}

    def backend_store(uri: str, opts: dict[str, str]) -> object:
        return open_store(uri, opts).backend.store  # type: ignore[attr-defined]

    first = backend_store("s3://bucket/a", options)
    assert backend_store("s3://bucket/b", options) is first  # same bucket, same settings
    assert backend_store("s3://other/a", options) is not first
    assert backend_store("s3://bucket/a", {**options, "aws_region": "eu-west-1"}) is not first
    assert backend_store("s3://bucket/a", {**options, "aws_secret_access_key": "c"}) is not first
    bare = {k: v for k, v in options.items() if not k.startswith("aws_access")
            and not k.startswith("aws_secret")}
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    from_env = backend_store("s3://bucket/a", bare)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "z")  # rotated in the environment
    assert backend_store("s3://bucket/a", bare) is not from_env


@pytest.mark.parametrize("inline", [True, False])
async def test_local_range_reads_small_and_large(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                 inline: bool) -> None:
    """Local ranges come back exactly, large ones in buffers of Arrow's pool, whether read on
    the loop from the page cache or by a reader thread; a range past the end is an error."""
    import numpy as np

    from alance.errors import CorruptFileError
    from alance.io import local_reads

    if not inline:
        monkeypatch.setattr(local_reads, "INLINE_READ_BYTES", 0)  # every read by a thread
    data = np.random.default_rng(3).integers(0, 256, 3 * local_reads.POOLED_READ_BYTES,
                                             dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    store = open_store(str(tmp_path))
    big = (5, 5 + local_reads.POOLED_READ_BYTES + 17)
    ranges = [(0, 10), big, (len(data) - 3, len(data))]
    got = await store.get_ranges("f.bin", ranges)
    assert [bytes(g) for g in got] == [data[s:e] for s, e in ranges]
    with pytest.raises(CorruptFileError):
        await store.get_ranges("f.bin", [(len(data) - local_reads.POOLED_READ_BYTES,
                                          len(data) + 1)])


@pytest.mark.parametrize("inline", [True, False])
async def test_ranges_read_joined_into_one_buffer(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                  inline: bool) -> None:
    """get_ranges_joined: the ranges' bytes back to back, read straight into one buffer from
    a local file (on the loop from the page cache, or by a reader thread), joined from
    get_ranges elsewhere; a range past the end is an error either way."""
    import numpy as np

    from alance.errors import CorruptFileError
    from alance.io import local_reads

    if not inline:
        monkeypatch.setattr(local_reads, "INLINE_READ_BYTES", 0)
    data = np.random.default_rng(4).integers(0, 256, 200_000, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    starts, ends = [10, 5, 150_000, 7, 199_990], [20, 5, 190_000, 9, 200_000]
    want = b"".join(data[s:e] for s, e in zip(starts, ends, strict=True))
    local = open_store(str(tmp_path))
    assert local.joins_ranges
    assert bytes(await local.get_ranges_joined("f.bin", starts, ends)) == want
    memory = open_store("memory://joined")
    await memory.put("f.bin", data)
    assert not memory.joins_ranges
    assert bytes(await memory.get_ranges_joined("f.bin", starts, ends)) == want
    for store in (local, memory):
        with pytest.raises(CorruptFileError):
            await store.get_ranges_joined("f.bin", [0, 199_000], [10, 200_001])


async def test_a_kept_local_range_holds_only_its_own_piece(tmp_path) -> None:
    """Ranges far apart are read into separate buffers: a view kept of one (a cached
    dictionary, say) does not keep the megabytes read with it in the same call."""
    import numpy as np

    data = np.random.default_rng(5).integers(0, 256, 3_000_000, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    store = open_store(str(tmp_path))
    small, big = (0, 100), (1_000_000, 3_000_000)
    got = await store.get_ranges("f.bin", [small, big, (10, 20)])
    assert [bytes(g) for g in got] == [data[0:100], data[1_000_000:], data[10:20]]
    holder = memoryview(got[0]).obj
    assert len(memoryview(holder)) == 100  # its piece (0..100, which also answers 10..20)
    assert memoryview(got[2]).obj is holder
    # (a large piece is a mapping of the file, which starts on a page boundary)
    assert 2_000_000 <= len(memoryview(memoryview(got[1]).obj)) < 2_000_000 + 4096


@pytest.mark.parametrize("few", [True, False])
async def test_local_ranges_any_order_overlapping_empty(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                       few: bool) -> None:
    """A few ranges are coalesced in plain Python, many with numpy: the same answers for
    ranges out of order, overlapping, repeated, empty and touching, and the same pieces."""
    import numpy as np

    from alance.io import store as store_mod

    monkeypatch.setattr(store_mod, "FEW_RANGES", 1000 if few else 0)
    data = np.random.default_rng(6).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    store = open_store(str(tmp_path))
    ranges = [(50_000, 60_000), (10, 20), (15, 30), (10, 20), (7, 7), (30, 40),
              (99_000, 100_000), (5_000, 5_001), (0, 0)]
    got = await store.get_ranges("f.bin", ranges)
    assert [bytes(g) for g in got] == [data[s:e] for s, e in ranges]
    assert memoryview(got[1]).obj is memoryview(got[5]).obj  # 10..40: one piece
    assert memoryview(got[0]).obj is not memoryview(got[6]).obj  # 39 KB apart: two


async def test_many_small_local_ranges_share_slabs(tmp_path) -> None:
    """Thousands of small pieces (a take of scattered rows) are read into shared slabs, not
    a pool buffer each; large ones and the bytes of every range stay as they were."""
    import numpy as np

    from alance.io import local_reads

    data = np.random.default_rng(7).integers(0, 256, 4_000_000, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    store = open_store(str(tmp_path))
    ranges = [(s, s + 24) for s in range(0, 3_000_000, 10_000)]  # 300 pieces, far apart
    ranges.append((3_100_000, 3_100_000 + 2 * local_reads.SHARED_PIECE_BYTES))
    got = await store.get_ranges("f.bin", ranges)
    assert [bytes(g) for g in got] == [data[s:e] for s, e in ranges]
    holders = {id(memoryview(g).obj) for g in got[:-1]}
    assert len(holders) == 1  # 300 x 24 bytes: one slab
    assert len(memoryview(memoryview(got[-1]).obj)) == 2 * local_reads.SHARED_PIECE_BYTES
    wide = [(s, s + 30_000) for s in range(0, 3_500_000, 50_000)]  # 70 x 30 KB: 3 slabs
    got = await store.get_ranges("f.bin", wide)
    assert [bytes(g) for g in got] == [data[s:e] for s, e in wide]
    assert len({id(memoryview(g).obj) for g in got}) == 3

"""Manifest file framing, naming, version hint and feature flags."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from alance._proto import table_pb2, transaction_pb2
from alance.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from alance.format.feature_flags import (
    FeatureFlag,
    apply_feature_flags,
    check_reader_flags,
    check_writer_flags,
    compute_feature_flags,
    describe_flags,
)
from alance.format.manifest import (
    U64_MAX,
    ManifestFile,
    ManifestNamingScheme,
    decode_latest_version_hint,
    decode_manifest_file,
    detect_naming_scheme,
    encode_latest_version_hint,
    encode_manifest_file,
    make_writer_version,
    manifest_file_name,
    parse_manifest_file_name,
    transaction_file_name,
    writer_version_string,
)

V1, V2 = ManifestNamingScheme.V1, ManifestNamingScheme.V2


@pytest.fixture(scope="module")
def pylance_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pylance_manifest")
    t = pa.table({"id": pa.array(range(20), pa.int64()), "s": [f"s{i}" for i in range(20)]})
    ds = lance.write_dataset(t, root / "v2")
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id < 3")
    lance.write_dataset(t, root / "v1", enable_v2_manifest_paths=False)
    lance.write_dataset(t, root / "v1", mode="append")
    ds = lance.write_dataset(t, root / "stable", enable_stable_row_ids=True)
    ds.delete("id = 1")
    ds = lance.write_dataset(t, root / "mixed")
    lance.write_dataset(t, root / "mixed", mode="append", data_storage_version="2.0")
    return root


# ------------------------------------------------------------------------------------ naming


def test_manifest_names() -> None:
    assert manifest_file_name(1, V1) == "1.manifest"
    assert manifest_file_name(1, V2) == "18446744073709551614.manifest"
    assert manifest_file_name(U64_MAX, V2) == "00000000000000000000.manifest"
    assert manifest_file_name(0, V2) == "18446744073709551615.manifest"
    for v in (0, 1, 9, 10, 12345, 2**40, 10**19 - 1):
        for scheme in (V1, V2):
            assert parse_manifest_file_name(manifest_file_name(v, scheme)) == (v, scheme)
    assert parse_manifest_file_name(manifest_file_name(U64_MAX - 1, V2)) == (U64_MAX - 1, V2)
    # Like Lance, any 20-digit stem is read as V2: V1 names of versions >= 10**19 are ambiguous.
    assert parse_manifest_file_name(manifest_file_name(10**19, V1)) == (U64_MAX - 10**19, V2)
    with pytest.raises(InvalidInputError):
        manifest_file_name(-1, V1)
    with pytest.raises(InvalidInputError):
        manifest_file_name(U64_MAX + 1, V2)


def test_v2_names_sort_newest_first() -> None:
    names = [manifest_file_name(v, V2) for v in (1, 2, 10, 100, 7)]
    assert parse_manifest_file_name(sorted(names)[0]) == (100, V2)


@pytest.mark.parametrize(
    "name",
    [
        "3.manifest-0b8c3e5e-7d3d-4c55-9d7a-b0d1e3f5a111",  # staged
        "d9223372036854775809.manifest",  # detached
        "latest_version_hint.json",
        "3.txn",
        "abc.manifest",
        ".manifest",
        "+3.manifest",
        "3.manifest.tmp",
        "99999999999999999999.manifest",  # 20 digits but > u64::MAX
    ],
)
def test_non_manifest_names_are_ignored(name: str) -> None:
    assert parse_manifest_file_name(name) is None


def test_parse_accepts_paths() -> None:
    assert parse_manifest_file_name("s3://b/t/_versions/5.manifest") == (5, V1)


def test_detect_scheme() -> None:
    assert detect_naming_scheme([]) is None
    assert detect_naming_scheme(["x.json", "1.manifest-abc"]) is None
    assert detect_naming_scheme(["1.manifest", "2.manifest"]) is V1
    assert detect_naming_scheme([manifest_file_name(3, V2), "latest_version_hint.json"]) is V2
    # mixed listing (mid-migration): the newest version decides
    assert detect_naming_scheme(["1.manifest", manifest_file_name(2, V2)]) is V2
    assert detect_naming_scheme(["5.manifest", manifest_file_name(2, V2)]) is V1


def test_names_match_pylance(pylance_root: Path) -> None:
    v2 = sorted(p.name for p in (pylance_root / "v2" / "_versions").glob("*.manifest"))
    assert v2 == sorted(manifest_file_name(v, V2) for v in (1, 2, 3))
    v1 = sorted(p.name for p in (pylance_root / "v1" / "_versions").glob("*.manifest"))
    assert v1 == ["1.manifest", "2.manifest"]
    assert detect_naming_scheme(v1) is V1
    assert detect_naming_scheme(v2) is V2
    for path in (pylance_root / "v2" / "_versions").glob("*.manifest"):
        version, _ = parse_manifest_file_name(path.name)  # type: ignore[misc]
        mf = decode_manifest_file(path.read_bytes())
        assert mf.manifest.version == version
        assert mf.manifest.transaction_file == transaction_file_name(
            mf.transaction.read_version,  # type: ignore[union-attr]
            mf.transaction.uuid,  # type: ignore[union-attr]
        )
        assert (pylance_root / "v2" / "_transactions" / mf.manifest.transaction_file).exists()


def test_transaction_file_name() -> None:
    assert transaction_file_name(0, "ab-cd") == "0-ab-cd.txn"
    with pytest.raises(InvalidInputError):
        transaction_file_name(-1, "x")


# ------------------------------------------------------------------------------------ hint


def test_hint_bytes_match_pylance(pylance_root: Path) -> None:
    for name, version in (("v2", 3), ("v1", 2)):
        data = (pylance_root / name / "_versions" / "latest_version_hint.json").read_bytes()
        assert data == encode_latest_version_hint(version)
        assert decode_latest_version_hint(data) == version
    assert encode_latest_version_hint(12) == b'{"version":12}'


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[]", b'{"version":-1}', b'{"version":"3"}', b'{"version":true}', b"\xff"],
)
def test_bad_hint_is_ignored(data: bytes) -> None:
    assert decode_latest_version_hint(data) is None


def test_hint_tolerates_extra_keys_and_spaces() -> None:
    assert decode_latest_version_hint(b'{ "version": 7, "x": 1 }\n') == 7


# ------------------------------------------------------------------------------------ framing


def _sample() -> ManifestFile:
    m = table_pb2.Manifest(version=7, tag="t")
    m.fragments.add(id=0, physical_rows=10).files.add(path="a.lance", fields=[0])
    m.config["lance.x"] = "1"
    m.config["a"] = "2"
    idx = table_pb2.IndexSection()
    idx.indices.add(name="i", fields=[0], dataset_version=6)
    txn = transaction_pb2.Transaction(read_version=6, uuid="u")
    txn.append.fragments.add(physical_rows=10)
    return ManifestFile(manifest=m, index_section=idx, transaction=txn, prelude=b"DICT")


def test_framing_layout() -> None:
    mf = _sample()
    data = encode_manifest_file(mf)
    assert data[-4:] == b"LANC"
    pos, major, minor = struct.unpack("<qhh", data[-16:-4])
    assert (major, minor) == (0, 2)
    (length,) = struct.unpack("<I", data[pos : pos + 4])
    assert pos + 4 + length == len(data) - 16
    m = table_pb2.Manifest.FromString(data[pos + 4 : pos + 4 + length])
    assert data[:4] == b"DICT"
    assert m.index_section == 4
    (ilen,) = struct.unpack("<I", data[4:8])
    assert m.transaction_section == 8 + ilen
    assert not m.HasField("transaction_section_deprecated")
    # the input object is left untouched
    assert not mf.manifest.HasField("index_section")


def test_framing_round_trip() -> None:
    mf = _sample()
    back = decode_manifest_file(encode_manifest_file(mf))
    assert back.prelude == b"DICT"
    assert back.index_section == mf.index_section
    assert back.transaction == mf.transaction
    expected = table_pb2.Manifest()
    expected.CopyFrom(mf.manifest)
    expected.index_section = back.manifest.index_section
    expected.transaction_section = back.manifest.transaction_section
    assert back.manifest == expected
    assert encode_manifest_file(back) == encode_manifest_file(mf)
    assert [i.name for i in back.indices] == ["i"]


def test_dropping_sections_clears_positions() -> None:
    mf = decode_manifest_file(encode_manifest_file(_sample()))
    mf.index_section = None
    mf.transaction = None
    back = decode_manifest_file(encode_manifest_file(mf))
    assert not back.manifest.HasField("index_section")
    assert not back.manifest.HasField("transaction_section")
    assert back.index_section is None and back.transaction is None and back.indices == []


def test_every_truncation_is_corrupt(pylance_root: Path) -> None:
    path = sorted((pylance_root / "v2" / "_versions").glob("*.manifest"))[0]
    data = path.read_bytes()
    assert decode_manifest_file(data).index_section is not None
    for n in range(len(data)):
        with pytest.raises(CorruptFileError):
            decode_manifest_file(data[:n])
    for n in range(1, 40):
        with pytest.raises(CorruptFileError):
            decode_manifest_file(data[n:])


def _reframe(data: bytes, pos: int) -> bytes:
    return data[:-16] + struct.pack("<q", pos) + data[-8:]


def test_corrupt_files() -> None:
    data = encode_manifest_file(_sample())
    pos = struct.unpack("<q", data[-16:-8])[0]
    bad = [
        data[:-4] + b"LANX",  # magic
        _reframe(data, -1),  # negative position
        _reframe(data, len(data)),  # position past the end
        _reframe(data, pos + 1),  # position not at the length prefix
        data[:pos] + struct.pack("<I", 10**6) + data[pos + 4 :],  # length too long
        data[:pos] + b"\xff\xff\xff\xff" + data[pos + 4 :],
    ]
    # a manifest body that is not protobuf: a field with wire type 7
    body = b"\x0f\x0f\x0f"
    bad.append(struct.pack("<I", len(body)) + body + struct.pack("<qhh", 0, 0, 2) + b"LANC")
    # index section position pointing past the manifest start
    m = table_pb2.Manifest(version=1, index_section=10**6)
    body = m.SerializeToString()
    bad.append(struct.pack("<I", len(body)) + body + struct.pack("<qhh", 0, 0, 2) + b"LANC")
    # transaction section whose bytes are not a Transaction
    m = table_pb2.Manifest(version=1, transaction_section=0)
    body = m.SerializeToString()
    junk = struct.pack("<I", 2) + b"\x0a\x05"
    bad.append(
        junk + struct.pack("<I", len(body)) + body + struct.pack("<qhh", len(junk), 0, 2) + b"LANC"
    )
    for blob in bad:
        with pytest.raises(CorruptFileError):
            decode_manifest_file(blob)


def test_decode_accepts_memoryview_and_bytearray() -> None:
    data = encode_manifest_file(_sample())
    assert decode_manifest_file(memoryview(data)).manifest.version == 7
    assert decode_manifest_file(bytearray(data)).manifest.version == 7


def test_alance_written_manifest_is_readable_by_pylance(pylance_root: Path, tmp_path: Path) -> None:
    dst = tmp_path / "t"
    shutil.copytree(pylance_root / "v1", dst)
    path = dst / "_versions" / "2.manifest"
    mf = decode_manifest_file(path.read_bytes())
    mf.manifest.writer_version.CopyFrom(make_writer_version("0.1.0"))
    mf.transaction = None  # alance may commit without an inline transaction
    path.write_bytes(encode_manifest_file(mf))
    ds = lance.dataset(str(dst))
    assert ds.version == 2 and ds.count_rows() == 40
    ds.delete("id = 0")
    assert lance.dataset(str(dst)).count_rows() == 38


# ------------------------------------------------------------------------------------ writer


def test_writer_version_split() -> None:
    wv = make_writer_version("1.2.3-rc.1+build.5")
    assert (wv.library, wv.version, wv.prerelease, wv.build_metadata) == (
        "alance",
        "1.2.3",
        "rc.1",
        "build.5",
    )
    assert writer_version_string(wv) == "1.2.3-rc.1+build.5"
    wv = make_writer_version("0.1.0")
    assert not wv.HasField("prerelease") and not wv.HasField("build_metadata")
    assert make_writer_version("weird", library="lance").version == "weird"


# ------------------------------------------------------------------------------------ flags


def test_flag_checks() -> None:
    check_reader_flags(0)
    check_reader_flags(FeatureFlag.DELETION_FILES | FeatureFlag.STABLE_ROW_IDS)
    check_writer_flags(FeatureFlag.DELETION_FILES | FeatureFlag.TABLE_CONFIG)
    check_reader_flags(FeatureFlag.BASE_PATHS | FeatureFlag.DELETION_FILES)  # several roots
    with pytest.raises(UnsupportedFeatureError, match="UNIDENTIFIED_2048"):
        check_reader_flags(FeatureFlag.UNIDENTIFIED_2048 | FeatureFlag.DELETION_FILES)
    with pytest.raises(UnsupportedFeatureError, match=r"unknown\(64\)"):
        check_reader_flags(64)
    check_writer_flags(FeatureFlag.STABLE_ROW_IDS)  # alance assigns and keeps row ids
    with pytest.raises(UnsupportedFeatureError, match="MIXED_DATA_FILE_VERSIONS"):
        check_writer_flags(FeatureFlag.MIXED_DATA_FILE_VERSIONS)
    with pytest.raises(UnsupportedFeatureError, match=r"unknown\(4096\)"):
        check_writer_flags(4096 | 1)
    check_writer_flags(FeatureFlag.BASE_PATHS, supported=FeatureFlag.BASE_PATHS)
    assert describe_flags(0) == "none"
    assert describe_flags(3) == "DELETION_FILES(1), STABLE_ROW_IDS(2)"


def test_flags_match_pylance(pylance_root: Path) -> None:
    seen: set[tuple[int, int]] = set()
    for path in sorted(pylance_root.glob("*/_versions/*.manifest")):
        m = decode_manifest_file(path.read_bytes()).manifest
        stored = (m.reader_feature_flags, m.writer_feature_flags)
        assert compute_feature_flags(m) == stored, path
        seen.add(stored)
    # deletions, stable row ids (+deletions) and mixed data file versions all occurred
    assert {(1, 1), (2, 2), (3, 3), (256, 256)} <= seen


def test_compute_flags_rules() -> None:
    m = table_pb2.Manifest()
    assert compute_feature_flags(m) == (0, 0)
    m.config["k"] = "v"
    assert compute_feature_flags(m) == (0, 8)
    assert compute_feature_flags(m, disable_transaction_file=True) == (0, 40)
    m.base_paths.add(id=0, path="s3://x")
    assert compute_feature_flags(m) == (16, 24)
    frag = m.fragments.add(id=0)
    with pytest.raises(InvalidInputError):
        compute_feature_flags(m, stable_row_ids=True)
    frag.inline_row_ids = b""
    m.fragments.add(id=1)
    with pytest.raises(InvalidInputError):
        compute_feature_flags(m)
    m.fragments[1].inline_row_ids = b"x"
    m.fragments[1].deletion_file.num_deleted_rows = 1
    apply_feature_flags(m)
    assert (m.reader_feature_flags, m.writer_feature_flags) == (19, 27)


def test_needs_migration_flags_manifests_missing_newer_fields() -> None:
    from alance.format.manifest import make_writer_version, needs_migration
    m = table_pb2.Manifest()
    assert needs_migration(m)  # no writer version
    m.writer_version.CopyFrom(make_writer_version("1.0.0"))
    assert not needs_migration(m)
    frag = m.fragments.add(id=0, physical_rows=10)
    frag.files.add(path="a.lance", fields=[0])
    assert not needs_migration(m)
    frag.deletion_file.num_deleted_rows = 0  # a deletion file without its count
    assert needs_migration(m)
    frag.deletion_file.num_deleted_rows = 2
    frag.physical_rows = 0  # data files but no physical row count
    assert needs_migration(m)

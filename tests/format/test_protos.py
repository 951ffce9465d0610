"""The generated protobuf bindings against files pylance writes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from alance._proto import table_pb2, transaction_pb2
from alance.format.manifest import (
    ManifestFile,
    decode_manifest_file,
    decode_transaction_file,
    encode_manifest_file,
    make_writer_version,
)

REPO = Path(__file__).resolve().parents[2]


def _table(n: int = 50) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array([f"v{i}" for i in range(n)]),
            "st": pa.array([{"a": i, "b": [float(i)]} for i in range(n)]),
        }
    )


@pytest.fixture(scope="module")
def pylance_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Several small datasets written by pylance exercising most manifest fields."""
    root = tmp_path_factory.mktemp("pylance_protos")
    t = _table()
    ds = lance.write_dataset(t, root / "default")
    ds = lance.write_dataset(t, root / "default", mode="append")
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id < 5")
    ds = lance.write_dataset(t, root / "legacy", data_storage_version="legacy")
    ds.delete("id % 7 = 0")
    ds = lance.write_dataset(t, root / "stable", enable_stable_row_ids=True)
    ds = lance.write_dataset(t, root / "stable", mode="append")
    ds.delete("id = 5")
    ds.update({"s": "'x'"}, where="id = 20")
    ds = lance.write_dataset(t, root / "v1names", enable_v2_manifest_paths=False)
    ds.create_scalar_index("s", "BITMAP")
    dt = pa.table({"d": pa.array(["a", "b", "a"] * 5).dictionary_encode()})
    lance.write_dataset(dt, root / "legacydict", data_storage_version="legacy")
    return root


def _manifests(root: Path) -> list[Path]:
    found = sorted(root.glob("*/_versions/*.manifest"))
    assert len(found) >= 10
    return found


def _top_unknown(msg: Message) -> list[tuple[int, object]]:
    """(field number, data) of the unknown fields directly on ``msg``."""
    fields = UnknownFieldSet(msg)
    return [(fields[i].field_number, fields[i].data) for i in range(len(fields))]


def _unknown_fields(msg: Message, path: str = "") -> list[tuple[str, int]]:
    """(path, field number) of every unknown field anywhere inside ``msg``."""
    out = [(path, number) for number, _ in _top_unknown(msg)]
    for fd, value in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        mt = fd.message_type
        assert mt is not None
        if mt.GetOptions().map_entry:
            value_fd = mt.fields_by_name["value"]
            items = list(value.values()) if value_fd.type == fd.TYPE_MESSAGE else []
        elif fd.is_repeated:
            items = list(value)
        else:
            items = [value]
        for i, item in enumerate(items):
            out += _unknown_fields(item, f"{path}.{fd.name}[{i}]")
    return out


def test_generated_code_is_up_to_date() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "protos" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_package_relative_imports() -> None:
    for name in ("table_pb2.py", "transaction_pb2.py", "table_pb2.pyi", "transaction_pb2.pyi"):
        text = (REPO / "alance" / "_proto" / name).read_text()
        assert "\nimport file_pb2" not in text and "\nimport table_pb2" not in text
        assert "from . import file_pb2" in text


def test_every_pylance_field_is_known(pylance_root: Path) -> None:
    """No manifest, index section or transaction pylance writes has fields our protos lack."""
    seen_index = seen_txn = 0
    for path in _manifests(pylance_root):
        mf = decode_manifest_file(path.read_bytes())
        assert _unknown_fields(mf.manifest) == [], path
        if mf.index_section is not None:
            seen_index += 1
            assert _unknown_fields(mf.index_section) == [], path
        if mf.transaction is not None:
            seen_txn += 1
            assert _unknown_fields(mf.transaction) == [], path
    assert seen_index >= 2 and seen_txn >= 10
    txn_files = sorted(pylance_root.glob("*/_transactions/*.txn"))
    assert len(txn_files) >= 10
    for path in txn_files:
        txn = decode_transaction_file(path.read_bytes())
        assert txn.WhichOneof("operation") is not None
        assert _unknown_fields(txn) == [], path
        assert path.name == f"{txn.read_version}-{txn.uuid}.txn"


def test_round_trip_is_byte_identical(pylance_root: Path) -> None:
    for path in _manifests(pylance_root):
        original = path.read_bytes()
        mf = decode_manifest_file(original)
        encoded = encode_manifest_file(mf)
        again = decode_manifest_file(encoded)
        assert again.manifest.SerializeToString() == mf.manifest.SerializeToString()
        assert again.prelude == mf.prelude
        for a, b in ((again.index_section, mf.index_section), (again.transaction, mf.transaction)):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert a.SerializeToString() == b.SerializeToString()
        # pylance writes fields in tag order like upb does, so whole files match too (these
        # datasets have no multi-entry maps, whose order pylance does not fix).
        assert encoded == original, path


def test_pylance_specific_contents(pylance_root: Path) -> None:
    default = decode_manifest_file(
        sorted((pylance_root / "default" / "_versions").glob("*.manifest"))[0].read_bytes()
    )
    assert default.manifest.version == 4
    (index,) = default.indices
    assert index.name == "id_idx" and list(index.fields) == [0]
    assert index.index_details.type_url.endswith("lance.table.BTreeIndexDetails")
    assert {f.path for f in index.files} == {"page_data.lance", "page_lookup.lance"}
    assert default.transaction is not None
    assert default.transaction.WhichOneof("operation") == "delete"
    stable = decode_manifest_file(
        sorted((pylance_root / "stable" / "_versions").glob("*.manifest"))[0].read_bytes()
    )
    assert stable.manifest.next_row_id == 100
    for frag in stable.manifest.fragments:
        assert frag.WhichOneof("row_id_sequence") == "inline_row_ids"
        assert frag.WhichOneof("created_at_version_sequence") == "inline_created_at_versions"
        assert frag.WhichOneof("last_updated_at_version_sequence") is not None
    legacydict = decode_manifest_file(
        next((pylance_root / "legacydict" / "_versions").glob("*.manifest")).read_bytes()
    )
    field = legacydict.manifest.fields[0]
    assert field.logical_type.startswith("dict:") and field.dictionary.length == 2
    assert len(legacydict.prelude) > 0  # dictionary values live in front of the sections


def test_unknown_fields_survive_and_pylance_ignores_them(
    pylance_root: Path, tmp_path: Path
) -> None:
    dst = tmp_path / "copy"
    shutil.copytree(pylance_root / "default", dst)
    path = sorted((dst / "_versions").glob("*.manifest"))[0]
    mf = decode_manifest_file(path.read_bytes())
    # tag 999 varint 7 on the manifest; tag 998 string "zz" on the first index
    mf.manifest.MergeFromString(b"\xb8\x3e\x07")
    assert mf.index_section is not None
    mf.index_section.indices[0].MergeFromString(b"\xb2\x3e\x02zz")
    mf.manifest.writer_version.CopyFrom(make_writer_version("0.1.0"))
    path.write_bytes(encode_manifest_file(mf))

    back = decode_manifest_file(path.read_bytes())
    assert _top_unknown(back.manifest) == [(999, 7)]
    assert back.index_section is not None
    assert _top_unknown(back.index_section.indices[0]) == [(998, b"zz")]
    assert back.manifest.writer_version.library == "alance"

    ds = lance.dataset(str(dst))
    assert ds.count_rows() == 90
    assert [d.name for d in ds.describe_indices()] == ["id_idx"]
    ds = lance.write_dataset(_table(3), str(dst), mode="append")
    assert ds.count_rows() == 93


def test_transaction_section_old_tag_is_read(pylance_root: Path) -> None:
    """Writers before pylance 14 put the inline transaction position in tag 21."""
    path = sorted((pylance_root / "default" / "_versions").glob("*.manifest"))[0]
    mf = decode_manifest_file(path.read_bytes())
    data = bytearray(encode_manifest_file(mf))
    m = decode_manifest_file(bytes(data)).manifest
    # Move the position from tag 23 to tag 21 by re-framing the manifest by hand.
    pos = m.transaction_section
    m.ClearField("transaction_section")
    m.transaction_section_deprecated = pos
    start = int.from_bytes(data[-16:-8], "little")
    body = m.SerializeToString()
    rebuilt = (
        bytes(data[:start])
        + len(body).to_bytes(4, "little")
        + body
        + start.to_bytes(8, "little")
        + bytes(data[-8:])
    )
    old = decode_manifest_file(rebuilt)
    assert old.transaction is not None
    assert old.transaction.SerializeToString() == mf.transaction.SerializeToString()  # type: ignore[union-attr]
    re_encoded = decode_manifest_file(encode_manifest_file(old)).manifest
    assert re_encoded.transaction_section == re_encoded.transaction_section_deprecated


def test_empty_messages_round_trip() -> None:
    mf = decode_manifest_file(
        encode_manifest_file(
            ManifestFile(
                manifest=table_pb2.Manifest(version=1),
                transaction=transaction_pb2.Transaction(),
            )
        )
    )
    assert mf.manifest.version == 1
    assert mf.transaction == transaction_pb2.Transaction()
    assert mf.index_section is None

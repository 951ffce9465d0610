"""Lance schema <-> Arrow: logical types, field ids, primary keys (checked against pylance)."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from alance.errors import InvalidInputError, SchemaMismatchError
from alance.format.schema import LanceSchema, arrow_type_of, logical_type_of

# (Arrow type, logical type) pairs from the type conversion table of the schema spec.
TYPES = [
    (pa.null(), "null"), (pa.bool_(), "bool"),
    (pa.int8(), "int8"), (pa.uint8(), "uint8"), (pa.int16(), "int16"), (pa.uint16(), "uint16"),
    (pa.int32(), "int32"), (pa.uint32(), "uint32"), (pa.int64(), "int64"),
    (pa.uint64(), "uint64"), (pa.float16(), "halffloat"), (pa.float32(), "float"),
    (pa.float64(), "double"), (pa.string(), "string"), (pa.large_string(), "large_string"),
    (pa.binary(), "binary"), (pa.large_binary(), "large_binary"),
    (pa.decimal128(10, 2), "decimal:128:10:2"), (pa.decimal256(40, 5), "decimal:256:40:5"),
    (pa.date32(), "date32:day"), (pa.date64(), "date64:ms"),
    (pa.time32("s"), "time32:s"), (pa.time32("ms"), "time32:ms"),
    (pa.time64("us"), "time64:us"), (pa.time64("ns"), "time64:ns"),
    (pa.timestamp("s"), "timestamp:s:-"), (pa.timestamp("us", "UTC"), "timestamp:us:UTC"),
    (pa.timestamp("ns", "America/New_York"), "timestamp:ns:America/New_York"),
    (pa.duration("s"), "duration:s"), (pa.duration("ns"), "duration:ns"),
    (pa.list_(pa.float32(), 16), "fixed_size_list:float:16"),
    (pa.binary(16), "fixed_size_binary:16"),
    (pa.dictionary(pa.int16(), pa.string()), "dict:string:int16:false"),
    (pa.struct([("x", pa.int32())]), "struct"),
    (pa.list_(pa.int32()), "list"), (pa.large_list(pa.int32()), "large_list"),
    (pa.list_(pa.struct([("x", pa.int32())])), "list.struct"),
    (pa.large_list(pa.struct([("x", pa.int32())])), "large_list.struct"),
    (pa.map_(pa.string(), pa.int64()), "map"),
]


@pytest.mark.parametrize(("arrow", "logical"), TYPES, ids=[t[1] for t in TYPES])
def test_logical_types(arrow: pa.DataType, logical: str) -> None:
    assert logical_type_of(arrow) == logical
    schema = LanceSchema.from_arrow(pa.schema([pa.field("c", arrow)]))
    assert schema.fields[0].logical_type == logical
    back = LanceSchema.from_protos(schema.to_protos()).to_arrow()
    assert back.field("c").type.equals(arrow)
    if not pa.types.is_nested(arrow) and not pa.types.is_dictionary(arrow):
        assert arrow_type_of(logical).equals(arrow)


def test_ids_and_protos_match_pylance(tmp_path) -> None:
    schema = pa.schema([
        pa.field("a", pa.int64(), False),
        pa.field("b", pa.struct([("c", pa.list_(pa.string())), ("d", pa.float32())])),
        pa.field("e", pa.list_(pa.int32(), 4), True, {"k": "v"}),
    ], metadata={"owner": "me"})
    lance.write_dataset(schema.empty_table(), tmp_path / "t.lance", data_storage_version="legacy")
    theirs = lance.dataset(tmp_path / "t.lance")
    ours = LanceSchema.from_arrow(schema)
    # Compare with the field list pylance stored in its manifest.
    from alance.format.manifest import decode_manifest_file

    manifest_path = next((tmp_path / "t.lance" / "_versions").glob("*.manifest"))
    stored = decode_manifest_file(manifest_path.read_bytes()).manifest
    mine = ours.to_protos()
    assert [(f.name, f.id, f.parent_id, f.logical_type, f.nullable, f.type, f.encoding, f.metadata)
            for f in mine] == [(f.name, f.id, f.parent_id, f.logical_type, f.nullable, f.type,
                                f.encoding, f.metadata) for f in stored.fields]
    assert ours.to_arrow().equals(theirs.schema, check_metadata=True)


def test_primary_key_rules() -> None:
    pk = {"lance-schema:unenforced-primary-key": "true"}
    pos = "lance-schema:unenforced-primary-key:position"
    ok = LanceSchema.from_arrow(pa.schema([
        pa.field("a", pa.int64(), False, {**pk, pos: "2"}),
        pa.field("b", pa.string(), False, {**pk, pos: "1"}),
        pa.field("c", pa.int32(), False, {"lance-schema:unenforced-primary-key": "YES"}),
    ]))
    assert [f.name for f in ok.primary_key()] == ["b", "a", "c"]
    protos = ok.to_protos()
    assert [(p.unenforced_primary_key, p.unenforced_primary_key_position) for p in protos] == [
        (True, 2), (True, 1), (True, 0)]
    with pytest.raises(InvalidInputError, match="nullable"):
        LanceSchema.from_arrow(pa.schema([pa.field("a", pa.int64(), True, pk)]))
    with pytest.raises(InvalidInputError, match="leaf"):
        LanceSchema.from_arrow(pa.schema([pa.field("a", pa.struct([("x", pa.int32())]), False,
                                                   pk)]))
    with pytest.raises(InvalidInputError):
        LanceSchema.from_arrow(pa.schema([pa.field("a", pa.list_(
            pa.field("x", pa.int32(), False, pk)), False)]))
    with pytest.raises(InvalidInputError, match="position"):
        LanceSchema.from_arrow(pa.schema([pa.field("a", pa.int64(), False, {
            **pk, "lance-schema:unenforced-primary-key:position": "zero"})]))


def test_compatibility_check() -> None:
    base = LanceSchema.from_arrow(pa.schema([("a", pa.int64()), ("s", pa.string())]))
    base.check_compatible(pa.schema([pa.field("a", pa.int64(), False), ("s", pa.string())]))
    with pytest.raises(SchemaMismatchError, match="columns"):
        base.check_compatible(pa.schema([("a", pa.int64())]))
    with pytest.raises(SchemaMismatchError, match="type"):
        base.check_compatible(pa.schema([("a", pa.int32()), ("s", pa.string())]))
    strict = LanceSchema.from_arrow(pa.schema([pa.field("a", pa.int64(), False)]))
    with pytest.raises(SchemaMismatchError, match="nullable"):
        strict.check_compatible(pa.schema([pa.field("a", pa.int64(), True)]))

"""JSON columns: JSON text in, Lance's JSONB in the files, the same text out as pylance."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.dataset.fragments.read import ReadContext
from alance.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from alance.format import jsonb

EDGE = ["0", "-0", "1", "-1", "127", "128", "-128", "-129", "65536", "-32769",
        "4294967296", "9223372036854775807", "9223372036854775808", "18446744073709551615",
        "18446744073709551616", "-9223372036854775808", "-9223372036854775809", "0.1",
        "1.0", "-0.0", "1e15", "1e16", "1e-5", "1.5e-5", "1e-6", "2.5E+3", "5e-324",
        "1.7976931348623157e308", "1.23456789012345678901234567890", '"a\\"b\\\\c"',
        '"\\u00e9\\ud83d\\ude00\\n\\t\\u0001\\b\\f\\r\\/"', '"\\u2028\\u007f"', "true",
        "false", "null", "[]", "{}", '{"b":1,"a":2,"aa":3,"B":4,"":5,"\\u00e9":6}',
        '  { "x" : [ 1 , [2, [3, []]], {} ] }  ']


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([rng.randrange(-300, 300), rng.randrange(-(1 << 63), 1 << 64)])
    if kind == 3:
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        return x if x == x and abs(x) != float("inf") else 0.5
    if kind in (4, 5):
        return "".join(rng.choice("ab\"\\\n\té😀\u2028 {}") for _ in range(rng.randrange(8)))
    if kind in (6, 7):
        return {f"k{rng.randrange(50)}é": _random_value(rng, depth + 1)
                for _ in range(rng.randrange(5))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def _documents(n: int, seed: int = 7) -> list[str | None]:
    rng = random.Random(seed)
    docs: list[str | None] = list(EDGE)
    while len(docs) < n:
        value = _random_value(rng)
        docs.append(None if rng.random() < 0.05 else
                    json.dumps(value, ensure_ascii=rng.random() < 0.5,
                               separators=rng.choice([(",", ":"), (", ", ": ")])))
    return docs


def _table(docs: list[str | None]) -> pa.Table:
    return pa.table({"id": pa.array(range(len(docs)), pa.int64()),
                     "j": pa.array(docs, pa.json_())})


@pytest.fixture(scope="module")
def docs() -> list[str | None]:
    return _documents(600)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_pylance_json_reads_like_pylance(tmp_path: Path, docs: list[str | None],
                                         version: str) -> None:
    uri = str(tmp_path / "p.lance")
    lance.write_dataset(_table(docs), uri, data_storage_version=version,  # type: ignore[arg-type]
                        max_rows_per_file=250)
    ours, theirs = al.open_dataset(uri), lance.dataset(uri)
    got, want = ours.to_table(), theirs.to_table()
    assert got.schema.equals(want.schema, check_metadata=True)
    # The dataset's schema shows JSON columns as scans return them, as pylance's does, and
    # appending rows cast to it stores them as JSONB again.
    assert ours.schema.equals(theirs.schema) and ours.schema.equals(got.schema)
    al.write_dataset(got.slice(0, 3).cast(ours.schema), uri, mode="append")
    assert lance.dataset(uri).to_table().slice(len(docs)).equals(want.slice(0, 3))
    assert got.equals(want)
    assert got.schema.field("j").type == pa.json_()
    assert ours.take([5, 400, 2]).equals(theirs.take([5, 400, 2]))
    assert ours.to_table(columns=["j"], filter="id >= 590").equals(
        theirs.to_table(columns=["j"], filter="id >= 590"))


@pytest.mark.parametrize("version", ["2.1", "2.2", "legacy"])
def test_alance_json_reads_in_pylance(tmp_path: Path, docs: list[str | None],
                                      version: str) -> None:
    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "p.lance")
    al.write_dataset(_table(docs), ours, data_storage_version=version)
    lance.write_dataset(_table(docs), theirs,
                        data_storage_version=version)  # type: ignore[arg-type]
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    assert lance.dataset(ours).lance_schema == lance.dataset(theirs).lance_schema
    # pylance's JSON functions work on what alance stored.
    sql = "json_extract(j, '$.k1é') IS NOT NULL"
    assert lance.dataset(ours).count_rows(sql) == lance.dataset(theirs).count_rows(sql)
    # And appending text to a pylance-created JSON dataset.
    al.write_dataset(_table(docs[:40]), theirs, mode="append")
    both = lance.dataset(theirs).to_table()
    assert both.slice(len(docs)).equals(both.slice(0, 40))


async def test_codec_matches_pylance_bytes(tmp_path: Path, docs: list[str | None]) -> None:
    """Our JSONB bytes equal pylance's for the same text; our text equals pylance's."""
    uri = str(tmp_path / "p.lance")
    lance.write_dataset(_table(docs), uri)
    texts = lance.dataset(uri).to_table().column("j").to_pylist()
    ds = await alance.open_dataset(uri)
    ctx = ReadContext(ds._store, ds._snapshot)  # no user view: JSON columns stay JSONB
    frag = ctx.fragment(ds.fragment_protos()[0])
    batch = await frag.read_range([ctx.schema.field("j")], 0, frag.physical_rows)
    stored = batch.column(0).to_pylist()
    for doc, text, data in zip(docs, texts, stored, strict=True):
        assert (doc is None) == (data is None)
        if doc is not None:
            assert jsonb.from_text(doc) == data, doc
            assert jsonb.to_text(data) == text, doc
            assert jsonb.from_text(text) == data


@pytest.mark.parametrize("text", ['{"a":1,"a":2}', "{", "NaN", "[Infinity]", "1e400",
                                  '"\\ud800"', "[" * 200 + "]" * 200, ""])
def test_bad_json_text_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(InvalidInputError):
        jsonb.from_text(text)
    with pytest.raises(InvalidInputError):
        al.write_dataset(_table([text]), str(tmp_path / "bad.lance"))
    assert not (tmp_path / "bad.lance" / "_versions").exists() or not list(
        (tmp_path / "bad.lance" / "_versions").glob("*.manifest"))


def test_corrupt_jsonb_is_a_typed_error() -> None:
    good = jsonb.from_text('{"a":[1,2.5,"x"],"b":{"c":null}}')
    for cut in range(len(good)):
        with pytest.raises((CorruptFileError, UnsupportedFeatureError)):
            jsonb.to_text(good[:cut])
    with pytest.raises(CorruptFileError):
        jsonb.to_text(b"\x10\x00\x00\x00")  # unknown container header
    with pytest.raises(UnsupportedFeatureError):
        jsonb.to_text(struct.pack(">II", 0x20000000, 0x20000001) + b"\x10")  # NaN tag


def test_size_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonb, "MAX_VALUE_BYTES", 100)
    with pytest.raises(InvalidInputError):
        jsonb.from_text(json.dumps("x" * 200))
    with pytest.raises(UnsupportedFeatureError):
        jsonb.to_text(b"\x20\x00\x00\x00" + b"\x10\x00\x00\xc8" + b"x" * 200)


def test_json_filter_functions_match_pylance(tmp_path: Path) -> None:
    """pylance's JSON filter functions, same rows on the same data (alance-written)."""
    import json

    docs = [{"user": {"name": "Alice", "profile": {"theme": "dark"}}, "age": 30,
             "tags": ["python", "rust"], "active": True, "score": 95.5},
            {"user": {"name": "Bob"}, "age": "35", "tags": [], "active": "true", "score": "92"},
            {"age": 20, "tags": ["go"], "active": False, "score": 10},
            None, {"name": "Carol", "items": ["apple", 3]}]
    table = pa.table({"id": range(5), "data": pa.array(
        [None if d is None else json.dumps(d) for d in docs], pa.json_())})
    uri = str(tmp_path / "j.lance")
    ds = al.write_dataset(table, uri)
    for sql in ["json_extract(data, '$.user.name') = '\"Alice\"'",
                "json_exists(data, '$.age')",
                "json_array_contains(data, '$.tags', 'python')",
                "json_array_length(data, '$.tags') = 0",
                "json_get_int(data, 'age') > 28",
                "json_get_bool(data, 'active') = true",
                "json_get_float(data, 'score') > 90",
                "json_get_string(json_get(json_get(data, 'user'), 'profile'), 'theme') = 'dark'",
                "json_get_string(data, 'name') = 'Carol'"]:
        ours = ds.to_table(filter=sql)["id"].to_pylist()
        assert ours == lance.dataset(uri).to_table(filter=sql)["id"].to_pylist(), sql
        assert ours, sql
    with pytest.raises(InvalidInputError, match="JSON path"):
        ds.to_table(filter="json_exists(data, 'age')")
    with pytest.raises(InvalidInputError, match="JSON column"):
        ds.to_table(filter="json_exists(id, '$.a')")


def _shaped_documents(n: int, seed: int = 3) -> list[str | None]:
    """Documents of a few shapes (the shape kernel's case), leaves drawn from edge values:
    escapes, non-ASCII, integers of every width, doubles near the printing bounds, booleans,
    nulls and values of other types under the same key."""
    rng = random.Random(seed)
    leaves: list[Any] = [0, -1, 255, 1 << 40, -(1 << 63), (1 << 64) - 1, 0.1, 1e16, 1e-5, 100.0,
                         -0.0, "x", 'q"t', "é😀", "line\nbreak", "", True, False, None]
    docs: list[str | None] = []
    for i in range(n):
        if i % 50 == 0:
            docs.append(None)
            continue
        doc = {"id": i, "name": f"user_{i}", "v": rng.choice(leaves),
               "tags": [rng.choice(leaves) for _ in range(i % 5)],
               "nested": {"ok": rng.random() < 0.5, "x": rng.choice(leaves),
                          "items": [{"sku": j, "q": rng.choice(leaves)} for j in range(i % 3)]}}
        if i % 3 == 0:
            doc = {"kind": "other", "n": rng.choice(leaves), "list": [1, "a", None, [2]]}
        docs.append(json.dumps(doc, ensure_ascii=i % 2 == 0))
    return docs


def test_json_of_shared_shapes_reads_like_pylance(tmp_path: Path,
                                                  shape_kernel_calls: dict[str, int]) -> None:
    from alance.format import jsonb_shapes

    docs = _shaped_documents(8 * jsonb_shapes.MIN_SHAPE_ROWS)  # (two pieces of 8192)
    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "p.lance")
    lance.write_dataset(_table(docs), theirs, data_storage_version="2.1")
    al.write_dataset(_table(docs), ours, data_storage_version="2.1")
    want = lance.dataset(theirs).to_table()
    # pylance's files read by alance, and alance's files read by pylance: the same texts
    assert al.open_dataset(theirs).to_table().equals(want)
    assert lance.dataset(ours).to_table().equals(want)
    assert al.open_dataset(ours).to_table().equals(want)
    assert shape_kernel_calls["objects"] and shape_kernel_calls["arrays"]

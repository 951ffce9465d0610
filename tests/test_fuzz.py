"""Fuzzing damaged datasets: every read gives the right rows or a typed alance error.

Small datasets (three fragments of 120, 12,000 and 60 rows, deletions stored both as Arrow
arrays and as bitmaps; legacy, 2.0 and 2.1 data files; written by alance and by pylance) are
damaged and read back with ``open_dataset``, ``count_rows``, ``to_table`` (whole, and with a
filter) and ``take``:

* **manifest numbers**: 1-3 numbers of the manifest (fragment ids, ``physical_rows``, deletion
  file type / id / version / count, data file field ids, column indices, versions and sizes,
  schema field ids and types, ``max_fragment_id``...) are set to edge values (0, 1, -1,
  2^31, 2^32, 2^63...) or random ones. A read must raise an :class:`AlanceError` or return
  exactly the original rows, or exactly what pylance reads from the same damaged manifest
  (e.g. two columns of one type whose field ids were swapped are a different, valid table).
* **bytes** of the manifest, a data file or a deletion file: bytes overwritten (anywhere, or in
  the file's metadata at its end) or the file cut short. Lance files carry no checksums, so a
  changed value in a data page reads as that value; what must hold is that the read raises an
  :class:`AlanceError` or returns a valid table (``validate(full=True)``: e.g. strings are
  UTF-8) of the schema's columns and exactly ``count_rows()`` rows, never another exception.

The fast variants run a bounded, derandomized number of examples with the suite; the long ones
are marked ``soak`` (excluded by default; ``make soak`` runs them, ``ALANCE_SOAK_EXAMPLES``
sets the number of examples per test). Each test prints what happened to its cases.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alance import sync as al
from alance._proto import table_pb2
from alance.dataset.fragments import data_file as data_file_module
from alance.errors import AlanceError
from alance.format.manifest import decode_manifest_file, encode_manifest_file

FAST_EXAMPLES = 150
SOAK_EXAMPLES = int(os.environ.get("ALANCE_SOAK_EXAMPLES", "1500"))
FILTER = "id % 7 = 3"


def rows(start: int, n: int, nulls: bool) -> pa.Table:
    """Rows ``start..start+n-1`` (nulls in ``x`` and ``l`` unless ``nulls`` is false: v0.2
    files cannot store them)."""
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "x": pa.array([None if nulls and i % 11 == 0 else i * 0.5 for i in ids], pa.float64()),
        "s": pa.array([f"v{i}-é" for i in ids], pa.string()),
        "k": pa.array([i % 5 for i in ids], pa.int64()),
        "l": pa.array([[i, i + 1] if i % 3 or not nulls else None for i in ids],
                      pa.list_(pa.int32())),
    })


class Sample:
    """One dataset to damage: its root, its files' original bytes and its true rows (a plain
    class: hypothesis would print a dataclass field by field)."""

    def __init__(self, root: Path, files: dict[Path, bytes], table: pa.Table,
                 manifest: Path) -> None:
        self.root = root
        self.files = files
        self.table = table
        self.manifest = manifest

    def __repr__(self) -> str:
        return f"Sample({self.root.name})"

    def restore(self) -> None:
        for path, data in self.files.items():
            if path.read_bytes() != data:
                path.write_bytes(data)
        # Opened files are remembered process-wide by path and size (data files are never
        # rewritten in place): forget the damaged ones.
        data_file_module._FILE_CACHE.clear()

    def of_kind(self, kind: str) -> list[Path]:
        return sorted(p for p in self.files if p.parent.name == kind)


def make_sample(root: Path, fmt: str, writer: str) -> Sample:
    uri = str(root)
    nulls = fmt != "legacy"
    parts = [rows(0, 120, nulls), rows(120, 12_000, nulls), rows(12_120, 60, nulls)]
    if writer == "alance":
        al.write_dataset(parts[0], uri, data_storage_version=fmt)
        for p in parts[1:]:
            al.write_dataset(p, uri, mode="append")
        ds = al.open_dataset(uri)
        ds.delete("id < 120 AND id % 10 = 4")  # a few rows: an Arrow array deletion file
        ds.delete("id >= 120 AND id < 12120 AND id % 2 = 1")  # many: a bitmap
    else:
        lance.write_dataset(parts[0], uri, data_storage_version=fmt)
        for p in parts[1:]:
            lance.write_dataset(p, uri, mode="append")
        lds = lance.dataset(uri)
        lds.delete("id < 120 AND id % 10 = 4")
        lds.delete("id >= 120 AND id < 12120 AND id % 2 = 1")
    table = lance.dataset(uri).to_table()
    assert al.open_dataset(uri).to_table().equals(table)
    versions = sorted((root / "_versions").glob("*.manifest"),
                      key=lambda p: decode_manifest_file(p.read_bytes()).manifest.version)
    files = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return Sample(root, files, table, versions[-1])


SAMPLE_KINDS = [("legacy", "alance"), ("2.0", "pylance"), ("2.1", "alance"),
                ("2.1", "pylance")]


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Sample]]:
    base = tmp_path_factory.mktemp("fuzz")
    made = [make_sample(base / f"{fmt}-{writer}", fmt, writer) for fmt, writer in SAMPLE_KINDS]
    yield made
    shutil.rmtree(base, ignore_errors=True)


# -- reading a damaged dataset -------------------------------------------------------------------


@dataclass
class Outcome:
    """What the reads of one damaged dataset gave: an error, or the rows."""

    error: AlanceError | None = None
    table: pa.Table | None = None
    count: int | None = None
    filtered: pa.Table | None = None
    taken: pa.Table | None = None


def read_all(uri: str) -> Outcome:
    """Every read; a non-alance exception propagates (and fails the test)."""
    out = Outcome()
    try:
        ds = al.open_dataset(uri)
        out.count = ds.count_rows()
        out.table = ds.to_table()
        out.filtered = ds.to_table(filter=FILTER)
        n = out.table.num_rows
        if n:
            out.taken = ds.take([n - 1, 0, n // 2])
    except AlanceError as exc:
        out.error = exc
    return out


def check_consistent(out: Outcome, schema: pa.Schema) -> None:
    """Whatever came back is a valid table that agrees with itself."""
    if out.table is None:
        return
    t = out.table
    assert t.schema.names == schema.names, t.schema
    t.validate(full=True)
    assert out.count is not None
    assert t.num_rows == out.count, (t.num_rows, out.count)
    if out.filtered is not None:
        out.filtered.validate(full=True)
        ids = t.column("id").to_numpy(zero_copy_only=False)
        keep = pa.array(np.fmod(ids, 7) == 3)  # (SQL's %: the sign of the dividend)
        assert out.filtered.equals(t.filter(keep)), "filtered rows differ from the scan"
    if out.taken is not None:
        n = t.num_rows
        assert out.taken.equals(t.take([n - 1, 0, n // 2])), "take differs from the scan"


def same_rows(got: pa.Table, expected: pa.Table) -> bool:
    """The same values (a field's nullability may differ: the manifest says what it is)."""
    if got.equals(expected):
        return True
    try:
        return got.cast(expected.schema).equals(expected)
    except (pa.ArrowException, ValueError):
        return False


def pylance_reads(uri: str) -> pa.Table | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return lance.dataset(uri).to_table()
    except BaseException:
        return None


class Tally:
    """Counts outcomes per test, printed at the end (the figures in the README)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.counts: Counter[str] = Counter()

    def add(self, what: str) -> None:
        self.counts[what] += 1

    def report(self) -> str:
        total = sum(self.counts.values())
        parts = ", ".join(f"{k} {v}" for k, v in self.counts.most_common())
        return f"{self.name}: {total} cases, all held ({parts})"


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    t = Tally(request.node.name)
    yield t
    print("\n" + t.report())


# -- manifest numbers ----------------------------------------------------------------------------

U64_EDGES = [0, 1, 2, 3, 59, 60, 61, 119, 120, 121, 5999, 6000, 11_999, 12_000, 12_001,
             2**31 - 1, 2**31, 2**32 - 1, 2**32,
             2**32 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
I32_EDGES = [-2**31, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 100, 2**31 - 1]
U32_EDGES = [0, 1, 2, 3, 4, 5, 100, 2**31, 2**32 - 1]


def _u64() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(U64_EDGES), st.integers(0, 2**64 - 1))


def _i32() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(I32_EDGES), st.integers(-2**31, 2**31 - 1))


def _u32() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(U32_EDGES), st.integers(0, 2**32 - 1))


LOGICAL_TYPES = ["int64", "int32", "uint8", "double", "float", "string", "large_string",
                 "binary", "bool", "list", "struct", "fixed_size_list:int32:2", "date32:day",
                 "timestamp:us:-", "decimal:128:5:0", "dict:string:int32:false", "", "nonsense",
                 "fixed_size_list:float:-1", "decimal:128:99:200"]


def mutate_manifest(m: table_pb2.Manifest, data: st.DataObject) -> str:
    """Change one number (or type name) of the manifest; returns what was changed."""
    target = data.draw(st.sampled_from(["fragment", "deletion", "data_file", "data_file_list",
                                        "schema", "manifest"]))
    frag = m.fragments[data.draw(st.integers(0, len(m.fragments) - 1))]
    if target == "fragment":
        attr = data.draw(st.sampled_from(["id", "physical_rows"]))
        value = data.draw(_u64())
        setattr(frag, attr, value)
        return f"fragment {frag.id}: {attr} = {value}"
    if target == "deletion":
        if not frag.HasField("deletion_file"):
            frag = next(f for f in m.fragments if f.HasField("deletion_file"))
        df = frag.deletion_file
        attr = data.draw(st.sampled_from(["file_type", "read_version", "id",
                                          "num_deleted_rows"]))
        if attr == "file_type":
            df.file_type = data.draw(st.sampled_from([0, 1, 2, 5, 2**31 - 1]))  # type: ignore[assignment]
        else:
            setattr(df, attr, data.draw(_u64()))
        return f"fragment {frag.id} deletion_file: {attr} = {getattr(df, attr, None)}"
    data_file = frag.files[data.draw(st.integers(0, len(frag.files) - 1))]
    if target == "data_file":
        attr = data.draw(st.sampled_from(["file_major_version", "file_minor_version",
                                          "file_size_bytes", "base_id"]))
        value = data.draw(_u64() if attr == "file_size_bytes" else _u32())
        setattr(data_file, attr, value)
        return f"fragment {frag.id} data file: {attr} = {value}"
    if target == "data_file_list":
        attr = data.draw(st.sampled_from(["fields", "column_indices"]))
        values = getattr(data_file, attr)
        if not len(values):
            return f"data_file.{attr} (empty)"
        how = data.draw(st.sampled_from(["set", "swap", "drop", "append"]))
        i = data.draw(st.integers(0, len(values) - 1))
        j = data.draw(st.integers(0, len(values) - 1))
        if how == "set":
            values[i] = data.draw(_i32())
        elif how == "swap":
            values[i], values[j] = values[j], values[i]
        elif how == "drop":
            del values[i]
        else:
            values.append(data.draw(_i32()))
        return f"fragment {frag.id} data file: {attr} {how} -> {list(values)}"
    if target == "schema":
        field = m.fields[data.draw(st.integers(0, len(m.fields) - 1))]
        attr = data.draw(st.sampled_from(["id", "parent_id", "logical_type", "nullable"]))
        if attr == "logical_type":
            field.logical_type = data.draw(st.sampled_from(LOGICAL_TYPES))
        elif attr == "nullable":
            field.nullable = not field.nullable
        else:
            setattr(field, attr, data.draw(_i32()))
        return f"schema field {field.name}: {attr} = {getattr(field, attr)}"
    attr = data.draw(st.sampled_from(["max_fragment_id", "next_row_id", "version"]))
    value = data.draw(_u32() if attr == "max_fragment_id" else _u64())
    setattr(m, attr, value)
    return f"manifest: {attr} = {value}"


def run_manifest_case(sample: Sample, data: st.DataObject, tally: Tally) -> None:
    mf = decode_manifest_file(sample.files[sample.manifest])
    changed = [mutate_manifest(mf.manifest, data) for _ in range(data.draw(st.integers(1, 3)))]
    try:
        sample.manifest.write_bytes(encode_manifest_file(mf))
    except Exception:
        tally.add("not encodable")
        return
    try:
        out = read_all(str(sample.root))
        check_consistent(out, sample.table.schema)
        if out.error is not None:
            tally.add(type(out.error).__name__)
            return
        assert out.table is not None
        if same_rows(out.table, sample.table):
            tally.add("original rows")
            return
        oracle = pylance_reads(str(sample.root))
        assert oracle is not None and out.table.equals(oracle), (
            f"{changed}: alance read {out.table.num_rows} rows that are neither the original "
            f"ones nor pylance's ({None if oracle is None else oracle.num_rows} rows)")
        tally.add("pylance's rows")
    finally:
        sample.restore()


def manifest_test(examples: int, derandomize: bool) -> Callable[..., Any]:
    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(samples: list[Sample], tally: Tally, data: st.DataObject) -> None:
        sample = samples[data.draw(st.integers(0, len(samples) - 1))]
        run_manifest_case(sample, data, tally)
    return run


test_fuzz_manifest_numbers = manifest_test(FAST_EXAMPLES, derandomize=True)
test_fuzz_manifest_numbers_soak = pytest.mark.soak(manifest_test(SOAK_EXAMPLES, False))


# -- bytes of files ------------------------------------------------------------------------------


def damage_bytes(raw: bytes, data: st.DataObject) -> bytes:
    how = data.draw(st.sampled_from(["overwrite", "overwrite_tail", "truncate", "zero_run"]))
    out = bytearray(raw)
    if not out:
        return b"x"
    if how == "truncate":
        return bytes(out[: data.draw(st.integers(0, len(out) - 1))])
    if how == "zero_run":
        at = data.draw(st.integers(0, len(out) - 1))
        n = data.draw(st.integers(1, 64))
        out[at:at + n] = b"\x00" * len(out[at:at + n])
        return bytes(out)
    lo = 0 if how == "overwrite" else max(0, len(out) - max(64, len(out) // 8))
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(lo, len(out) - 1))
        out[at] = data.draw(st.one_of(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]),
                                      st.integers(0, 255)))
    return bytes(out)


def run_bytes_case(sample: Sample, kind: str, data: st.DataObject, tally: Tally) -> None:
    targets = [sample.manifest] if kind == "_versions" else sample.of_kind(kind)
    path = targets[data.draw(st.integers(0, len(targets) - 1))]
    damaged = damage_bytes(sample.files[path], data)
    path.write_bytes(damaged)
    try:
        out = read_all(str(sample.root))
        check_consistent(out, sample.table.schema)
        if out.error is not None:
            tally.add(type(out.error).__name__)
        elif out.table is not None and out.table.equals(sample.table):
            tally.add("original rows")
        else:
            tally.add("changed values, valid table")
    finally:
        sample.restore()


def bytes_test(examples: int, derandomize: bool) -> Callable[..., Any]:
    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(samples: list[Sample], tally: Tally, data: st.DataObject) -> None:
        sample = samples[data.draw(st.integers(0, len(samples) - 1))]
        kind = data.draw(st.sampled_from(["_versions", "data", "data", "_deletions"]))
        run_bytes_case(sample, kind, data, tally)
    return run


test_fuzz_file_bytes = bytes_test(FAST_EXAMPLES, derandomize=True)
test_fuzz_file_bytes_soak = pytest.mark.soak(bytes_test(SOAK_EXAMPLES, False))


def test_samples_are_what_the_fuzzer_expects(samples: list[Sample]) -> None:
    """Each sample has three fragments, an Arrow array and a bitmap deletion file."""
    for sample in samples:
        ds = al.open_dataset(str(sample.root))
        assert len(ds.get_fragments()) == 3
        suffixes = sorted(p.suffix for p in sample.of_kind("_deletions"))
        assert suffixes == [".arrow", ".bin"], suffixes
        assert sample.table.num_rows == 12_180 - 12 - 6000

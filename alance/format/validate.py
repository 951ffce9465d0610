"""Consistency checks of a decoded manifest: every number must agree with what it describes.

A manifest that decodes can still be corrupt: a deletion count larger than the fragment, a row
count no row address can reach, two fragments with one id, a data file whose field list and
column list differ in length. Read as they are, such numbers give silently wrong results (a
table that counts 0 rows, rows that vanish), so :func:`validate_manifest` refuses them with a
:class:`~alance.errors.CorruptFileError` naming the manifest, the fragment and the field.

What a data file really holds (its row count) is only known once it is opened; the dataset
layer checks that against ``physical_rows`` (:mod:`alance.dataset.fragments.read`).

Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Iterable

from alance._proto import file_pb2, table_pb2
from alance.errors import CorruptFileError

#: Rows one fragment can hold: a row address is ``fragment_id << 32 | offset`` with a 32-bit
#: offset (deletion files store offsets as u32 too).
MAX_FRAGMENT_ROWS = 1 << 32
#: Largest fragment id a row address can carry (its upper 32 bits).
MAX_FRAGMENT_ID = (1 << 32) - 1
#: Logical types of schema fields that have child fields.
NESTED_TYPES = ("struct", "list", "large_list", "map")
#: Largest ``file_size_bytes`` a data file can have (a file offset is a signed 64-bit number).
MAX_FILE_SIZE = (1 << 63) - 1
#: Field id of a superseded column in ``DataFile.fields``.
TOMBSTONE_FIELD_ID = -2
#: ``DeletionFile.file_type`` values: ARROW_ARRAY (0) and BITMAP (1).
DELETION_FILE_TYPES = (0, 1)


def _is_v2_file(data_file: table_pb2.DataFile) -> bool:
    """2.x data files (and 0.3, the old name of 2.0) list a column index per field."""
    version = (data_file.file_major_version, data_file.file_minor_version)
    return version >= (2, 0) or version == (0, 3)


def validate_fragment(fragment: table_pb2.DataFragment, where: str) -> None:
    """Check one fragment's numbers against each other; ``where`` names the manifest.

    Raises :class:`CorruptFileError` (message: ``"{where}: fragment {id}: {field} ..."``).
    """
    fid = int(fragment.id)
    if fid > MAX_FRAGMENT_ID:
        raise _corrupt(where, fid, "id", f"is {fid}, above the largest fragment id a row "
                                         f"address can hold ({MAX_FRAGMENT_ID})")
    rows = int(fragment.physical_rows)
    if rows > MAX_FRAGMENT_ROWS:
        raise _corrupt(where, fid, "physical_rows", f"is {rows}, more than a fragment can hold "
                                                    f"({MAX_FRAGMENT_ROWS}: row offsets are "
                                                    "32-bit)")
    if rows == 0 and len(fragment.files):
        raise _corrupt(where, fid, "physical_rows",
                       "is 0 although the fragment has data files (Lance records every "
                       "fragment's row count; a fragment of unknown length cannot be read)")
    if fragment.HasField("deletion_file"):
        df = fragment.deletion_file
        if int(df.file_type) not in DELETION_FILE_TYPES:
            raise _corrupt(where, fid, "deletion_file.file_type",
                           f"is {int(df.file_type)}, not a known deletion file type "
                           "(0 = arrow array, 1 = bitmap)")
        deleted = int(df.num_deleted_rows)
        if deleted > rows:
            raise _corrupt(where, fid, "deletion_file.num_deleted_rows",
                           f"is {deleted}, more than the fragment's {rows} physical rows")
    for data_file in fragment.files:
        _validate_data_file(data_file, where, fid)


def _corrupt(where: str, fid: int, field: str, problem: str) -> CorruptFileError:
    return CorruptFileError(f"{where}: fragment {fid}: {field} {problem}")


def _validate_data_file(data_file: table_pb2.DataFile, where: str, fid: int) -> None:
    if not data_file.path:
        raise _corrupt(where, fid, "data file path", "is empty")
    name = f"data file {data_file.path!r}"
    if int(data_file.file_size_bytes) > MAX_FILE_SIZE:
        raise _corrupt(where, fid, name, f"has file_size_bytes {data_file.file_size_bytes}, "
                                         "more than a file can hold")
    fields = data_file.fields
    if len(fields):
        live = fields if min(fields) >= 0 else [f for f in fields if f != TOMBSTONE_FIELD_ID]
        if len(live) and min(live) < 0:
            raise _corrupt(where, fid, name, f"lists field id {min(live)} (field ids are "
                                             ">= 0, or -2 for a dropped column)")
        if len(set(live)) != len(live):
            raise _corrupt(where, fid, name, "lists a field id more than once")
    if not _is_v2_file(data_file):
        return
    columns = data_file.column_indices
    if len(columns) != len(fields):
        raise _corrupt(where, fid, name, f"has {len(fields)} field ids but {len(columns)} "
                                         "column indices")
    if len(columns):
        used = columns if min(columns) >= 0 else [c for c in columns if c != -1]
        if len(used) and min(used) < 0:
            raise _corrupt(where, fid, name, f"lists column index {min(used)} (column "
                                             "indices are >= 0, or -1 for a field without "
                                             "a column)")
        if len(set(used)) != len(used):
            raise _corrupt(where, fid, name, "lists a column index more than once")


def validate_schema(fields: Iterable[file_pb2.Field], where: str) -> None:
    """Check the schema's field ids: each ``>= 0`` and used once, and each parent id either
    -1 (a top-level field) or the id of another field listed before it (Lance lists parents
    first). A negative or repeated id would make columns read as nulls, or as another
    column's values."""
    seen: dict[int, str] = {}
    for field in fields:
        fid, parent = int(field.id), int(field.parent_id)
        if fid < 0:
            raise CorruptFileError(f"{where}: schema field {field.name!r}: id is {fid} "
                                   "(field ids are >= 0)")
        if fid in seen:
            raise CorruptFileError(f"{where}: schema field {field.name!r}: id {fid} is used "
                                   "by two fields")
        if parent != -1 and parent not in seen:
            raise CorruptFileError(f"{where}: schema field {field.name!r}: parent_id {parent} "
                                   "is not the id of a field listed before it")
        if parent != -1 and not seen[parent].startswith(NESTED_TYPES):
            raise CorruptFileError(f"{where}: schema field {field.name!r}: parent_id {parent} "
                                   f"names a field of type {seen[parent]!r}, which has no "
                                   "children")
        seen[fid] = field.logical_type


def validate_manifest(manifest: table_pb2.Manifest, where: str) -> None:
    """Check every fragment of a manifest; ``where`` (the manifest's path) leads each message.

    Checks: fragment ids are unique and fit a row address; ``physical_rows`` fits a fragment
    (and is set when the fragment has data files); a deletion file has a known type and
    deletes no more rows than the fragment has; data files list valid, unique field ids and
    (2.x files) one valid, unique column index per field id; schema field ids are valid
    and unique, parents listed before their children.
    """
    validate_schema(manifest.fields, where)
    seen: set[int] = set()
    for fragment in manifest.fragments:
        fid = int(fragment.id)
        if fid in seen:
            raise CorruptFileError(f"{where}: fragment {fid}: id is used by two fragments")
        seen.add(fid)
        validate_fragment(fragment, where)


__all__ = [
    "DELETION_FILE_TYPES",
    "MAX_FRAGMENT_ID",
    "MAX_FRAGMENT_ROWS",
    "validate_fragment",
    "validate_manifest",
    "validate_schema",
]

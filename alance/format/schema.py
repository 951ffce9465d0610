"""Lance schemas: the field list stored in manifests, and its mapping to Arrow.

A Lance schema is a flat, depth-first list of fields, each with an integer id and the id of its
parent (``-1`` at the top level). Data types are written as *logical type* strings
(``"int64"``, ``"timestamp:us:UTC"``, ``"fixed_size_list:float:16"``...). This module converts
between that representation, our in-memory tree (:class:`LanceSchema` / :class:`LanceField`) and
``pyarrow`` schemas. It does no IO.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import pyarrow as pa

from alance.errors import (
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
    no_such_column,
)

# Field.Type enum values of the protobuf message.
PARENT, REPEATED, LEAF = 0, 1, 2
# Field.encoding enum values (lance.file.Encoding), used by v0.1/v0.2 data files.
ENC_NONE, ENC_PLAIN, ENC_VAR_BINARY, ENC_DICTIONARY, ENC_RLE = 0, 1, 2, 3, 4

PK_KEY = "lance-schema:unenforced-primary-key"
PK_POSITION_KEY = "lance-schema:unenforced-primary-key:position"
EXT_NAME_KEY = "ARROW:extension:name"
EXT_META_KEY = "ARROW:extension:metadata"
BFLOAT16_EXT = "lance.bfloat16"

_UNITS = {"s": "s", "ms": "ms", "us": "us", "ns": "ns"}

_SIMPLE_TO_ARROW: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "int16": pa.int16(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "uint32": pa.uint32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "halffloat": pa.float16(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "large_string": pa.large_string(),
    "large_binary": pa.large_binary(),
    "json": pa.large_binary(),
    "date32:day": pa.date32(),
    "date64:ms": pa.date64(),
    "time32:s": pa.time32("s"),
    "time32:ms": pa.time32("ms"),
    "time64:us": pa.time64("us"),
    "time64:ns": pa.time64("ns"),
    "duration:s": pa.duration("s"),
    "duration:ms": pa.duration("ms"),
    "duration:us": pa.duration("us"),
    "duration:ns": pa.duration("ns"),
}
_SIMPLE_FROM_ARROW = {str(t): name for name, t in _SIMPLE_TO_ARROW.items() if name != "json"}


def logical_type_of(dtype: pa.DataType) -> str:
    """The Lance logical type string of an Arrow data type (nested types: the container only)."""
    if isinstance(dtype, pa.BaseExtensionType):
        return logical_type_of(dtype.storage_type)
    simple = _SIMPLE_FROM_ARROW.get(str(dtype))
    if simple is not None and not pa.types.is_timestamp(dtype):
        return simple
    if pa.types.is_timestamp(dtype):
        return f"timestamp:{dtype.unit}:{dtype.tz or '-'}"
    if pa.types.is_decimal128(dtype):
        return f"decimal:128:{dtype.precision}:{dtype.scale}"
    if pa.types.is_decimal256(dtype):
        return f"decimal:256:{dtype.precision}:{dtype.scale}"
    if pa.types.is_struct(dtype):
        return "struct"
    if pa.types.is_map(dtype):
        return "map"
    if pa.types.is_list(dtype):
        return "list.struct" if pa.types.is_struct(dtype.value_type) else "list"
    if pa.types.is_large_list(dtype):
        return "large_list.struct" if pa.types.is_struct(dtype.value_type) else "large_list"
    if pa.types.is_fixed_size_list(dtype):
        item = dtype.value_field
        named = (item.metadata or {}).get(EXT_NAME_KEY.encode()) == BFLOAT16_EXT.encode()
        if named or getattr(item.type, "extension_name", None) == BFLOAT16_EXT:
            inner = BFLOAT16_EXT
        else:
            inner = logical_type_of(item.type)
        return f"fixed_size_list:{inner}:{dtype.list_size}"
    if pa.types.is_fixed_size_binary(dtype):
        return f"fixed_size_binary:{dtype.byte_width}"
    if pa.types.is_dictionary(dtype):
        return f"dict:{logical_type_of(dtype.value_type)}:{logical_type_of(dtype.index_type)}:false"
    raise UnsupportedFeatureError(f"Arrow type {dtype} has no Lance logical type")


def arrow_type_of(logical_type: str, children: Sequence[LanceField] = ()) -> pa.DataType:
    """The Arrow data type for a logical type string and (for nested types) its child fields."""
    simple = _SIMPLE_TO_ARROW.get(logical_type)
    if simple is not None:
        return simple
    if logical_type == "struct":
        return pa.struct([c.to_arrow() for c in children])
    if logical_type in ("list", "list.struct", "large_list", "large_list.struct"):
        if len(children) != 1:
            raise InvalidInputError(f"{logical_type} field needs exactly one child field")
        item = children[0].to_arrow()
        return pa.list_(item) if logical_type.startswith("list") else pa.large_list(item)
    if logical_type == "map":
        if len(children) != 1 or len(children[0].children) != 2:
            raise InvalidInputError("map field needs one entries child with key and value")
        key, value = (c.to_arrow() for c in children[0].children)
        return pa.map_(key, value)
    return _parameterised_type(logical_type)


@lru_cache(maxsize=1024)
def _parameterised_type(logical_type: str) -> pa.DataType:
    """Arrow type of a logical type with parameters in its text (timestamp, decimal,
    fixed-size list...): a pure function of the string, so remembered."""
    parts = logical_type.split(":")
    kind = parts[0]
    try:
        if kind == "timestamp" and len(parts) >= 3:
            tz = ":".join(parts[2:])
            return pa.timestamp(_UNITS[parts[1]], None if tz == "-" else tz)
        if kind == "decimal" and len(parts) == 4:
            bits, precision, scale = int(parts[1]), int(parts[2]), int(parts[3])
            if bits == 128:
                return pa.decimal128(precision, scale)
            if bits == 256:
                return pa.decimal256(precision, scale)
        if kind == "fixed_size_binary" and len(parts) == 2:
            return pa.binary(int(parts[1]))
        if kind == "fixed_size_list" and len(parts) >= 3:
            inner, size = ":".join(parts[1:-1]), int(parts[-1])
            if inner == BFLOAT16_EXT:
                item = pa.field("item", pa.binary(2), True, {EXT_NAME_KEY: BFLOAT16_EXT,
                                                             EXT_META_KEY: ""})
            else:
                item = pa.field("item", arrow_type_of(inner), True)
            return pa.list_(item, size)
        if kind == "dict" and len(parts) >= 4:
            key_type = arrow_type_of(parts[-2])
            value_type = arrow_type_of(":".join(parts[1:-2]))
            return pa.dictionary(key_type, value_type)
    except (KeyError, ValueError) as exc:
        raise UnsupportedFeatureError(f"unsupported logical type {logical_type!r}") from exc
    raise UnsupportedFeatureError(f"unsupported logical type {logical_type!r}")


def with_extension_type(field: pa.Field) -> pa.Field:
    """``field`` with its extension type if its metadata names one pyarrow knows.

    Fields keep extension types as storage type plus ``ARROW:extension:*`` metadata; this turns
    them back into the registered (or canonical, e.g. ``arrow.uuid``) extension type, as Arrow
    IPC readers do. Unknown extension names leave the field as it is.
    """
    meta = field.metadata or {}
    if isinstance(field.type, pa.BaseExtensionType) or not _names_extension(field):
        return field
    key = (field.name, str(field.type), tuple(sorted(meta.items())), field.nullable,
           _nested_metadata(field.type))
    resolved = _EXTENSION_CACHE.get(key)
    if resolved is None:
        resolved = pa.ipc.read_schema(pa.py_buffer(pa.schema([field]).serialize())).field(0)
        _EXTENSION_CACHE[key] = resolved
    return resolved


_EXTENSION_CACHE: dict[tuple[Any, ...], pa.Field] = {}


def _children(dtype: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(dtype):
        return [dtype.field(i) for i in range(dtype.num_fields)]
    if pa.types.is_map(dtype):
        return [dtype.key_field, dtype.item_field]
    if (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)
            or pa.types.is_fixed_size_list(dtype)):
        return [dtype.value_field]
    return []


def _names_extension(field: pa.Field) -> bool:
    """Whether the field or a nested child field carries an extension name."""
    if field.metadata and EXT_NAME_KEY.encode() in field.metadata:
        return True
    return any(_names_extension(c) for c in _children(field.type))


def _nested_metadata(dtype: pa.DataType) -> tuple[Any, ...]:
    return tuple((tuple(sorted((c.metadata or {}).items())), _nested_metadata(c.type))
                 for c in _children(dtype))


def _default_encoding(dtype: pa.DataType) -> int:
    """The v0.1/v0.2 ``Field.encoding`` upstream assigns to a new field of this type."""
    if isinstance(dtype, pa.BaseExtensionType):
        dtype = dtype.storage_type
    if pa.types.is_dictionary(dtype):
        return ENC_DICTIONARY
    if (pa.types.is_string(dtype) or pa.types.is_binary(dtype) or pa.types.is_large_string(dtype)
            or pa.types.is_large_binary(dtype)):
        return ENC_VAR_BINARY
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        return ENC_PLAIN  # the offsets of lists (and maps, which are lists of entries)
    if pa.types.is_struct(dtype) or pa.types.is_null(dtype):
        return ENC_NONE
    return ENC_PLAIN  # fixed stride: primitives, fixed-size lists and binaries, decimals, ...


def _truthy(value: bytes | str | None) -> bool:
    if value is None:
        return False
    text = value.decode() if isinstance(value, bytes) else value
    return text.strip().lower() in ("true", "1", "yes")


def text_metadata(raw: Mapping[bytes, bytes] | None, where: str) -> dict[str, bytes]:
    """Arrow metadata as Lance keeps it, refusing keys or values that are not UTF-8 text
    (pylance refuses them too: readers decode them as text)."""
    out: dict[str, bytes] = {}
    for key, value in (raw or {}).items():
        try:
            text = key.decode("utf-8")
            value.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(
                f"{where}: metadata key {key!r} or its value is not valid UTF-8; encode "
                "binary metadata as text (e.g. base64)") from None
        out[text] = value
    return out


def extension_metadata(dtype: pa.BaseExtensionType) -> bytes:
    """The serialized parameters of an extension type (``ARROW:extension:metadata``), also
    for pyarrow's built-in ones that do not expose ``__arrow_ext_serialize__``."""
    serialize = getattr(dtype, "__arrow_ext_serialize__", None)
    if serialize is not None:
        return bytes(serialize())
    if isinstance(dtype, pa.FixedShapeTensorType):
        params: dict[str, Any] = {"shape": list(dtype.shape)}
        if dtype.dim_names:
            params["dim_names"] = list(dtype.dim_names)
        if dtype.permutation:
            params["permutation"] = list(dtype.permutation)
        return json.dumps(params, separators=(",", ":")).encode()
    opaque = getattr(pa, "OpaqueType", None)
    if opaque is not None and isinstance(dtype, opaque):
        return json.dumps({"type_name": dtype.type_name, "vendor_name": dtype.vendor_name},
                          separators=(",", ":")).encode()
    return b""


@dataclass
class LanceField:
    """One field of a Lance schema with its nested children."""

    id: int
    name: str
    logical_type: str
    nullable: bool = True
    parent_id: int = -1
    children: list[LanceField] = field(default_factory=list)
    metadata: dict[str, bytes] = field(default_factory=dict)
    encoding: int = ENC_NONE
    dictionary: tuple[int, int] | None = None  # (offset, length) of v0.1/0.2 dictionary values
    extension_name: str = ""
    unenforced_primary_key: bool = False
    unenforced_primary_key_position: int = 0

    @property
    def type(self) -> int:
        """PARENT, REPEATED or LEAF, as the protobuf ``Field.type`` records it."""
        if self.logical_type in ("struct",):
            return PARENT
        if self.logical_type.startswith(("list", "large_list")) or self.logical_type == "map":
            return REPEATED
        return LEAF

    @property
    def data_type(self) -> pa.DataType:
        """The Arrow data type of this field."""
        return arrow_type_of(self.logical_type, self.children)

    def to_arrow(self) -> pa.Field:
        """This field as an Arrow field (metadata included)."""
        meta = {k.encode(): v for k, v in self.metadata.items()}
        if self.logical_type == "json" and EXT_NAME_KEY.encode() not in meta:
            meta[EXT_NAME_KEY.encode()] = b"lance.json"
        return pa.field(self.name, self.data_type, self.nullable, meta or None)

    def clone(self) -> LanceField:
        """A copy whose fields, children and metadata can change without touching this one
        (what ``copy.deepcopy`` gives, at a small fraction of its cost)."""
        twin = object.__new__(LanceField)
        twin.__dict__.update(self.__dict__)  # every other attribute is immutable
        twin.children = [c.clone() for c in self.children]
        twin.metadata = dict(self.metadata)
        return twin

    def walk(self) -> Iterator[LanceField]:
        """This field, then its descendants, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class LanceSchema:
    """A Lance schema: top-level fields (each a tree) and schema metadata."""

    fields: list[LanceField]
    metadata: dict[str, bytes] = field(default_factory=dict)

    # -- conversions -------------------------------------------------------------------------
    @classmethod
    def from_arrow(cls, schema: pa.Schema, *, first_id: int = 0) -> LanceSchema:
        """Build a Lance schema from Arrow, assigning ids depth first from ``first_id``."""
        next_id = [first_id]

        def convert(f: pa.Field, parent_id: int) -> LanceField:
            dtype = f.type
            meta = text_metadata(f.metadata, f"field {f.name!r}")
            ext_name = ""
            if isinstance(dtype, pa.BaseExtensionType):
                ext_name = dtype.extension_name
                meta.setdefault(EXT_NAME_KEY, ext_name.encode())
                meta.setdefault(EXT_META_KEY, extension_metadata(dtype))
                dtype = dtype.storage_type
            logical = logical_type_of(dtype)
            if meta.get(EXT_NAME_KEY) in (b"arrow.json", b"lance.json"):
                if not pa.types.is_large_binary(dtype):
                    # Lance stores JSON as JSONB bytes (lance.json over large_binary); text
                    # stored under that name would be misread by pylance.
                    raise UnsupportedFeatureError(
                        f"column {f.name!r}: JSON text must be converted to JSONB first "
                        "(write_dataset does that for top-level arrow.json columns)")
                logical = "json"
                ext_name = ext_name or "lance.json"  # as pylance records JSON fields
            lf = LanceField(
                id=next_id[0], name=f.name, logical_type=logical, nullable=f.nullable,
                parent_id=parent_id, metadata=meta, encoding=_default_encoding(dtype),
                extension_name=ext_name, unenforced_primary_key=_truthy(meta.get(PK_KEY)),
            )
            if lf.unenforced_primary_key and PK_POSITION_KEY in meta:
                try:
                    lf.unenforced_primary_key_position = int(meta[PK_POSITION_KEY].decode())
                except ValueError as exc:
                    raise InvalidInputError(
                        f"field {f.name!r}: {PK_POSITION_KEY} must be a positive integer") from exc
                if lf.unenforced_primary_key_position < 1:
                    raise InvalidInputError(
                        f"field {f.name!r}: {PK_POSITION_KEY} must be a positive integer")
            next_id[0] += 1
            if pa.types.is_struct(dtype):
                lf.children = [convert(dtype.field(i), lf.id) for i in range(dtype.num_fields)]
            elif pa.types.is_map(dtype):
                entries = pa.field("entries", pa.struct([dtype.key_field, dtype.item_field]),
                                   False)
                lf.children = [convert(entries, lf.id)]
            elif pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
                lf.children = [convert(dtype.value_field, lf.id)]
            return lf

        fields = [convert(f, -1) for f in schema]
        meta = text_metadata(schema.metadata, "schema")
        result = cls(fields, meta)
        result.validate_primary_key()
        return result

    def to_arrow(self) -> pa.Schema:
        """This schema as an Arrow schema (extension types as storage type plus metadata)."""
        meta = {k.encode(): v for k, v in self.metadata.items()}
        return pa.schema([f.to_arrow() for f in self.fields], metadata=meta or None)

    def to_arrow_with_extensions(self) -> pa.Schema:
        """This schema with top-level extension types resolved (for results given to users)."""
        return pa.schema([with_extension_type(f) for f in self.to_arrow()],
                         metadata=self.to_arrow().metadata)

    @classmethod
    def from_protos(cls, protos: Iterable[Any], metadata: Mapping[str, bytes] | None = None,
                    ) -> LanceSchema:
        """Rebuild the tree from a flat list of ``lance.file.Field`` messages."""
        by_id: dict[int, LanceField] = {}
        top: list[LanceField] = []
        for p in protos:
            lf = LanceField(
                id=p.id, name=p.name, logical_type=p.logical_type, nullable=p.nullable,
                parent_id=p.parent_id, metadata=dict(p.metadata), encoding=int(p.encoding),
                dictionary=((p.dictionary.offset, p.dictionary.length)
                            if p.HasField("dictionary") else None),
                extension_name=p.extension_name,
                unenforced_primary_key=p.unenforced_primary_key,
                unenforced_primary_key_position=p.unenforced_primary_key_position,
            )
            if lf.id in by_id:
                raise InvalidInputError(f"duplicate field id {lf.id} in schema")
            by_id[lf.id] = lf
            if lf.parent_id == -1:
                top.append(lf)
            else:
                parent = by_id.get(lf.parent_id)
                if parent is None:
                    raise InvalidInputError(
                        f"field {lf.name!r} (id {lf.id}) names unknown parent {lf.parent_id}")
                parent.children.append(lf)
        return cls(top, dict(metadata or {}))

    def to_protos(self) -> list[Any]:
        """The flat, depth-first list of ``lance.file.Field`` messages."""
        from alance._proto import file_pb2

        out = []
        for f in self.walk():
            # Like upstream, leave ``Field.type`` at its default: readers derive the kind of
            # field from the logical type.
            p = file_pb2.Field(
                name=f.name, id=f.id, parent_id=f.parent_id,
                logical_type=f.logical_type, nullable=f.nullable,
                encoding=f.encoding,  # type: ignore[arg-type]
                extension_name=f.extension_name,
                unenforced_primary_key=f.unenforced_primary_key,
            )
            if f.unenforced_primary_key_position:
                p.unenforced_primary_key_position = f.unenforced_primary_key_position
            for k, v in f.metadata.items():
                p.metadata[k] = v
            if f.dictionary is not None:
                p.dictionary.offset, p.dictionary.length = f.dictionary
            out.append(p)
        return out

    # -- navigation --------------------------------------------------------------------------
    def clone(self) -> LanceSchema:
        """A copy that can change without touching this schema (see :meth:`LanceField.clone`)."""
        return LanceSchema([f.clone() for f in self.fields], dict(self.metadata))

    def walk(self) -> Iterator[LanceField]:
        """Every field, depth first (the order ids are assigned in and manifests list them)."""
        for f in self.fields:
            yield from f.walk()

    def field_ids(self) -> list[int]:
        """Ids of all fields, depth first."""
        return [f.id for f in self.walk()]

    def max_field_id(self) -> int:
        """The highest field id in use, or -1 for an empty schema."""
        return max(self.field_ids(), default=-1)

    @property
    def names(self) -> list[str]:
        """Top-level field names."""
        return [f.name for f in self.fields]

    def field(self, name: str) -> LanceField:
        """The top-level field called ``name``."""
        for f in self.fields:
            if f.name == name:
                return f
        raise no_such_column(name, self.names)

    def project(self, names: Sequence[str]) -> LanceSchema:
        """A schema holding only the named top-level fields, in the order given."""
        return LanceSchema([self.field(n) for n in names], dict(self.metadata))

    def with_ids(self, ids: Iterable[int]) -> LanceSchema:
        """The sub-schema of fields whose ids are in ``ids`` (parents of kept fields are kept)."""
        wanted = set(ids)

        def keep(f: LanceField) -> LanceField | None:
            kids = [k for k in (keep(c) for c in f.children) if k is not None]
            if f.id in wanted or kids:
                return replace(f, children=kids)
            return None

        return LanceSchema([k for k in (keep(f) for f in self.fields) if k is not None],
                           dict(self.metadata))

    # -- checks ------------------------------------------------------------------------------
    def primary_key(self) -> list[LanceField]:
        """The unenforced primary key fields, in key order (positioned first, then by id)."""
        pk = [f for f in self.walk() if f.unenforced_primary_key]
        return sorted(pk, key=lambda f: (f.unenforced_primary_key_position == 0,
                                         f.unenforced_primary_key_position, f.id))

    def validate_primary_key(self) -> None:
        """Check the rules for unenforced primary key fields (table format spec)."""

        def check(f: LanceField, ancestors: list[LanceField]) -> None:
            if f.unenforced_primary_key:
                chain = [*ancestors, f]
                if any(a.nullable for a in chain):
                    raise InvalidInputError(
                        f"primary key field {f.name!r}: it and its parents must not be nullable")
                if f.children or f.type != LEAF:
                    raise InvalidInputError(f"primary key field {f.name!r} must be a leaf field")
                if any(a.type == REPEATED for a in ancestors):
                    raise InvalidInputError(
                        f"primary key field {f.name!r} must not be inside a list or map")
            for c in f.children:
                check(c, [*ancestors, f])

        for f in self.fields:
            check(f, [])
        positions = [f.unenforced_primary_key_position for f in self.walk()
                     if f.unenforced_primary_key and f.unenforced_primary_key_position]
        if len(positions) != len(set(positions)):
            raise InvalidInputError("primary key positions must be distinct")

    def check_compatible(self, other: pa.Schema) -> None:
        """Raise :class:`SchemaMismatchError` unless ``other`` can be appended to this schema.

        Names, order, types and nesting must agree. Nullability may be stricter in ``other``
        (a non-nullable column can be appended to a nullable one), not looser.
        """
        mine = self.to_arrow()
        problems = _differences(list(mine), list(other), "")
        if problems:
            raise SchemaMismatchError("schema does not match the dataset: " + "; ".join(problems))


def retyped_fields(stored: LanceSchema, expected: LanceSchema,
                   ) -> list[tuple[LanceField, LanceField]]:
    """The fields of ``expected`` (a dataset's schema) whose type is not the one ``stored`` (a
    data file's own schema) gives the field of the same id, as ``(expected, stored)`` pairs.

    Data files record the schema they were written with, by the dataset's field ids; a
    manifest that types a field otherwise (damage: a changed type of the same byte width would
    reinterpret the values) disagrees with the file. Names and nullability may differ (renames
    and nullability changes touch only the manifest), types may not: a changed type gets a new
    field id and new data files.
    """
    by_id = {f.id: f for f in stored.walk()}
    out = []
    for want in expected.walk():
        found = by_id.get(want.id)
        if found is not None and found.logical_type != want.logical_type:
            out.append((want, found))
    return out


def _differences(expected: list[pa.Field], actual: list[pa.Field], prefix: str) -> list[str]:
    out: list[str] = []
    exp_names = [f.name for f in expected]
    act_names = [f.name for f in actual]
    if exp_names != act_names:
        return [f"{prefix or 'columns'}: expected {exp_names}, got {act_names}"]
    for e, a in zip(expected, actual, strict=True):
        path = f"{prefix}{e.name}"
        et, at = e.type, a.type
        if isinstance(at, pa.BaseExtensionType):
            at = at.storage_type
        if e.nullable is False and a.nullable is True:
            out.append(f"{path}: column is not nullable in the dataset")
        if pa.types.is_struct(et) and pa.types.is_struct(at):
            out += _differences(list(et), list(at), path + ".")
        elif (pa.types.is_list(et) and pa.types.is_list(at)) or (
                pa.types.is_large_list(et) and pa.types.is_large_list(at)):
            out += _differences([et.value_field], [at.value_field], path + ".")
        elif not _same_storage_type(et, at):
            out.append(f"{path}: expected type {et}, got {at}")
    return out


def _same_storage_type(a: pa.DataType, b: pa.DataType) -> bool:
    if pa.types.is_fixed_size_list(a) and pa.types.is_fixed_size_list(b):
        return a.list_size == b.list_size and _same_storage_type(a.value_type, b.value_type)
    return bool(a.equals(b))

def as_schema(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the (extension) types of ``schema``, whose storage types it already has."""
    if batch.schema.equals(schema):
        return batch
    columns = [pa.ExtensionArray.from_storage(f.type, col)
               if isinstance(f.type, pa.BaseExtensionType)
               and not isinstance(col.type, pa.BaseExtensionType) else col
               for f, col in zip(schema, batch.columns, strict=True)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)

"""Streaming writer of Lance 2.1 / 2.2 data files (pure: returns bytes, does no IO).

:class:`V2FileWriter` shreds every batch into leaf columns (:mod:`.encode_levels`), encodes
one page per leaf column per batch slice (:mod:`.encode_pages`) and returns the page buffers
to append; :meth:`V2FileWriter.finish` returns the tail: the schema (global buffer 0), the
column metadata, the two offset tables and the footer (see :mod:`.container`). Buffers start
at 64-byte boundaries, as upstream places them.

Blob columns (:mod:`.encode_blob`) put their small values into the data file too, ahead
of the batch's pages; the rest goes to sidecar files, whose bytes the writer hands out
through :meth:`V2FileWriter.take_sidecar_chunks` (it does no IO).

Memory stays bounded by one batch: nothing but page positions is kept between calls.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import any_pb2
from google.protobuf.message import Message

from alance._proto import encodings_v2_0_pb2, file2_pb2, file_pb2
from alance.errors import InvalidInputError, SchemaMismatchError, UnsupportedFeatureError
from alance.format.schema import LanceField, LanceSchema
from alance.format.v2.blob import BLOB_META_KEY, PACKED_META_KEY, blob_version
from alance.format.v2.blob_values import blob_values, thresholds_of
from alance.format.v2.container import MAGIC
from alance.format.v2.encode_blob import (
    SidecarChunk,
    SidecarState,
    encode_blob_v1,
    encode_blob_v2,
)
from alance.format.v2.encode_levels import shred, storage_of
from alance.format.v2.encode_pages import Buffer, encode_pages
from alance.format.v2.encode_v20 import check_field20, columns20, encode_field20
from alance.format.v2.leaf import is_packed_struct, leaves_of

#: File versions this writer produces.
WRITABLE_VERSIONS = ((2, 0), (2, 1), (2, 2))
#: What the footer of a 2.0 file says (2.0 predates the 2.x numbering).
_FOOTER_2_0 = (0, 3)
BUFFER_ALIGN = 64
#: A page holds at most about this many bytes of a column's values (rows are split evenly).
PAGE_BYTES = 16 * 1024 * 1024


def _column_encoding(*, blob: bool = False) -> bytes:
    """The column-level encoding every column carries: plain values (2.0 blob columns: a
    blob around plain values)."""
    enc = encodings_v2_0_pb2.ColumnEncoding()
    enc.values.SetInParent()
    if blob:
        enc = encodings_v2_0_pb2.ColumnEncoding(blob=encodings_v2_0_pb2.Blob(inner=enc))
    wrapper = any_pb2.Any(type_url="/" + enc.DESCRIPTOR.full_name,
                          value=enc.SerializeToString())
    return wrapper.SerializeToString()


def _check_blob(f: LanceField, version: tuple[int, int], blob_v1: bool = False) -> bool:
    """Whether top-level field ``f`` is a blob column this file version can hold (raises
    UnsupportedFeatureError for one it cannot, or for blob columns inside other fields)."""
    inner = next((g for g in f.walk() if g is not f and blob_version(g)), None)
    if inner is not None:
        raise UnsupportedFeatureError(f"field {inner.name!r}: blob columns inside other "
                                      "columns cannot be written")
    kind = blob_version(f)
    if kind == 2 and version < (2, 2):
        raise UnsupportedFeatureError(
            f"field {f.name!r}: blob v2 columns need data storage version 2.2 (this dataset "
            f"uses {version[0]}.{version[1]})")
    if kind == 1 and version >= (2, 2) and not blob_v1:
        raise UnsupportedFeatureError(
            f"field {f.name!r}: 2.2 files hold blob v2 columns, not blob v1 (write_dataset "
            "converts blob v1 input fields)")
    return kind is not None


def _file_protos(schema: LanceSchema) -> list[file_pb2.Field]:
    """The schema a data file records: as the manifest's, except that a blob v2 field is
    its packed descriptor struct, with the descriptor fields listed after it (id -1)."""
    out: list[file_pb2.Field] = []
    for f in schema.fields:
        if blob_version(f) != 2:
            out.extend(LanceSchema([f]).to_protos())
            continue
        p = file_pb2.Field(name=f.name, id=f.id, parent_id=f.parent_id,
                           logical_type="struct", nullable=f.nullable)
        p.metadata[PACKED_META_KEY] = b"true"
        p.metadata[BLOB_META_KEY] = b"true"
        out.append(p)
        for name, logical in (("kind", "uint8"), ("position", "uint64"), ("size", "uint64"),
                              ("blob_id", "uint32"), ("blob_uri", "string")):
            out.append(file_pb2.Field(
                name=name, id=-1, parent_id=-1, logical_type=logical,
                encoding=file_pb2.VAR_BINARY if logical == "string" else file_pb2.PLAIN))
    return out


def _check_types(field: LanceField, version: tuple[int, int], path: str) -> None:
    if field.logical_type == "map" and version < (2, 2):
        raise UnsupportedFeatureError(
            f"field {path!r}: maps need data storage version 2.2 (this dataset uses "
            f"{version[0]}.{version[1]})")
    if field.logical_type.startswith("fixed_size_list"):
        item = field.data_type.value_type
        while True:
            if isinstance(item, pa.ExtensionType):
                item = item.storage_type
            if not pa.types.is_fixed_size_list(item):
                break
            item = item.value_type
        if not (pa.types.is_integer(item) or pa.types.is_floating(item)
                or pa.types.is_boolean(item)
                or pa.types.is_decimal(item) or pa.types.is_fixed_size_binary(item)
                or pa.types.is_temporal(item)):
            raise UnsupportedFeatureError(
                f"field {path!r}: fixed-size lists of {item} cannot be written to 2.x files")
    for c in field.children:
        _check_types(c, version, f"{path}.{c.name}")


class V2FileWriter:
    """Writes one 2.1 or 2.2 data file, batch by batch.

    :meth:`write_batch` returns the buffers to append for a batch (their total size is in
    :attr:`bytes_written` afterwards); :meth:`finish` the tail. Write them in order from
    offset 0.
    """

    def __init__(self, schema: LanceSchema, version: tuple[int, int] = (2, 2), *,
                 page_bytes: int = PAGE_BYTES, blob_v1: bool = False) -> None:
        """Prepare a writer for ``schema`` (field ids as in the dataset manifest).

        ``page_bytes``: a batch's column larger than this is split into pages of about this
        size (at least one row each). ``blob_v1``: 2.2 files may hold blob v1 columns (values
        in the file itself, as pylance's file writer stores them; datasets store blob v2)."""
        if page_bytes < 1:
            raise InvalidInputError(f"page_bytes must be positive, not {page_bytes}")
        if version not in WRITABLE_VERSIONS:
            raise UnsupportedFeatureError(
                f"alance writes Lance file versions 2.0, 2.1 and 2.2, not "
                f"{version[0]}.{version[1]}")
        if not schema.fields:
            raise InvalidInputError("cannot write a data file without columns")
        for f in schema.fields:
            if _check_blob(f, version, blob_v1):
                continue
            if version == (2, 0):
                check_field20(f, f.name)
            else:
                _check_types(f, version, f.name)
        self._schema = schema.clone()
        self._version = version
        # 2.0: a column per field (pre-order); 2.1+: a column per leaf field; a blob column
        # is one column of descriptors.
        self._leaves = [leaf for f in self._schema.fields
                        for leaf in ([f] if blob_version(f) else
                                     columns20([f]) if version == (2, 0) else leaves_of(f))]
        self._blob_columns = {i for i, f in enumerate(self._leaves) if blob_version(f)}
        self._sidecar_state = SidecarState()
        self._sidecar_chunks: list[SidecarChunk] = []
        self._pages: list[list[file2_pb2.ColumnMetadata.Page]] = [[] for _ in self._leaves]
        # 2.0 struct columns: one page for the whole file, written by finish().
        self._struct_rows: dict[int, int] = {
            i: 0 for i, f in enumerate(self._leaves)
            if version == (2, 0) and f.logical_type == "struct" and not is_packed_struct(f)}
        self._page_bytes = page_bytes
        self._extra_globals: list[bytes] = []
        self._position = 0
        self._num_rows = 0
        self._finished = False

    @property
    def version(self) -> tuple[int, int]:
        """(major, minor) of the file."""
        return self._version

    @property
    def bytes_written(self) -> int:
        """Total bytes returned so far (the file size once finished)."""
        return self._position

    @property
    def num_rows(self) -> int:
        """Rows written so far."""
        return self._num_rows

    @property
    def leaf_field_ids(self) -> list[int]:
        """Ids of the fields of the columns, in column order (``DataFile.fields`` of the
        manifest): the leaf fields (2.1+), every field (2.0)."""
        return [leaf.id for leaf in self._leaves]

    def write_batch(self, batch: pa.RecordBatch | pa.Table,
                    parallel: Executor | None = None) -> list[bytes | memoryview]:
        """Encode ``batch`` and return the buffers to append (padding included; ``len()`` of
        each is its size in bytes). With ``parallel``, the columns are encoded on its
        threads (encoding is numpy and compression work that releases the GIL)."""
        if self._finished:
            raise InvalidInputError("writer already finished")
        if isinstance(batch, pa.Table):
            batch = pa.RecordBatch.from_arrays(
                [combine_chunks(c) for c in batch.columns], schema=batch.schema)
        n = batch.num_rows
        if n == 0:
            return []
        names = batch.schema.names
        arrays: list[pa.Array] = []
        for lf in self._schema.fields:
            if lf.name not in names:
                raise SchemaMismatchError(f"batch has no column {lf.name!r}")
            arr = storage_of(batch.column(lf.name))
            if blob_version(lf):
                arrays.append(arr)  # blob values are checked by blob_values
                continue
            target = lf.data_type
            if arr.type != target:
                try:
                    arr = arr.cast(target)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaMismatchError(
                        f"column {lf.name!r} of type {arr.type} does not fit the file's "
                        f"{target}: {exc}") from exc
            arrays.append(arr)
        if len(names) != len(self._schema.fields):
            raise SchemaMismatchError(
                f"batch columns {names} do not match the file's {self._schema.names}")
        encoded: list[list[tuple[list[Buffer], Message, int]]] = []
        out: list[bytes | memoryview] = []
        fields = list(zip(self._schema.fields, arrays, strict=True))
        plain = [f for f in fields if not blob_version(f[0])]
        # Columns other than blobs are encoded independently (blobs, in order, below: they
        # place their values in ``out`` as they go).
        done = iter(_longest_first(parallel, self._encode_field, plain)
                    if parallel is not None and len(plain) > 1
                    else map(self._encode_field, plain))
        for field in fields:
            if blob_version(field[0]):
                encoded.append(self._encode_blob(field[0], field[1], out))
            else:
                encoded.extend(next(done))
        # Everything encoded: lay the buffers out.
        for col, col_pages in enumerate(encoded):
            for buffers, message, rows in col_pages:
                if col in self._struct_rows:
                    self._struct_rows[col] += rows
                    continue
                meta = file2_pb2.ColumnMetadata.Page(length=rows, priority=0)
                for buf in buffers:
                    pad = -self._position % BUFFER_ALIGN
                    if pad:
                        out.append(bytes(pad))
                        self._position += pad
                    view = _as_bytes(buf)
                    size = len(view)
                    meta.buffer_offsets.append(self._position)
                    meta.buffer_sizes.append(size)
                    if size:
                        out.append(view)
                    self._position += size
                meta.encoding.direct.encoding = _any(message)
                self._pages[col].append(meta)
        self._num_rows += n
        return out

    def _encode_blob(self, lf: LanceField, arr: pa.Array, out: list[bytes | memoryview],
                     ) -> list[tuple[list[Buffer], Message, int]]:
        """The descriptor pages of a blob column; its inline values go to ``out`` (at the
        current, 64-byte aligned, position) and its sidecar bytes to the pending chunks."""
        values = blob_values(lf, arr)
        pad = -self._position % BUFFER_ALIGN
        if pad:
            out.append(bytes(pad))
            self._position += pad
        if blob_version(lf) == 2:
            enc = encode_blob_v2(lf, values, self._position, self._sidecar_state,
                                 thresholds_of(lf))
        else:
            enc = encode_blob_v1(lf, values, self._position, self._version)
        if len(enc.inline):
            out.append(enc.inline.data)
            self._position += len(enc.inline)
        self._sidecar_chunks.extend(enc.sidecars)
        return [(p.buffers, p.layout, p.num_rows) for p in enc.pages]

    def add_global_buffer(self, data: bytes) -> int:
        """Store ``data`` as a global buffer of the file (written by :meth:`finish`, after
        the schema, which is buffer 0); returns its index."""
        if self._finished:
            raise InvalidInputError("writer already finished")
        self._extra_globals.append(bytes(data))
        return len(self._extra_globals)

    def set_schema_metadata(self, key: str, value: bytes) -> None:
        """Add or replace one key of the schema metadata the file records."""
        if self._finished:
            raise InvalidInputError("writer already finished")
        self._schema.metadata[key] = value

    def take_sidecar_chunks(self) -> list[SidecarChunk]:
        """The sidecar bytes produced since the last call, in order: append each chunk's
        ``data`` to sidecar ``blob_id`` (see :func:`alance.format.v2.blob.sidecar_path`);
        the sidecar is complete after a chunk with ``done``. Call after every
        :meth:`write_batch` and after :meth:`finish` (which completes the open pack)."""
        chunks, self._sidecar_chunks = self._sidecar_chunks, []
        return chunks

    def _encode_field(self, field: tuple[LanceField, pa.Array],
                      ) -> list[list[tuple[list[Buffer], Message, int]]]:
        """The pages of every column of one top-level field."""
        lf, arr = field
        per_leaf: list[list[tuple[list[Buffer], Message, int]]] | None = None
        for lo, hi in _page_slices(arr, self._page_bytes):
            part = arr.slice(lo, hi - lo)
            pages: list[list[tuple[list[Buffer], Message, int]]]
            if self._version == (2, 0):
                pages = [[p] for p in encode_field20(lf, part)]
            else:
                pages = [[(p.buffers, p.layout, p.num_rows) for p in
                          encode_pages(s, large_chunks=self._version >= (2, 2))]
                         for s in shred(lf, part)]
            if per_leaf is None:
                per_leaf = [[] for _ in pages]
            for i, column_pages in enumerate(pages):
                per_leaf[i].extend(column_pages)
        return per_leaf or []

    def finish(self) -> bytes:
        """Return the file tail; the file is complete once these bytes are appended."""
        if self._finished:
            raise InvalidInputError("writer already finished")
        self._finished = True
        self._sidecar_chunks.extend(self._sidecar_state.close())
        parts: list[bytes] = []
        pos = self._position

        def put(data: bytes, align: int = 1) -> int:
            nonlocal pos
            pad = -pos % align
            if pad:
                parts.append(bytes(pad))
                pos += pad
            start = pos
            parts.append(data)
            pos += len(data)
            return start

        descriptor = file_pb2.FileDescriptor(length=self._num_rows)
        protos = _file_protos(self._schema)
        for p in protos:
            p.ClearField("type")
        descriptor.schema.fields.extend(protos)
        for k, v in self._schema.metadata.items():
            descriptor.schema.metadata[k] = v
        schema_bytes = descriptor.SerializeToString()
        globals_ = [(put(schema_bytes, BUFFER_ALIGN), len(schema_bytes))]
        globals_ += [(put(extra, BUFFER_ALIGN), len(extra)) for extra in self._extra_globals]
        for col, rows in self._struct_rows.items():
            page = file2_pb2.ColumnMetadata.Page(length=rows, priority=0)
            page.encoding.direct.encoding = _any(
                encodings_v2_0_pb2.ArrayEncoding(struct=encodings_v2_0_pb2.SimpleStruct()))
            self._pages[col] = [page]
        column_meta_start = pos
        ranges = []
        for col, pages in enumerate(self._pages):
            meta = file2_pb2.ColumnMetadata()
            meta.encoding.direct.encoding = _column_encoding(
                blob=self._version == (2, 0) and col in self._blob_columns)
            meta.pages.extend(pages)
            raw = meta.SerializeToString()
            ranges.append((put(raw), len(raw)))
        cmo_start = pos
        put(np.array(ranges, dtype="<u8").reshape(-1, 2).tobytes())
        gbo_start = pos
        footer_version = _FOOTER_2_0 if self._version == (2, 0) else self._version
        put(np.array(globals_, dtype="<u8").reshape(-1, 2).tobytes())
        put(struct.pack("<QQQIIHH", column_meta_start, cmo_start, gbo_start, len(globals_),
                        len(self._pages), *footer_version) + MAGIC)
        self._position = pos
        return b"".join(parts)


def _any(message: Message) -> bytes:
    """``message`` wrapped in a serialized ``google.protobuf.Any`` (type URL as upstream)."""
    wrapper = any_pb2.Any(type_url="/" + message.DESCRIPTOR.full_name,
                          value=message.SerializeToString())
    return wrapper.SerializeToString()


def combine_chunks(column: pa.ChunkedArray) -> pa.Array:
    """One array of a column's chunks, gathered into one page as pylance does.

    Dictionary chunks keep their dictionaries: one shared dictionary stays as it is,
    different ones are concatenated (later chunks' indices offset past the earlier items);
    only when the joined dictionary outgrows the index type are the values encoded afresh.
    (``ChunkedArray.combine_chunks`` would unify them instead, reordering the items.)
    """
    chunks = [c for c in column.chunks if len(c)] or column.chunks
    if len(chunks) < 2 or not pa.types.is_dictionary(column.type):
        return column.combine_chunks()
    dtype = column.type
    first = chunks[0].dictionary
    if all(c.dictionary.equals(first) for c in chunks[1:]):
        indices = pa.concat_arrays([c.indices for c in chunks])
        return pa.DictionaryArray.from_arrays(indices, first, ordered=dtype.ordered)
    total = sum(len(c.dictionary) for c in chunks)
    limit = np.iinfo(np.dtype(dtype.index_type.to_pandas_dtype())).max
    if total - 1 > limit:
        values = pa.concat_arrays([c.dictionary_decode() for c in chunks])
        return values.dictionary_encode().cast(dtype)
    parts, base = [], 0
    for c in chunks:
        parts.append(pc.add(c.indices.cast(pa.int64()), base))
        base += len(c.dictionary)
    indices = pa.concat_arrays(parts).cast(dtype.index_type)
    dictionary = pa.concat_arrays([c.dictionary for c in chunks])
    return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=dtype.ordered)


def _as_bytes(buf: Buffer) -> bytes | memoryview:
    if isinstance(buf, bytes):
        return buf
    return np.ascontiguousarray(buf).view(np.uint8).reshape(-1).data


def _encode_cost(field: tuple[LanceField, pa.Array]) -> int:
    """A rough guess of how long a column takes to encode: its bytes, variable-width values'
    counted three times (they are hashed for a dictionary, or compressed)."""
    arr = field[1]
    t = arr.type
    variable = (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
                or pa.types.is_large_binary(t))
    return int(arr.nbytes) * (3 if variable else 1)


_Pages = list[list[tuple[list[Buffer], Message, int]]]


def _longest_first(pool: Executor, fn: Callable[[tuple[LanceField, pa.Array]], _Pages],
                   items: list[tuple[LanceField, pa.Array]]) -> Iterator[_Pages]:
    """``map(fn, items)`` on ``pool``, the costliest columns submitted first (see
    :func:`_encode_cost`): a batch takes as long as its last column, and a big string column
    submitted last would leave the other threads idle while it runs alone."""
    order = sorted(range(len(items)), key=lambda i: -_encode_cost(items[i]))
    futures: list[Future[_Pages] | None] = [None] * len(items)
    try:
        for i in order:
            futures[i] = pool.submit(fn, items[i])
        for f in futures:
            assert f is not None
            yield f.result()
    finally:
        for f in futures:
            if f is not None:
                f.cancel()


def _page_slices(arr: pa.Array, page_bytes: int) -> list[tuple[int, int]]:
    """Row ranges of the pages of one top-level column (each at most about ``page_bytes``)."""
    n = len(arr)
    size = arr.nbytes if n else 0
    if size <= page_bytes or n <= 1:
        return [(0, n)]
    pages = -(-size // page_bytes)
    step = -(-n // pages)
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


__all__ = ["BUFFER_ALIGN", "WRITABLE_VERSIONS", "V2FileWriter", "combine_chunks"]

"""Blob columns as lazy file-like objects (:meth:`LanceDataset.take_blobs`).

A blob column's rows are descriptors (see :mod:`alance.format.v2.blob`); ``take_blobs``
reads the descriptors of the selected rows and returns one :class:`BlobFile` per row
(``None`` for a null blob). A :class:`BlobFile` holds no bytes until read: each read fetches
a byte range of the file that holds the blob through the dataset's store, with a bounded
read-ahead buffer for small sequential reads. :class:`BlockingBlobFile` is the same object
as a standard blocking binary file (``io.RawIOBase``) for :mod:`alance.sync`.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar
from urllib.parse import urlparse

import numpy as np

from alance._proto import table_pb2
from alance.dataset.fragments.read import TOMBSTONE_FIELD_ID, ReadContext, live_rows
from alance.dataset.query.row_ids import as_row_ids, row_addresses_of
from alance.errors import CorruptFileError, InvalidInputError, NotFoundError
from alance.format.manifest import DATA_DIR
from alance.format.v2.blob import BlobLocation, blob_version, descriptor_field, locate
from alance.io.store import DatasetStore
from alance.io.uri import open_store

T = TypeVar("T")

#: Bytes a small read fetches ahead of the cursor (pylance's default read-ahead too).
DEFAULT_BUFFER_SIZE = 512 * 1024
#: External blob stores opened at once while resolving their sizes.
_EXTERNAL_CONCURRENCY = 8


class BlobFile:
    """One blob, read lazily: ``await read(n)``, ``seek``, ``tell``, ``size()``.

    Reads go to the dataset's store (or, for external blobs, to the store of their URI);
    only the bytes asked for are fetched, plus up to ``buffer_size`` bytes of read-ahead
    for reads smaller than that. Not safe for concurrent reads of one object (each reader
    should take its own :class:`BlobFile`; ``read_range`` leaves the cursor alone).
    """

    def __init__(self, store: DatasetStore, path: str, position: int, size: int, *,
                 buffer_size: int = DEFAULT_BUFFER_SIZE) -> None:
        """A blob of ``size`` bytes at ``position`` of object ``path`` of ``store``."""
        if buffer_size < 0:
            raise InvalidInputError("buffer_size must be >= 0")
        self._store = store
        self._path = path
        self._position = position
        self._size = size
        self._cursor = 0
        self._closed = False
        self._buffer_size = buffer_size
        self._buf = b""
        self._buf_start = 0  # blob offset of self._buf[0]

    def __repr__(self) -> str:
        return f"<BlobFile {self._path} size={self._size}>"

    # -- state (no IO) -----------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The object holding the blob (relative to its store's root)."""
        return self._path

    @property
    def position(self) -> int:
        """Where the blob starts in that object."""
        return self._position

    def size(self) -> int:
        """The blob's size in bytes."""
        return self._size

    def tell(self) -> int:
        """The cursor: the blob offset the next read starts at."""
        self._check_open()
        return self._cursor

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the cursor (as :meth:`io.IOBase.seek`); returns the new position."""
        self._check_open()
        if whence == io.SEEK_SET:
            target = offset
        elif whence == io.SEEK_CUR:
            target = self._cursor + offset
        elif whence == io.SEEK_END:
            target = self._size + offset
        else:
            raise InvalidInputError(f"invalid whence {whence}")
        if target < 0:
            raise InvalidInputError(f"negative seek position {target}")
        self._cursor = target
        return target

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Release the read-ahead buffer; later reads raise ``ValueError``."""
        self._closed = True
        self._buf = b""

    async def __aenter__(self) -> BlobFile:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("I/O operation on a closed blob file")

    # -- reads -------------------------------------------------------------------------------
    async def _fetch(self, start: int, end: int) -> bytes:
        """Blob bytes ``[start, end)`` (within the blob) from the store."""
        if end <= start:
            return b""
        try:
            return await self._store.get_range(self._path, self._position + start,
                                               self._position + end)
        except NotFoundError as exc:
            raise CorruptFileError(f"blob file {self._path} is missing: {exc}") from exc
        except CorruptFileError as exc:
            raise CorruptFileError(f"blob file {self._path} is shorter than its descriptor "
                                   f"says: {exc}") from exc

    async def read_range(self, offset: int, length: int) -> bytes:
        """``length`` bytes from blob offset ``offset`` (clipped at the end of the blob);
        the cursor does not move."""
        self._check_open()
        if offset < 0 or length < 0:
            raise InvalidInputError("offset and length must be >= 0")
        end = min(offset + length, self._size)
        return await self._fetch(min(offset, self._size), end)

    async def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes from the cursor (all the rest if ``size`` < 0)."""
        self._check_open()
        start = min(self._cursor, self._size)
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        if end <= start:
            return b""
        buf_end = self._buf_start + len(self._buf)
        if self._buf_start <= start and end <= buf_end:
            out = self._buf[start - self._buf_start: end - self._buf_start]
        elif end - start < self._buffer_size:
            fetch_end = min(self._size, start + self._buffer_size)
            self._buf = await self._fetch(start, fetch_end)
            self._buf_start = start
            out = self._buf[: end - start]
        else:
            out = await self._fetch(start, end)
        self._cursor = start + len(out)
        return out

    async def readall(self) -> bytes:
        """Everything from the cursor to the end."""
        return await self.read(-1)

    async def readinto(self, buffer: Any) -> int:
        """Read into a writable buffer; returns the number of bytes read (0 at the end)."""
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise InvalidInputError("readinto needs a writable buffer")
        data = await self.read(len(view))
        view[: len(data)] = data
        return len(data)


class BlockingBlobFile(io.RawIOBase):
    """A :class:`BlobFile` as a standard blocking binary file (for :mod:`alance.sync`).

    ``run`` runs a coroutine to completion (alance.sync passes its background loop's).
    Wrap it in :class:`io.BufferedReader` or pass it to anything that reads files.
    """

    def __init__(self, blob: BlobFile,
                 run: Callable[[Coroutine[Any, Any, Any]], Any]) -> None:
        """Wrap ``blob``; ``run`` executes its coroutines."""
        super().__init__()
        self._blob = blob
        self._run = run

    def __repr__(self) -> str:
        return repr(self._blob)

    def readable(self) -> bool:
        """Always True."""
        return True

    def seekable(self) -> bool:
        """Always True."""
        return True

    def size(self) -> int:
        """The blob's size in bytes."""
        return self._blob.size()

    def tell(self) -> int:
        """The cursor."""
        return self._blob.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the cursor; returns the new position."""
        return self._blob.seek(offset, whence)

    def readinto(self, buffer: Any) -> int:
        """Read into a writable buffer; returns the number of bytes read."""
        n: int = self._run(self._blob.readinto(buffer))
        return n

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all the rest if omitted or negative)."""
        data: bytes = self._run(self._blob.read(-1 if size is None else size))
        return data

    def readall(self) -> bytes:
        """Everything from the cursor to the end."""
        return self.read(-1)

    def read_range(self, offset: int, length: int) -> bytes:
        """Bytes of the blob without moving the cursor."""
        data: bytes = self._run(self._blob.read_range(offset, length))
        return data

    def close(self) -> None:
        """Close the blob."""
        self._blob.close()
        super().close()


# -- selecting rows ----------------------------------------------------------------------------
def _selector(indices: Any, ids: Any, addresses: Any) -> tuple[str, np.ndarray]:
    given = [(name, v) for name, v in (("indices", indices), ("ids", ids),
                                       ("addresses", addresses)) if v is not None]
    if len(given) != 1:
        raise InvalidInputError("pass exactly one of indices, ids or addresses")
    name, values = given[0]
    return name, as_row_ids(values)


async def _addresses_of_indices(ctx: ReadContext, idx: np.ndarray) -> np.ndarray:
    """Row addresses of dataset positions (0-based, deleted rows not counted)."""
    fragments = ctx.snapshot.fragments
    live = np.array([live_rows(f) for f in fragments], dtype=np.int64)
    ends = np.cumsum(live)
    total = int(ends[-1]) if len(ends) else 0
    bad = idx[idx >= np.uint64(total)]
    if bad.size:
        raise InvalidInputError(f"row index {int(bad[0])} is out of range: the dataset has "
                                f"{total} rows")
    pos = idx.astype(np.int64)
    which = np.searchsorted(ends, pos, side="right")
    local = pos - (ends - live)[which]
    out = np.zeros(len(pos), dtype=np.uint64)
    for k in np.unique(which).tolist():
        frag = fragments[k]
        mask = which == k
        offsets = local[mask]
        deleted = await ctx.deleted_offsets(frag)
        if deleted is not None and len(deleted):
            alive = np.setdiff1d(np.arange(frag.physical_rows, dtype=np.int64),
                                 deleted.astype(np.int64), assume_unique=True)
            offsets = alive[offsets]
        out[mask] = (np.uint64(frag.id) << np.uint64(32)) | offsets.astype(np.uint64)
    return out


def _owner(fragment: table_pb2.DataFragment, field_id: int) -> table_pb2.DataFile | None:
    for f in fragment.files:
        if field_id in f.fields and field_id != TOMBSTONE_FIELD_ID:
            return f
    return None


async def _locations(ctx: ReadContext, column: str, addresses: np.ndarray,
                     ) -> list[BlobLocation | None]:
    """Where the blob of each addressed row is, in the order of ``addresses``."""
    field = ctx.snapshot.schema.field(column)
    version = blob_version(field)
    if version is None:
        raise InvalidInputError(f"column {column!r} is not a blob column")
    desc = descriptor_field(field)
    by_id = {int(f.id): f for f in ctx.snapshot.fragments}
    frag_ids = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    out: list[BlobLocation | None] = [None] * len(addresses)

    async def one(fid: int) -> None:
        frag = by_id.get(fid)
        mask = frag_ids == fid
        if frag is None:
            raise InvalidInputError(f"row address names fragment {fid}, which is not in "
                                    f"version {ctx.snapshot.version}")
        wanted = offsets[mask]
        if int(wanted.max()) >= int(frag.physical_rows):
            raise InvalidInputError(f"row offset {int(wanted.max())} is past the end of "
                                    f"fragment {fid} ({frag.physical_rows} rows)")
        data_file = _owner(frag, field.id)
        if data_file is None:
            return  # the column was added without data for this fragment: nulls
        uniq, inverse = np.unique(wanted, return_inverse=True)
        batch = await ctx.fragment(frag).read_rows([desc], uniq)
        path = f"{DATA_DIR}/{data_file.path}"
        major, minor = data_file.file_major_version, data_file.file_minor_version
        found = locate(batch.column(0), [path] * len(uniq), v2=version == 2,
                       v1_null_marker=(major, minor) in ((2, 0), (0, 3)))
        for slot, k in zip(np.flatnonzero(mask).tolist(), inverse.ravel().tolist(),
                           strict=True):
            out[slot] = found[k]

    await asyncio.gather(*(one(int(fid)) for fid in np.unique(frag_ids).tolist()))
    return out


def _external_store(uri: str, base: DatasetStore) -> tuple[DatasetStore, str]:
    """The store and object path of an external blob URI (the dataset's storage options)."""
    parsed = urlparse(uri)
    if not parsed.scheme or (len(parsed.scheme) == 1 and os.name == "nt"):
        raise InvalidInputError(f"external blob URI {uri!r} is not absolute")
    head, _, name = uri.rstrip("/").rpartition("/")
    if not name:
        raise CorruptFileError(f"external blob URI {uri!r} names no object")
    options = dict(base.reopen_args[1]) if base.reopen_args else {}
    return open_store(head, options), name


async def take_blobs(ctx: ReadContext, column: str, *, indices: Any = None, ids: Any = None,
                     addresses: Any = None, buffer_size: int = DEFAULT_BUFFER_SIZE,
                     ) -> list[BlobFile | None]:
    """One lazy :class:`BlobFile` per selected row of blob column ``column`` (``None`` where
    the blob is null), in the order given. Select rows by exactly one of ``indices``
    (dataset positions), ``ids`` (``_rowid``) or ``addresses`` (``_rowaddr``)."""
    kind, values = _selector(indices, ids, addresses)
    if kind == "indices":
        addr = await _addresses_of_indices(ctx, values)
    elif kind == "ids":
        addr, found = await row_addresses_of(ctx, values)
        if not bool(found.all()):
            missing = values[~found][:5].tolist()
            raise InvalidInputError(f"row ids {missing} name no row of version "
                                    f"{ctx.snapshot.version}")
    else:
        addr = values
    if not len(addr):
        if blob_version(ctx.snapshot.schema.field(column)) is None:
            raise InvalidInputError(f"column {column!r} is not a blob column")
        return []
    locations = await _locations(ctx, column, addr)
    sem = asyncio.Semaphore(_EXTERNAL_CONCURRENCY)

    async def make(loc: BlobLocation | None) -> BlobFile | None:
        if loc is None:
            return None
        if loc.uri is None:
            assert loc.path is not None and loc.size is not None
            return BlobFile(ctx.store, loc.path, loc.position, loc.size,
                            buffer_size=buffer_size)
        store, path = _external_store(loc.uri, ctx.store)
        size = loc.size
        if size is None:
            async with sem:
                try:
                    size = (await store.head(path)).size - loc.position
                except NotFoundError as exc:
                    raise CorruptFileError(f"external blob {loc.uri} is missing") from exc
        return BlobFile(store, path, loc.position, size, buffer_size=buffer_size)

    return list(await asyncio.gather(*(make(loc) for loc in locations)))


def blocking(blobs: Sequence[BlobFile | None],
             run: Callable[[Coroutine[Any, Any, Any]], Any]) -> list[BlockingBlobFile | None]:
    """The blocking twins of ``blobs`` (for :mod:`alance.sync`)."""
    return [None if b is None else BlockingBlobFile(b, run) for b in blobs]


__all__ = ["DEFAULT_BUFFER_SIZE", "BlobFile", "BlockingBlobFile", "blocking", "take_blobs"]

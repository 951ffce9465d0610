"""Re-pointing indices at the rows a compaction moved (as pylance 14 does).

An index that holds row *addresses* of rewritten fragments (every BTREE, BITMAP, LABEL_LIST,
IVF_FLAT and IVF_PQ index without stable row ids; with them, BTREE indices of
``index_version`` 1) is copied under a new uuid with each address replaced by the row's new
address and deleted rows left out. The Rewrite transaction lists it as a rewritten index (old
uuid, new uuid, details, version, files), and applying it moves the index's fragment bitmap
to the new fragments (:func:`alance.transaction.indices.apply_rewrite`). Indices holding
stable row ids need no new files: their bitmaps move. Other kinds (zone maps, full-text
indices...) are left as they are: the rewritten fragments become unindexed, which is what
Lance does with an index it cannot remap.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2, transaction_pb2
from alance.dataset.fragments.deletions import WrittenFiles
from alance.dataset.fragments.read import ReadContext
from alance.dataset.maintenance.index_files import write_index_file
from alance.dataset.maintenance.row_remap import Group, RowRemap, row_remap
from alance.dataset.query.indices import bitmap, btree, ivf
from alance.dataset.query.indices.reader import IndexReader, records_row_ids
from alance.dataset.query.indices.types import (
    BITMAP_URL,
    BTREE_URL,
    LABEL_LIST_URL,
    index_dir,
    type_url,
)
from alance.dataset.versions.snapshot import Snapshot
from alance.file import LanceFileReader
from alance.io.store import DatasetStore
from alance.transaction.indices import is_system_index, read_bitmap

RewrittenIndex = transaction_pb2.Transaction.Rewrite.RewrittenIndex
Index = table_pb2.IndexMetadata


def needs_remap(index: Index, manifest: table_pb2.Manifest, old_ids: set[int]) -> bool:
    """Whether ``index`` holds addresses of rows in ``old_ids`` that alance can remap."""
    if is_system_index(index) or index.HasField("base_id"):
        return False
    covered = read_bitmap(index)
    if covered is None or not (set(covered) & old_ids):
        return False
    if records_row_ids(index, manifest):
        return False
    return type_url(index) in (BTREE_URL, BITMAP_URL, LABEL_LIST_URL) or (
        ivf.is_vector_index(index) and ivf.vector_kind(index) in ("IVF_FLAT", "IVF_PQ"))


async def _btree(reader: IndexReader, index: Index, remap: RowRemap,
                 out: str) -> list[tuple[str, int]] | None:
    data = await reader.table(index, btree.DATA_FILE)
    lookup = await reader.table(index, btree.LOOKUP_FILE)
    new, kept = remap.apply(data.column("ids").to_numpy().astype(np.uint64))
    values = data.column("values").combine_chunks().filter(kept)
    data, lookup = btree.build_tables(values, new[kept], btree.page_size(lookup.schema.metadata))
    store = reader.ctx.store
    return [(btree.DATA_FILE, await write_index_file(store, f"{out}/{btree.DATA_FILE}", data)),
            (btree.LOOKUP_FILE,
             await write_index_file(store, f"{out}/{btree.LOOKUP_FILE}", lookup))]


async def _buffers(file: LanceFileReader) -> list[bytes]:
    """Global buffers 1.. of an index file (0 is the schema)."""
    return [await file.read_global_buffer(i) for i in range(1, len(file._file.global_buffers))]


async def _bitmap(reader: IndexReader, index: Index, remap: RowRemap,
                  out: str) -> list[tuple[str, int]] | None:
    file = await reader.open(index, bitmap.FILE)
    meta = dict(file.schema.metadata or {})
    buffers = await _buffers(file)
    rows = {int(f.id): int(f.physical_rows) for f in reader.ctx.snapshot.fragments}
    table = bitmap.remap_table(await reader.table(index, bitmap.FILE), remap.apply, rows)
    nulls = meta.get(bitmap.LABEL_LIST_NULLS.encode())
    if nulls is not None:  # LABEL_LIST: the rows whose list is null, as a row-address map
        number = int(nulls)
        buffers[number - 1] = bitmap.remap_map(buffers[number - 1], remap.apply, rows)
    return [(bitmap.FILE, await write_index_file(
        reader.ctx.store, f"{out}/{bitmap.FILE}", table.replace_schema_metadata(None),
        metadata={k.decode(): v.decode() for k, v in meta.items()}, buffers=buffers))]


async def write_ivf_segment(reader: IndexReader, index: Index, table: pa.Table,
                            lengths: np.ndarray, out: str) -> list[tuple[str, int]]:
    """Write an IVF segment under ``out`` that shares ``index``'s model: its ``index.idx``
    (centroids) copied, and ``table`` (storage rows in partition order, ``lengths`` rows per
    partition) as ``auxiliary.idx`` with ``index``'s storage metadata and PQ codebook."""
    storage = await reader.open(index, ivf.STORAGE_FILE)
    meta = dict(storage.schema.metadata or {})
    number = ivf.buffer_number(meta)
    buffers = await _buffers(storage)
    buffers[number - 1] = ivf.with_partition_lengths(ivf.parse_ivf(buffers[number - 1]),
                                                     lengths)
    store = reader.ctx.store
    size = await write_index_file(
        store, f"{out}/{ivf.STORAGE_FILE}", table.replace_schema_metadata(None),
        metadata={k.decode(): v.decode() for k, v in meta.items()}, buffers=buffers)
    head = await reader.open(index, ivf.INDEX_FILE)  # (maybe under another base path)
    data = await head._store.get(head._name)
    await store.put(f"{out}/{ivf.INDEX_FILE}", data)
    return [(ivf.STORAGE_FILE, size), (ivf.INDEX_FILE, len(data))]


async def is_ivf_segment(reader: IndexReader, index: Index) -> bool:
    """Whether a vector index segment is IVF_FLAT / IVF_PQ (not another sub-index)."""
    head = await reader.open(index, ivf.INDEX_FILE)
    return ivf.index_metric(dict(head.schema.metadata or {}))[0] in ("IVF_FLAT", "IVF_PQ")


async def _ivf(reader: IndexReader, index: Index, remap: RowRemap,
               out: str) -> list[tuple[str, int]] | None:
    if not await is_ivf_segment(reader, index):
        return None  # another sub-index (HNSW...): left unremapped
    storage = await reader.open(index, ivf.STORAGE_FILE)
    meta = dict(storage.schema.metadata or {})
    message = ivf.parse_ivf(await storage.read_global_buffer(ivf.buffer_number(meta)))
    transposed = bool(ivf.storage_params(meta).get("transposed", False))
    table, lengths = ivf.remap_storage(await reader.table(index, ivf.STORAGE_FILE),
                                       np.asarray(message.lengths, dtype=np.int64),
                                       remap.apply, transposed)
    return await write_ivf_segment(reader, index, table, lengths, out)


#: Index type URL -> how its files are remapped, and their names (vector indices: _ivf).
_JOBS = {BTREE_URL: (_btree, (btree.DATA_FILE, btree.LOOKUP_FILE)),
         BITMAP_URL: (_bitmap, (bitmap.FILE,)), LABEL_LIST_URL: (_bitmap, (bitmap.FILE,))}


async def remap_indices(store: DatasetStore, snapshot: Snapshot, groups: Sequence[Group],
                        written: WrittenFiles) -> list[RewrittenIndex]:
    """Write remapped copies of the indices of ``snapshot`` that hold addresses of the
    rewritten rows; returns their entries for the Rewrite transaction. The paths written are
    added to ``written`` (to remove if the rewrite is not committed)."""
    old_ids = {int(f.id) for old, _ in groups for f in old}
    targets = [ix for ix in snapshot.manifest_file.indices
               if needs_remap(ix, snapshot.manifest, old_ids)]
    if not targets:
        return []
    ctx = ReadContext(store, snapshot)
    reader = IndexReader(ctx)
    remap = await row_remap(ctx, groups)
    out = []
    for index in targets:
        change = RewrittenIndex()
        change.old_id.CopyFrom(index.uuid)
        change.new_id.uuid = _uuid.uuid4().bytes
        directory = index_dir(Index(uuid=change.new_id))
        job, names = _JOBS.get(type_url(index), (_ivf, (ivf.STORAGE_FILE, ivf.INDEX_FILE)))
        for name in names:
            written.add(f"{directory}/{name}")
        files = await job(reader, index, remap, directory)
        if files is None:
            continue
        for name, size in files:
            change.new_index_files.add(path=name, size_bytes=size)
        if index.HasField("index_details"):
            change.new_index_details.CopyFrom(index.index_details)
        change.new_index_version = int(index.index_version)
        out.append(change)
    return out

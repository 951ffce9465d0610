"""Writing index files (Lance 2.2 files under ``_indices/{uuid}/``) through the dataset's store:
shared by index builds, index remapping after compaction and index optimisation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from alance.file import LanceFileWriter
from alance.io.store import DatasetStore


async def write_index_file(store: DatasetStore, path: str, table: pa.Table, *,
                           metadata: Mapping[str, str] | None = None,
                           buffers: Sequence[bytes] = ()) -> int:
    """Write ``table`` as one index file with schema ``metadata`` and global ``buffers``
    (numbered from 1, in order); returns the file's size in bytes."""
    writer = LanceFileWriter(path, table.schema, version="2.2", _store=store, _name=path)
    for number, data in enumerate(buffers, start=1):
        if writer.add_global_buffer(data) != number:
            raise AssertionError("global buffers must be numbered from 1")
    for key, value in (metadata or {}).items():
        writer.add_schema_metadata(key, value)
    if table.num_rows:
        for batch in table.to_batches(max_chunksize=65536):
            await writer.write_batch(batch)
    else:
        await writer.write_batch(pa.RecordBatch.from_pylist([], schema=table.schema))
    await writer.close()
    return int((await store.head(path)).size)

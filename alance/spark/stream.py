"""The ``alance`` streaming sink: ``df.writeStream.format("alance")``.

Each micro-batch is written by Spark's tasks (every task writes its rows into new fragments
and reports them, nothing visible) and committed by the driver as ONE Append whose
transaction carries the stream's id and the batch id (transaction properties
:data:`STREAM_KEY`, :data:`BATCH_KEY`). Before committing batch ``n`` the driver looks up the
last batch the stream committed; if it is ``n`` or later (Spark replays the last batch after
a restart when it had not recorded the commit yet) the batch is not committed again. So every
micro-batch lands exactly once, provided one run of the query writes the stream at a time
(Spark refuses to start a second run on the same checkpoint).

The stream's id is the ``stream_id`` option, else the query's ``checkpointLocation``.
Files of task attempts Spark dropped, and of a replayed batch that is skipped, are never
referenced by any version (remove them with ``cleanup_old_versions`` /
``delete_unverified``-style cleanup).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from alance import sync
from alance.errors import (
    AlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
)

#: Transaction property: the id of the stream that committed the version.
STREAM_KEY = "alance.spark.stream_id"
#: Transaction property: the micro-batch id the version holds.
BATCH_KEY = "alance.spark.batch_id"
#: How many transactions are read at once when looking for a stream's last batch.
_LOOKUP_CHUNK = 16


def stream_id(own: Mapping[str, Any]) -> str:
    """The stream's identity: the ``stream_id`` option, else ``checkpointLocation``."""
    value = own.get("stream_id") or own.get("checkpointlocation")
    if not value:
        raise InvalidInputError("the alance streaming sink needs option('stream_id', ...) "
                                "or option('checkpointLocation', ...): it keys exactly-once "
                                "commits by stream and batch id")
    return str(value)


def last_committed_batch(ds: sync.LanceDataset, stream: str) -> int | None:
    """The newest batch id ``stream`` committed to ``ds`` (``None``: none yet)."""
    version = ds.version
    while version >= 1:
        chunk = min(_LOOKUP_CHUNK, version)
        at = ds.checkout_version(version) if version != ds.version else ds
        for txn in at.get_transactions(chunk):
            props = (getattr(txn, "transaction_properties", None) or {}) if txn else {}
            if props.get(STREAM_KEY) == stream and BATCH_KEY in props:
                return int(props[BATCH_KEY])
        version -= chunk
    return None


@dataclass
class StreamFragments(WriterCommitMessage):
    """A streaming task's commit message: the fragments it wrote (uncommitted)."""

    fragments: list[Any] = field(default_factory=list)


@dataclass
class AlanceStreamWriter(DataSourceStreamArrowWriter):
    """Tasks write fragments; the driver commits each micro-batch once (keyed by batch id)."""

    uri: str
    schema: pa.Schema
    storage_options: dict[str, Any]
    stream: str
    write_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, uri: str, schema: pa.Schema, storage_options: Mapping[str, Any],
              stream: str, *, data_storage_version: str | None = None,
              max_rows_per_file: int | None = None,
              max_rows_per_group: int | None = None) -> AlanceStreamWriter:
        """Check (or create, empty) the dataset when the query starts."""
        storage = dict(storage_options)
        try:
            ds = sync.open_dataset(uri, storage_options=storage)
        except DatasetNotFoundError:
            try:
                ds = sync.write_dataset(schema.empty_table(), uri, mode="create",
                                        storage_options=storage,
                                        data_storage_version=data_storage_version)
            except AlreadyExistsError:
                ds = sync.open_dataset(uri, storage_options=storage)
        have = {n.lower() for n in ds.schema.names}
        theirs = {n.lower() for n in schema.names}
        if have != theirs:
            raise SchemaMismatchError(f"the stream's columns {sorted(theirs)} do not match the "
                                      f"dataset's {sorted(have)}")
        options: dict[str, Any] = {}
        if max_rows_per_file is not None:
            options["max_rows_per_file"] = max_rows_per_file
        if max_rows_per_group is not None:
            options["max_rows_per_group"] = max_rows_per_group
        return cls(uri, ds.schema, storage, stream, options)

    def _conformed(self, iterator: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        names = {n.lower(): n for n in self.schema.names}
        for batch in iterator:
            if batch.num_rows == 0:
                continue
            renamed = batch.rename_columns([names.get(n.lower(), n)
                                            for n in batch.schema.names])
            table = pa.Table.from_batches([renamed]).select(self.schema.names)
            yield from table.cast(self.schema, safe=True).to_batches()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Write this task's rows of the micro-batch into new fragments (nothing visible)."""
        batches = self._conformed(iterator)
        first = next(batches, None)
        if first is None:
            return StreamFragments([])

        def rows() -> Iterator[pa.RecordBatch]:
            yield first
            yield from batches

        reader = pa.RecordBatchReader.from_batches(self.schema, rows())
        fragments = sync.write_fragments(reader, self.uri, self.schema, mode="append",
                                         storage_options=self.storage_options,
                                         **self.write_options)
        return StreamFragments(list(fragments))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit the micro-batch as one Append, unless the stream committed it already."""
        fragments = [f for m in messages if isinstance(m, StreamFragments)
                     for f in m.fragments]
        if not fragments:
            return
        ds = sync.open_dataset(self.uri, storage_options=self.storage_options)
        last = last_committed_batch(ds, self.stream)
        if last is not None and last >= batchId:
            return  # a replay of a batch that is in the table already
        txn = sync.Transaction(ds.version, sync.LanceOperation.Append(fragments),
                               transaction_properties={STREAM_KEY: self.stream,
                                                       BATCH_KEY: str(batchId)})
        sync.LanceDataset.commit(self.uri, txn, storage_options=self.storage_options)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing becomes visible; the tasks' files stay unreferenced."""

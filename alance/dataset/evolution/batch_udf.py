"""Column functions with a declared schema and a checkpoint (pylance's ``lance.batch_udf``).

``@batch_udf(output_schema=..., checkpoint_file=...)`` wraps a function from a record batch
to new columns (a RecordBatch, Table, dict of arrays or pandas DataFrame) for
``add_columns`` / ``LanceFragment.merge_columns``. Every result must have the declared
schema (or, without one, the first result's). With a ``checkpoint_file`` (SQLite), each
result is saved under a digest of its input batch, so rerunning a failed ``add_columns``
computes only the batches that were not done; the file is removed once the columns are
committed.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from alance.errors import InvalidInputError

__all__ = ["BatchUDF", "batch_udf"]


def _as_batch(result: Any) -> pa.RecordBatch:
    if isinstance(result, pa.RecordBatch):
        return result
    if isinstance(result, pa.Table):
        return result.combine_chunks().to_batches()[0] if result.num_rows else \
            pa.RecordBatch.from_pylist([], schema=result.schema)
    if isinstance(result, dict):
        return pa.RecordBatch.from_pydict(result)
    if hasattr(result, "columns") and hasattr(result, "dtypes"):
        return pa.RecordBatch.from_pandas(result, preserve_index=False)
    raise InvalidInputError(f"a batch UDF must return a RecordBatch, Table, dict of arrays "
                            f"or pandas DataFrame, not {type(result).__name__}")


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def _from_ipc(data: bytes) -> pa.RecordBatch:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_next_batch()


class BatchUDF:
    """A column function with a schema and an optional checkpoint (see the module)."""

    def __init__(self, func: Callable[[pa.RecordBatch], Any],
                 output_schema: pa.Schema | None = None,
                 checkpoint_file: str | os.PathLike[str] | None = None) -> None:
        self.func = func
        self.output_schema = output_schema
        self.checkpoint_file = None if checkpoint_file is None else os.fspath(checkpoint_file)
        self._lock = threading.Lock()
        self.__doc__ = getattr(func, "__doc__", None)
        self.__name__ = getattr(func, "__name__", "batch_udf")

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        key = hashlib.sha256(_ipc(batch)).hexdigest() if self.checkpoint_file else None
        if key is not None:
            cached = self._cached(key)
            if cached is not None:
                return cached
        result = _as_batch(self.func(batch))
        with self._lock:
            if self.output_schema is None:
                self.output_schema = result.schema
        if not result.schema.equals(self.output_schema):
            raise InvalidInputError(
                "Output schema of function does not match the expected schema: got "
                f"{result.schema}, expected {self.output_schema}")
        if key is not None:
            self._save(key, result)
        return result

    # -- the checkpoint ------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        assert self.checkpoint_file is not None
        db = sqlite3.connect(self.checkpoint_file)
        db.execute("CREATE TABLE IF NOT EXISTS batches (key TEXT PRIMARY KEY, data BLOB)")
        return db

    def _cached(self, key: str) -> pa.RecordBatch | None:
        with self._lock:
            db = self._connect()
            try:
                row = db.execute("SELECT data FROM batches WHERE key = ?", (key,)).fetchone()
            finally:
                db.close()
        return None if row is None else _from_ipc(row[0])

    def _save(self, key: str, result: pa.RecordBatch) -> None:
        with self._lock:
            db = self._connect()
            try:
                with db:
                    db.execute("INSERT OR REPLACE INTO batches VALUES (?, ?)",
                               (key, _ipc(result)))
            finally:
                db.close()

    def finished(self) -> None:
        """The columns are committed: the checkpoint is no longer needed."""
        if self.checkpoint_file is not None and os.path.exists(self.checkpoint_file):
            os.remove(self.checkpoint_file)


def batch_udf(output_schema: pa.Schema | None = None,
              checkpoint_file: str | os.PathLike[str] | None = None,
              ) -> Callable[[Callable[[pa.RecordBatch], Any]], BatchUDF]:
    """Decorator making a :class:`BatchUDF` of a function (see the module documentation)."""
    def wrap(func: Callable[[pa.RecordBatch], Any]) -> BatchUDF:
        return BatchUDF(func, output_schema, checkpoint_file)
    return wrap

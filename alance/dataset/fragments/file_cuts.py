"""Where ``max_bytes_per_file`` ends a 2.x data file, as pylance decides it.

pylance ends a file once the bytes its writer has *flushed* reach ``max_bytes_per_file``,
checked after each batch it writes. Its 2.x writer buffers each column until more than
8 MiB (unencoded) have accumulated, then encodes and flushes them as a page; so a small limit
still gives files of about one 8 MiB page per column, cut at a batch boundary. alance's writer
emits pages as it goes, so the real bytes written would cut files much sooner (a file per
batch). :class:`FlushedBytes` follows pylance's buffering instead, so files end where
pylance's would (what the limit means to users: "files of about this size, at least a page").

Pure arithmetic over the batches' sizes; the data itself is written as usual.
"""

from __future__ import annotations

import pyarrow as pa

#: Unencoded bytes pylance's 2.x writer buffers per column before flushing a page.
CACHE_BYTES_PER_COLUMN = 8 * 1024 * 1024


class FlushedBytes:
    """Bytes pylance's writer would have flushed to the current file (one per file).

    ``unit_rows``: the rows of each batch pylance would write at a time (``None``: each
    batch given to :meth:`take` as one).
    """

    def __init__(self, limit: int, unit_rows: int | None = None,
                 cache_bytes: int = CACHE_BYTES_PER_COLUMN) -> None:
        self.limit = limit
        self.unit_rows = unit_rows
        self.cache_bytes = cache_bytes
        self.flushed = 0.0
        self.rows = 0
        self.full = False
        self._buffered: list[float] = []

    def take(self, batch: pa.RecordBatch) -> int:
        """How many leading rows of ``batch`` go to this file: all of them, or fewer when the
        limit is reached inside the batch; :attr:`full` tells whether the file ends after
        them."""
        n = batch.num_rows
        if n == 0 or self.full:
            return 0
        per_row = [c.nbytes / n for c in batch.columns]
        if len(self._buffered) != len(per_row):
            self._buffered = [0.0] * len(per_row)
        unit = self.unit_rows or n
        done = 0
        while done < n:
            step = min(unit - self.rows % unit, n - done)
            for i, width in enumerate(per_row):
                self._buffered[i] += width * step
                if self._buffered[i] >= self.cache_bytes:
                    self.flushed += self._buffered[i]
                    self._buffered[i] = 0.0
            done += step
            self.rows += step
            if self.flushed >= self.limit:
                self.full = True
                return done
        return n


__all__ = ["CACHE_BYTES_PER_COLUMN", "FlushedBytes"]

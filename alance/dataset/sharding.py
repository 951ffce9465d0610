"""One worker's share of a dataset's rows (pylance's ``ShardedBatchIterator``).

Worker ``rank`` of ``world_size`` reads every ``world_size``-th fragment starting at
``rank`` (``granularity="fragment"``, the cheaper), or every ``world_size``-th run of
``batch_size`` rows (``"batch"``): together the workers read each row exactly once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Literal

import numpy as np
import pyarrow as pa

from alance.dataset.api import LanceDataset
from alance.errors import InvalidInputError, UnsupportedFeatureError

__all__ = ["sharded_batches"]

Granularity = Literal["fragment", "batch"]


async def sharded_batches(dataset: LanceDataset, rank: int, world_size: int, *,
                          columns: Sequence[str] | Mapping[str, str] | None = None,
                          batch_size: int = 10 * 1024, granularity: Granularity = "fragment",
                          with_row_id: bool = False) -> AsyncIterator[pa.RecordBatch]:
    """The batches of shard ``rank`` of ``world_size`` (see the module documentation)."""
    if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int)
            and 0 <= rank < world_size):
        raise InvalidInputError(f"rank must be in 0..world_size-1 and world_size >= 1; got "
                                f"rank={rank!r}, world_size={world_size!r}")
    if batch_size < 1:
        raise InvalidInputError(f"batch_size must be positive, not {batch_size}")
    if granularity == "fragment":
        fragments = dataset.get_fragments()
        for fragment in fragments[rank::world_size]:
            async for batch in fragment.to_batches(columns, batch_size=batch_size,
                                                   with_row_id=with_row_id):
                yield batch
        return
    if granularity != "batch":
        raise InvalidInputError(f"granularity must be 'fragment' or 'batch', not "
                                f"{granularity!r}")
    if with_row_id:
        raise UnsupportedFeatureError("with_row_id needs granularity='fragment'")
    total = await dataset.count_rows()
    for start in range(rank * batch_size, total, world_size * batch_size):
        rows = np.arange(start, min(start + batch_size, total), dtype=np.int64)
        table = await dataset.take(rows, columns)
        for batch in table.combine_chunks().to_batches():
            yield batch

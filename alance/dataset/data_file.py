"""Async reading of one data file: drives the pure format reader's IO requests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from alance.format.schema import LanceSchema
from alance.io.store import DatasetStore


class DataFileReader:
    """Placeholder until the legacy reader lands."""

    row_group_bounds: np.ndarray

    @classmethod
    async def open(cls, store: DatasetStore, path: str, schema: LanceSchema,
                   size: int | None) -> DataFileReader:
        raise NotImplementedError

    async def read_range(self, schema: LanceSchema, start: int, end: int) -> pa.RecordBatch:
        raise NotImplementedError

    async def read_rows(self, schema: LanceSchema, rows: np.ndarray) -> pa.RecordBatch:
        raise NotImplementedError

    def _unused(self) -> Any: ...

"""What the ranked searches (nearest-neighbour and full-text) share: their result's columns
and schema, and the ways to read it (one table, batches, a writer's source, a row count)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset

ROW_ID = "_rowid"
ROW_ADDRESS = "_rowaddr"


class RankedSearch:
    """A search whose result is the projected columns, then the ranking column ``_RANK``
    (``float32``; unless hidden), then ``_rowid``/``_rowaddr`` when asked for by flag.
    Subclasses set the attributes and implement :meth:`_result` and :meth:`explain_plan`."""

    #: The ranking column (``_distance``, ``_score``).
    _RANK = ""
    dataset: LanceDataset
    projection: list[str]
    rank_shown: bool
    with_row_id: bool
    with_row_address: bool
    batch_size: int | None

    async def _result(self) -> pa.Table:
        """The result rows (any superset of the output columns)."""
        raise NotImplementedError

    def explain_plan(self, verbose: bool = False) -> str:
        """The search as text."""
        raise NotImplementedError

    def _order(self) -> list[str]:
        out = [n for n in self.projection if n != self._RANK or self.rank_shown]
        if self.rank_shown and self._RANK not in out:
            out.append(self._RANK)
        if self.with_row_id and ROW_ID not in out:
            out.append(ROW_ID)
        if self.with_row_address and ROW_ADDRESS not in out:
            out.append(ROW_ADDRESS)
        return out

    @property
    def output_schema(self) -> pa.Schema:
        """The schema of the result."""
        base = self.dataset.schema
        fields = []
        for name in self._order():
            if name == self._RANK:
                fields.append(pa.field(self._RANK, pa.float32()))
            elif name in (ROW_ID, ROW_ADDRESS):
                fields.append(pa.field(name, pa.uint64()))
            else:
                fields.append(base.field(name))
        return pa.schema(fields)

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the result (pylance's name)."""
        return self.output_schema

    @property
    def dataset_schema(self) -> pa.Schema:
        """The schema of the dataset version searched."""
        return self.dataset.schema

    async def to_table(self) -> pa.Table:
        """The result, best first."""
        table = (await self._result()).select(self._order())
        return table.cast(self.output_schema) if not table.schema.equals(
            self.output_schema) else table

    def write_source(self) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
        """The schema and batches a writer takes when this search is passed as data."""
        return self.output_schema, self.to_batches()

    async def to_batches(self) -> AsyncIterator[pa.RecordBatch]:
        """The result as record batches."""
        table = await self.to_table()
        for batch in table.to_batches(max_chunksize=self.batch_size or None):
            yield batch

    async def count_rows(self) -> int:
        """How many rows the search returns."""
        return (await self._result()).num_rows

    def explain(self) -> str:
        """The search as text."""
        return self.explain_plan()

    async def analyze_plan(self) -> str:
        """Run the search and describe it."""
        rows = await self.count_rows()
        return f"{self.explain_plan()}\n  metrics: output_rows={rows}"


__all__ = ["ROW_ADDRESS", "ROW_ID", "RankedSearch"]

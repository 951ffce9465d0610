"""Dataset statistics (pylance's ``ds.stats``) and the ``ds.optimize`` namespace.

``dataset_stats`` comes from the manifest alone (fragments, deletion counts, small files).
``data_stats`` adds up, per field, the bytes its pages take in every data file, from the
files' metadata (opened once per version, like any read).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from alance.dataset.fragments.read import TOMBSTONE_FIELD_ID, ReadContext
from alance.dataset.versions.auto_cleanup import AUTO_CLEANUP_INTERVAL, AUTO_CLEANUP_OLDER_THAN
from alance.errors import InvalidInputError
from alance.format.v2.reader import V2FileReader

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset
    from alance.dataset.maintenance.compaction_plan import CompactionResult

#: Data files opened at once while gathering statistics.
PARALLEL_OPENS = 16


class DatasetStats(TypedDict):
    """What :meth:`LanceStats.dataset_stats` returns (pylance's keys)."""

    num_deleted_rows: int
    num_fragments: int
    num_small_files: int


@dataclass(frozen=True)
class FieldStatistics:
    """Bytes one top-level field takes on disk (compressed, all data files)."""

    id: int
    bytes_on_disk: int


@dataclass(frozen=True)
class DataStatistics:
    """Per-field statistics, in schema order."""

    fields: list[FieldStatistics]


class LanceStats:
    """Statistics of one dataset version (``ds.stats``)."""

    def __init__(self, ctx: ReadContext) -> None:
        self._ctx = ctx

    async def dataset_stats(self, max_rows_per_group: int = 1024) -> DatasetStats:
        """Deleted rows, fragments, and fragments smaller than one row group."""
        fragments = self._ctx.snapshot.fragments
        deleted = sum(int(f.deletion_file.num_deleted_rows) for f in fragments
                      if f.HasField("deletion_file"))
        small = sum(1 for f in fragments if int(f.physical_rows) < max_rows_per_group)
        return {"num_deleted_rows": deleted, "num_fragments": len(fragments),
                "num_small_files": small}

    async def index_stats(self, index_name: str) -> dict[str, Any]:
        """Statistics of one index, as pylance's ``stats.index_stats``."""
        from alance.dataset.maintenance.indices import index_stats
        return await index_stats(self._ctx, index_name)

    async def data_stats(self) -> DataStatistics:
        """Bytes on disk of every field (nested fields listed on their own, in schema order,
        as pylance lists them). v0.1/v0.2 files do not record page sizes: their fields
        count 0 bytes, as in pylance."""
        ctx = self._ctx
        schema = ctx.snapshot.schema
        totals = dict.fromkeys((g.id for g in schema.walk()), 0)
        sem = asyncio.Semaphore(PARALLEL_OPENS)

        async def measure(data_file: Any) -> dict[int, int]:
            version = (data_file.file_major_version, data_file.file_minor_version)
            if version < (2, 0) and version != (0, 3):
                return {}
            ids = [i for i in data_file.fields if i != TOMBSTONE_FIELD_ID]
            async with sem:
                reader = await ctx.data_file(data_file, schema.with_ids(ids))
            inner = reader._reader
            return _bytes_per_field(inner) if isinstance(inner, V2FileReader) else {}

        parts = await asyncio.gather(*(measure(df) for frag in ctx.snapshot.fragments
                                       for df in frag.files))
        for part in parts:
            for fid, n in part.items():
                if fid in totals:
                    totals[fid] += n
        return DataStatistics([FieldStatistics(fid, n) for fid, n in totals.items()])


def _bytes_per_field(reader: V2FileReader) -> dict[int, int]:
    """Page and column buffer bytes of each field id held by one opened 2.x data file."""
    out: dict[int, int] = {}
    file = reader.file
    for fid, col in reader.columns.items():
        if col is None or col < 0 or not 0 <= col < file.num_columns:
            continue
        info = file.column(col)
        size = sum(s for page in info.pages for _, s in page.buffers)
        size += sum(s for _, s in info.buffers)
        out[fid] = out.get(fid, 0) + size
    return out


class DatasetOptimizer:
    """``ds.optimize``: maintenance that rewrites data (pylance's namespace)."""

    def __init__(self, dataset: LanceDataset) -> None:
        self._dataset = dataset

    async def compact_files(self, **options: Any) -> CompactionResult:
        """:meth:`LanceDataset.compact_files` (same options and result)."""
        return await self._dataset.compact_files(**options)

    async def optimize_indices(self, **options: Any) -> LanceDataset:
        """:meth:`LanceDataset.optimize_indices` (same options)."""
        return await self._dataset.optimize_indices(**options)

    async def enable_auto_cleanup(self, auto_cleanup_config: Mapping[str, int],
                                  ) -> LanceDataset:
        """Turn on automatic cleanup (pylance's ``{"interval", "older_than_seconds"}``):
        a config update; returns the new version."""
        try:
            interval = auto_cleanup_config["interval"]
            seconds = auto_cleanup_config["older_than_seconds"]
        except (KeyError, TypeError) as exc:
            raise InvalidInputError("auto cleanup needs 'interval' and 'older_than_seconds'"
                                    f": {auto_cleanup_config!r}") from exc
        result = await self._dataset.update_config({AUTO_CLEANUP_INTERVAL: str(interval),
                                                    AUTO_CLEANUP_OLDER_THAN: f"{seconds}s"})
        return result.dataset  # type: ignore[no-any-return]

    async def disable_auto_cleanup(self) -> LanceDataset:
        """Turn automatic cleanup off (removes its config keys); returns the new version."""
        return await self._dataset.delete_config_keys([AUTO_CLEANUP_INTERVAL,
                                                       AUTO_CLEANUP_OLDER_THAN])


__all__ = ["DataStatistics", "DatasetOptimizer", "DatasetStats", "FieldStatistics",
           "LanceStats"]

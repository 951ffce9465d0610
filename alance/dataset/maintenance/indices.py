"""The index methods of :class:`alance.LanceDataset` (a mixin: listing, describing and
statistics of indices, creating and dropping them; the blocking twins derive from these)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alance.dataset.fragments.read import ReadContext, live_rows
from alance.dataset.query.indices.describe import (
    IndexDescription,
    covered_fragments,
    describe,
    list_entries,
    user_indices,
)
from alance.dataset.query.indices.ivf import is_vector_index, vector_kind
from alance.dataset.query.indices.ivf_reader import segment_stats
from alance.dataset.query.indices.reader import index_reader
from alance.dataset.query.indices.types import type_name
from alance.errors import IndexNotFoundError, InvalidInputError

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset


def _describe(ctx: ReadContext) -> list[IndexDescription]:
    snap = ctx.snapshot
    names = {int(f.id): f.name for f in snap.schema.fields}
    return describe(snap.manifest_file.indices, list(snap.fragments), names)


async def index_stats(ctx: ReadContext, name: str) -> dict[str, Any]:
    """pylance's ``stats.index_stats(name)`` dict."""
    snap = ctx.snapshot
    segments = user_indices(snap.manifest_file.indices).get(name)
    if not segments:
        raise IndexNotFoundError(f'Index "{name}" not found')
    reader = index_reader(ctx)
    per_segment = [await (segment_stats(reader, ix) if is_vector_index(ix)
                          else reader.index_stats(ix)) for ix in segments]
    fragments = list(snap.fragments)
    covered = {int(f.id) for ix in segments for f in covered_fragments(ix, fragments)}
    indexed_rows = sum(live_rows(f) for f in fragments if int(f.id) in covered)
    unindexed = [f for f in fragments if int(f.id) not in covered]
    created = [int(ix.created_at) for ix in segments if ix.HasField("created_at")]
    return {
        "index_type": vector_kind(segments[0]) or type_name(segments[0]),
        "name": name,
        "num_indices": len(segments),
        "num_segments": len(segments),
        "indices": per_segment,
        "segments": per_segment,
        "num_indexed_fragments": len(covered),
        "num_indexed_rows": indexed_rows,
        "num_unindexed_fragments": len(unindexed),
        "num_unindexed_rows": sum(live_rows(f) for f in unindexed),
        "num_indexed_rows_per_delta": [
            sum(live_rows(f) for f in covered_fragments(ix, fragments)) for ix in segments],
        "updated_at_timestamp_ms": max(created) if created else None,
    }


class IndexMethods:
    """Index methods of the async :class:`alance.LanceDataset`."""

    _ctx: ReadContext

    def describe_indices(self) -> list[IndexDescription]:
        """Every index (all segments of each name), as pylance's ``describe_indices``."""
        return _describe(self._ctx)

    def list_indices(self) -> list[dict[str, Any]]:
        """One dict per index segment: name, type, uuid, fields, version, fragment_ids,
        base_id (pylance's ``list_indices``)."""
        return list_entries(_describe(self._ctx))

    @property
    def has_index(self) -> bool:
        """Whether the dataset has any index."""
        return bool(self.describe_indices())

    async def index_statistics(self, index_name: str) -> dict[str, Any]:
        """Statistics of one index (pylance's ``stats.index_stats``); an unknown name is an
        :class:`~alance.errors.IndexNotFoundError`."""
        return await index_stats(self._ctx, index_name)

    async def create_scalar_index(self, column: str, index_type: str,
                                  name: str | None = None, *, replace: bool = True,
                                  **kwargs: Any) -> LanceDataset:
        """Build a BTREE / BITMAP / LABEL_LIST / ZONEMAP / INVERTED index on ``column`` (named
        ``{column}_idx`` unless ``name`` is given) and commit it; returns the new version.
        ``kwargs``: an INVERTED index's analyzer (``base_tokenizer``, ``lower_case``, ``stem``,
        ``remove_stop_words``, ``ascii_folding``, ``max_token_length``...; see
        :mod:`alance.dataset.query.indices.tokenizer`)."""
        from alance.dataset.maintenance.index_build import create_scalar_index
        return await create_scalar_index(self, column, index_type, name,  # type: ignore[arg-type]
                                         replace=replace, **kwargs)

    async def create_index(self, column: str, index_type: str, name: str | None = None,
                           metric: str = "l2", replace: bool = True,
                           num_partitions: int | None = None,
                           num_sub_vectors: int | None = None, num_bits: int = 8,
                           ) -> LanceDataset:
        """Build an IVF_FLAT / IVF_PQ vector index on ``column`` (named ``{column}_idx``
        unless ``name`` is given; ``metric`` l2, cosine or dot) in pylance's layout and commit
        it; returns the new version."""
        from alance.dataset.maintenance.vector_index_build import create_vector_index
        return await create_vector_index(
            self, column, index_type, name, metric,  # type: ignore[arg-type]
            replace=replace, num_partitions=num_partitions, num_sub_vectors=num_sub_vectors,
            num_bits=num_bits)

    async def optimize_indices(self, *, index_names: list[str] | None = None,
                               num_indices_to_merge: int | None = None,
                               retrain: bool = False, **kwargs: Any) -> LanceDataset:
        """Extend the indices over the fragments they do not cover (pylance's
        ``optimize.optimize_indices``): ``num_indices_to_merge=0`` adds delta segments,
        the default merges every segment into one; vector indices keep their centroids and
        codebook unless ``retrain``. Returns the new version (this one if nothing changed)."""
        if kwargs:
            raise InvalidInputError(f"unknown optimize_indices options {sorted(kwargs)} "
                                    "(index_names, num_indices_to_merge, retrain)")
        from alance.dataset.maintenance.index_optimize import optimize_indices
        return await optimize_indices(self, index_names=index_names,  # type: ignore[arg-type]
                                      num_indices_to_merge=num_indices_to_merge,
                                      retrain=retrain)

    async def drop_index(self, name: str) -> LanceDataset:
        """Remove index ``name`` (every segment); returns the new version."""
        from alance.dataset.maintenance.index_build import drop_index
        return await drop_index(self, name)  # type: ignore[arg-type]

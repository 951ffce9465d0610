"""Full-text search: ``scanner(full_text_query=...)``, as pylance answers it.

The query is a string (searched in the column an INVERTED index covers) or a dict
``{"query": text, "columns": [column]}``. Its text is tokenized with the index's analyzer
(:mod:`.indices.tokenizer`); a row matches when it holds any query token, and scores the sum
over the query tokens (repeats count again) of Lance's BM25 (:mod:`.indices.inverted`).

Rows the index covers are scored from the index with its own statistics (every segment's
partitions together). Fragments no segment covers are scanned and tokenized (unless
``fast_search``); those rows are scored with the index's statistics plus their own, as pylance
does. Rows deleted since the index was built, or moved out of the fragments it covers, are
dropped. Without any INVERTED index on the column every row is scanned this way, split into
words as the simple tokenizer does and otherwise unchanged (as pylance does).

``prefilter=True`` applies the filter first (the scanned rows' statistics then count only
the rows that pass); otherwise the best ``limit + offset`` rows are found and the filter
applied to them. Rows come best first (ties by row id), then ``offset``/``limit`` cut them.
The result holds the projected columns, then ``_score`` (``float32``), then
``_rowid``/``_rowaddr`` when asked for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2
from alance.dataset.query.indices import inverted
from alance.dataset.query.indices.describe import user_indices
from alance.dataset.query.indices.inverted_reader import (
    INVERTED_URL,
    InvertedSegment,
    Stats,
    merge_scores,
    open_segment,
    score_segment,
    segment_stats,
)
from alance.dataset.query.indices.reader import index_reader
from alance.dataset.query.indices.tokenizer import AnalyzerParams, tokenize
from alance.dataset.query.indices.types import type_url, uuid_text
from alance.dataset.query.ranked import RankedSearch
from alance.dataset.query.row_ids import row_addresses_of
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.filter import compile_filter_and_columns
from alance.transaction.indices import read_bitmap

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset

SCORE = "_score"
#: The analyzer pylance's search uses on a column without an INVERTED index: the simple split
#: and nothing else (no length limit, lower-casing, stemming, stop words or folding).
NO_INDEX_ANALYZER = AnalyzerParams(max_token_length=None, lower_case=False, stem=False,
                                   remove_stop_words=False, ascii_folding=False)
_ROW_ID = "_rowid"
_ROW_ADDRESS = "_rowaddr"
_SYSTEM = frozenset({_ROW_ID, _ROW_ADDRESS, "_row_created_at_version",
                     "_row_last_updated_at_version", SCORE})


def _parse_query(query: Any) -> tuple[str, list[str] | None]:
    if isinstance(query, str):
        return query, None
    if isinstance(query, Mapping):
        unknown = set(query) - {"query", "columns"}
        if unknown:
            raise UnsupportedFeatureError(f"full_text_query keys {sorted(unknown)} are not "
                                          "supported (alance takes 'query' and 'columns')")
        text = query.get("query")
        if not isinstance(text, str):
            raise InvalidInputError("full_text_query needs a 'query' string")
        cols = query.get("columns")
        if cols is not None:
            if isinstance(cols, str):
                cols = [cols]
            cols = [str(c) for c in cols]
        return text, cols
    raise UnsupportedFeatureError(
        f"full_text_query of type {type(query).__name__} is not supported; pass the query "
        "text or {'query': text, 'columns': [column]} (match queries, OR of the terms)")


class FullTextScanner(RankedSearch):
    """A scan returning the rows that match a full-text query, best first (see the module)."""

    _RANK = SCORE

    def __init__(self, dataset: LanceDataset, query: Any,
                 columns: Sequence[str] | Mapping[str, str] | None, filter: Any,
                 limit: int | None, offset: int | None, batch_size: int | None,
                 with_row_id: bool, with_row_address: bool, fragments: Sequence[Any] | None,
                 prefilter: bool, disable_scoring_autoprojection: bool, fast_search: bool,
                 options: Mapping[str, Any]) -> None:
        if isinstance(columns, Mapping):
            raise UnsupportedFeatureError("full_text_query with SQL projections is not "
                                          "supported; project by column names")
        if fragments is not None:
            raise UnsupportedFeatureError("full_text_query over a subset of fragments is not "
                                          "supported")
        self.text, wanted = _parse_query(query)
        if self.text.strip().startswith('"') and self.text.strip().endswith('"') and len(
                self.text.strip()) > 1:
            raise UnsupportedFeatureError("phrase queries (quoted full_text_query) are not "
                                          "supported")
        self.dataset = dataset
        schema = dataset.schema
        self.index_name, self.segments_meta = self._find_index(wanted)
        if wanted is not None:
            if len(wanted) != 1:
                raise UnsupportedFeatureError("full_text_query over several columns is not "
                                              "supported; name one column")
            self.column = wanted[0]
        elif self.index_name is not None:
            field_id = int(self.segments_meta[0].fields[0])
            self.column = next(f.name for f in dataset.lance_schema.fields
                               if int(f.id) == field_id)
        else:
            raise InvalidInputError("full_text_query: no INVERTED index to search; name the "
                                    "column with {'query': ..., 'columns': [column]}")
        if self.column not in schema.names:
            raise InvalidInputError(f"full_text_query: no column {self.column!r}")
        self.filter = filter
        self.prefilter = bool(prefilter)
        self.fast_search = bool(fast_search)
        self.limit, self.offset = limit, offset or 0
        self.batch_size = batch_size
        self.options = dict(options)
        self.with_row_id, self.with_row_address = with_row_id, with_row_address
        names = list(columns) if columns is not None else [
            n for n in schema.names if n not in _SYSTEM]
        self.projection = names
        self.rank_shown = SCORE in names or not (
            disable_scoring_autoprojection and columns is not None)
        self.post_filter_columns: list[str] = []
        if filter is not None and not self.prefilter:
            if not isinstance(filter, str):
                raise UnsupportedFeatureError("full_text_query with a post-filter needs the "
                                              "filter as SQL text (or prefilter=True)")
            _, self.post_filter_columns = compile_filter_and_columns(filter, schema)

    def _find_index(self, wanted: list[str] | None,
                    ) -> tuple[str | None, list[table_pb2.IndexMetadata]]:
        ds = self.dataset
        ids = {f.name: int(f.id) for f in ds.lance_schema.fields}
        found: dict[str, list[table_pb2.IndexMetadata]] = {}
        for name, segs in user_indices(ds._snapshot.manifest_file.indices).items():
            segs = [s for s in segs if type_url(s) == INVERTED_URL and len(s.fields) == 1]
            if not segs:
                continue
            if wanted is not None and (len(wanted) != 1 or int(segs[0].fields[0])
                                       != ids.get(wanted[0])):
                continue
            found[name] = segs
        if not found:
            return None, []
        if len(found) > 1 and wanted is None:
            raise UnsupportedFeatureError(
                f"full_text_query over several indexed columns is not supported; name one "
                f"of the columns of {sorted(found)}")
        name = sorted(found)[0]
        return name, found[name]

    # -- the search ---------------------------------------------------------------------------
    def _coverage(self) -> tuple[set[int], list[int]]:
        covered: set[int] = set()
        for seg in self.segments_meta:
            bitmap = read_bitmap(seg)
            if bitmap is not None:
                covered |= set(bitmap)
        frags = [int(f.id) for f in self.dataset._snapshot.fragments]
        return covered, [f for f in frags if f not in covered]

    async def _allowed(self) -> np.ndarray | None:
        if not self.prefilter or self.filter is None:
            return None
        inner = self.dataset.scanner([], self.filter, with_row_id=True, **self.options)
        table = await inner.to_table()
        return np.sort(table.column(_ROW_ID).to_numpy().astype(np.uint64))

    async def _indexed(self, segments: list[InvertedSegment], tokens: list[str],
                       stats: Stats, covered: set[int], allowed: np.ndarray | None,
                       ) -> tuple[np.ndarray, np.ndarray]:
        reader = index_reader(self.dataset._ctx)
        ids_parts, score_parts = [], []
        for seg in segments:
            ids, scores = await score_segment(reader, seg, tokens, stats)
            ids_parts.append(ids)
            score_parts.append(scores)
        ids, scores = merge_scores(ids_parts, score_parts)
        if len(ids):
            addrs, live = await row_addresses_of(self.dataset._ctx, ids)
            frags = (addrs >> np.uint64(32)).astype(np.int64)
            keep = live & np.isin(frags, np.asarray(sorted(covered), dtype=np.int64))
            if allowed is not None:
                keep &= np.isin(ids, allowed)
            ids, scores = ids[keep], scores[keep]
        return ids, scores

    async def _flat(self, fragments: list[int] | None, params: AnalyzerParams,
                    tokens: list[str], base: Stats | None,
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize and score the rows of some fragments (all: ``None``)."""
        inner = self.dataset.scanner(
            [self.column], self.filter if self.prefilter else None, with_row_id=True,
            batch_size=self.batch_size, fragments=fragments, **self.options)
        wanted = set(tokens)
        row_ids: list[int] = []
        lengths: list[int] = []
        counts: list[Counter[str]] = []
        async for batch in inner.to_batches():
            texts = batch.column(self.column).to_pylist()
            rids = batch.column(_ROW_ID).to_pylist()
            for rid, text in zip(rids, texts, strict=True):
                if text is None:
                    continue
                doc = tokenize(params, text)
                if not doc:
                    continue
                row_ids.append(rid)
                lengths.append(len(doc))
                counts.append(Counter(t for t in doc if t in wanted))
        num_docs = len(row_ids) + (base.num_docs if base else 0)
        total = sum(lengths) + (base.total_tokens if base else 0)
        token_docs = {t: sum(1 for c in counts if c[t]) + (base.token_docs.get(t, 0)
                                                         if base else 0) for t in wanted}
        stats = Stats(num_docs, total, token_docs)
        avgdl = stats.avgdl
        ids: list[int] = []
        scores: list[np.float32] = []
        weights = {t: inverted.idf(n, num_docs) for t, n in token_docs.items() if n}
        for rid, length, c in zip(row_ids, lengths, counts, strict=True):
            if not c:
                continue
            score = np.float32(0.0)
            for t in tokens:
                f = c[t]
                if f and t in weights:
                    tf = inverted.doc_weights(np.asarray([f]), np.asarray([length]), avgdl)[0]
                    score = np.float32(score + weights[t] * tf)
            if score > 0:
                ids.append(rid)
                scores.append(score)
        return np.asarray(ids, np.uint64), np.asarray(scores, np.float32)

    async def _ranked(self) -> tuple[np.ndarray, np.ndarray]:
        """Every match's row id and score, best first (ties by row id), before the
        post-filter, offset and limit (the best ``limit + offset`` when limited)."""
        reader = index_reader(self.dataset._ctx)
        allowed = await self._allowed()
        if self.index_name is None:
            params = NO_INDEX_ANALYZER
            tokens = tokenize(params, self.text)
            if not tokens:
                return np.zeros(0, np.uint64), np.zeros(0, np.float32)
            ids, scores = await self._flat(None, params, tokens, None)
        else:
            segments = [await open_segment(reader, s) for s in self.segments_meta]
            params = segments[0].params
            tokens = tokenize(params, self.text)
            if not tokens:
                return np.zeros(0, np.uint64), np.zeros(0, np.float32)
            stats = await segment_stats(reader, segments, tokens)
            covered, unindexed = self._coverage()
            ids, scores = await self._indexed(segments, tokens, stats, covered, allowed)
            if unindexed and not self.fast_search:
                fids, fscores = await self._flat(unindexed, params, tokens, stats)
                ids = np.concatenate([ids, fids])
                scores = np.concatenate([scores, fscores])
        order = np.lexsort((ids, -scores.astype(np.float64)))
        if self.limit is not None:
            order = order[: self.limit + self.offset]
        return ids[order], scores[order]

    async def _result(self) -> pa.Table:
        ids, scores = await self._ranked()
        read = [c for c in dict.fromkeys([*self.projection, *self.post_filter_columns])
                if c not in _SYSTEM]
        if self.with_row_address or _ROW_ADDRESS in self.projection:
            read.append(_ROW_ADDRESS)
        table = await self.dataset.take_rows(ids, columns=read)
        table = table.append_column(SCORE, pa.array(scores, pa.float32()))
        table = table.append_column(_ROW_ID, pa.array(ids, pa.uint64()))
        if table.num_rows and self.filter is not None and not self.prefilter:
            expr, _ = compile_filter_and_columns(self.filter, table.schema)
            table = table.filter(expr)
        if self.offset or self.limit is not None:
            stop = None if self.limit is None else self.offset + self.limit
            table = table.slice(self.offset, None if stop is None else stop - self.offset)
        return table

    def explain_plan(self, verbose: bool = False) -> str:
        """The search as text, in the shape of pylance's plan (the index it uses)."""
        columns = ", ".join(self._order())
        lines = [f"ProjectionExec: expr=[{columns}]"]
        depth = 1
        if self.limit is not None or self.offset:
            fetch = "None" if self.limit is None else str(self.limit)
            lines.append("  " * depth + f"GlobalLimitExec: skip={self.offset}, fetch={fetch}")
            depth += 1
        if self.filter is not None and not self.prefilter:
            lines.append("  " * depth + f"FilterExec: {self.filter}")
            depth += 1
        lines.append("  " * depth + "SortExec: expr=[_score DESC]")
        depth += 1
        where = (f", prefilter={self.filter!r}" if self.prefilter and self.filter is not None
                 else "")
        _, unindexed = self._coverage() if self.index_name is not None else (set(), [])
        flat = self.index_name is None or (unindexed and not self.fast_search)
        if self.index_name is not None and flat:
            lines.append("  " * depth + "UnionExec")
            depth += 1
        if self.index_name is not None:
            uuid = uuid_text(self.segments_meta[0])
            lines.append("  " * depth + f"MatchQuery: column={self.column}, "
                         f"query=[{self.text}], index={self.index_name}, uuid={uuid}, "
                         f"deltas={len(self.segments_meta)}{where}")
        if flat:
            frags = "all" if self.index_name is None else str(unindexed)
            lines.append("  " * depth + f"FlatMatchQuery: column={self.column}, "
                         f"query={self.text}, fragments={frags}{where}")
        return "\n".join(lines)


__all__ = ["NO_INDEX_ANALYZER", "SCORE", "FullTextScanner"]

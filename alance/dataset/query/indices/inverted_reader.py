"""Reading INVERTED index segments through the dataset's store (see :mod:`.inverted`) and
scoring a match query with them: the IO layer over :mod:`.inverted` and :mod:`.tokenizer`.

A segment's vocabulary and documents are read once per read context; posting lists are read
on demand, one row of a partition's ``part_{p}_invert.lance`` per query token (cached with the
index reader's tables).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from alance._proto import table_pb2
from alance.dataset.query.indices import inverted
from alance.dataset.query.indices.reader import IndexReader
from alance.dataset.query.indices.tokenizer import AnalyzerParams, params_from_json
from alance.dataset.query.indices.types import INVERTED_URL
from alance.errors import CorruptFileError, NotFoundError, UnsupportedFeatureError
from alance.io.plans import decode_pool


@dataclass(frozen=True)
class Partition:
    """One partition of a segment: its vocabulary and documents."""

    number: int
    tokens: dict[str, int]
    row_ids: np.ndarray            # uint64, by document id
    num_tokens: np.ndarray         # uint32, by document id
    total_tokens: int


@dataclass(frozen=True)
class InvertedSegment:
    """One opened INVERTED segment."""

    index: table_pb2.IndexMetadata
    params: AnalyzerParams
    layout: inverted.IndexLayout
    partitions: tuple[Partition, ...]


async def open_segment(reader: IndexReader, index: table_pb2.IndexMetadata) -> InvertedSegment:
    """Read (once per read context) the settings, vocabularies and documents of a segment."""
    cache: dict[bytes, InvertedSegment] = reader.__dict__.setdefault("_fts_segments", {})
    key = bytes(index.uuid.uuid)
    found = cache.get(key)
    if found is not None:
        return found
    names = {f.path for f in index.files}
    if names and inverted.METADATA_FILE not in names:
        raise UnsupportedFeatureError(f"index {index.name!r}: INVERTED indices of the legacy "
                                      "layout (no metadata.lance) are not supported")
    try:
        meta = await reader.file_metadata(index, inverted.METADATA_FILE)
    except NotFoundError as exc:
        raise UnsupportedFeatureError(f"index {index.name!r}: INVERTED indices of the legacy "
                                      "layout (no metadata.lance) are not supported") from exc
    params = params_from_json(meta.get(b"params"))
    layout = inverted.layout_of(meta)
    parts = await asyncio.gather(*(_partition(reader, index, layout, p)
                                   for p in layout.partitions))
    segment = InvertedSegment(index, params, layout, tuple(parts))
    cache[key] = segment
    return segment


async def _partition(reader: IndexReader, index: table_pb2.IndexMetadata,
                     layout: inverted.IndexLayout, number: int) -> Partition:
    tokens_t, docs_t = await asyncio.gather(
        reader.table(index, inverted.tokens_file(number)),
        reader.table(index, inverted.docs_file(number)))
    docs_meta = dict(docs_t.schema.metadata or {})
    loop = asyncio.get_running_loop()
    if "_token_fst_bytes" in tokens_t.column_names:
        raw = tokens_t.column("_token_fst_bytes")
        if len(raw) != 1:
            raise CorruptFileError(f"index {index.name!r}: {len(raw)} token maps in a partition")
        tokens = await loop.run_in_executor(decode_pool(), inverted.decode_fst,
                                            raw[0].as_py())
    else:
        tokens = dict(zip(tokens_t.column("_token").to_pylist(),
                          (int(t) for t in tokens_t.column("_token_id").to_pylist()),
                          strict=True))
    row_ids = docs_t.column("_rowid").to_numpy().astype(np.uint64)
    num_tokens = docs_t.column("_num_tokens").to_numpy().astype(np.uint32)
    total = docs_meta.get(b"total_tokens")
    try:
        total_tokens = int(total) if total is not None else int(num_tokens.sum())
    except ValueError as exc:
        raise CorruptFileError(f"index {index.name!r}: bad total_tokens {total!r}") from exc
    return Partition(number, tokens, row_ids, num_tokens, total_tokens)


async def posting_lengths(reader: IndexReader, segment: InvertedSegment,
                          token: str) -> list[int]:
    """Per partition, how many documents hold ``token``."""
    out = []
    for part in segment.partitions:
        tid = part.tokens.get(token)
        if tid is None:
            out.append(0)
            continue
        lengths = await reader.table(segment.index, inverted.invert_file(part.number),
                                     ("_length",))
        out.append(int(lengths.column("_length")[tid].as_py()))
    return out


async def postings(reader: IndexReader, segment: InvertedSegment, part: Partition,
                   token: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row ids, frequencies, document lengths)`` of the documents of one partition that
    hold ``token``."""
    tid = part.tokens.get(token)
    if tid is None:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint32), np.zeros(0, np.uint32)
    row = await reader.table(segment.index, inverted.invert_file(part.number),
                             ("_posting", "_length"), (tid, tid + 1))
    blocks = row.column("_posting")[0].as_py()
    length = int(row.column("_length")[0].as_py())
    loop = asyncio.get_running_loop()
    docs, freqs = await loop.run_in_executor(decode_pool(), inverted.decode_postings, blocks,
                                             length, segment.layout.tail_codec)
    if len(docs) and int(docs.max()) >= len(part.row_ids):
        raise CorruptFileError(f"index {segment.index.name!r}: posting list names document "
                               f"{int(docs.max())} of {len(part.row_ids)}")
    return part.row_ids[docs], freqs, part.num_tokens[docs]


@dataclass(frozen=True)
class Stats:
    """The corpus statistics BM25 needs."""

    num_docs: int
    total_tokens: int
    token_docs: dict[str, int]

    @property
    def avgdl(self) -> np.float32:
        """Average document length (32-bit, as Lance computes it)."""
        if not self.num_docs:
            return np.float32(1.0)
        return np.float32(np.float32(self.total_tokens) / np.float32(self.num_docs))


async def segment_stats(reader: IndexReader, segments: list[InvertedSegment],
                        tokens: list[str]) -> Stats:
    """The statistics of the given segments for the query tokens."""
    docs = sum(len(p.row_ids) for s in segments for p in s.partitions)
    total = sum(p.total_tokens for s in segments for p in s.partitions)
    counts: dict[str, int] = {}
    for token in dict.fromkeys(tokens):
        per = await asyncio.gather(*(posting_lengths(reader, s, token) for s in segments))
        counts[token] = sum(sum(p) for p in per)
    return Stats(docs, total, counts)


async def score_segment(reader: IndexReader, segment: InvertedSegment, tokens: list[str],
                        stats: Stats) -> tuple[np.ndarray, np.ndarray]:
    """``(row ids, scores)`` of every document of the segment matching any query token."""
    ids: list[np.ndarray] = []
    scores: list[np.ndarray] = []
    avgdl = stats.avgdl
    for token in tokens:  # repeated query tokens count again, as in pylance
        n = stats.token_docs.get(token, 0)
        if not n:
            continue
        weight = inverted.idf(n, stats.num_docs)
        found = await asyncio.gather(*(postings(reader, segment, p, token)
                                       for p in segment.partitions))
        for row_ids, freqs, lengths in found:
            if len(row_ids):
                ids.append(row_ids)
                scores.append((weight * inverted.doc_weights(freqs, lengths, avgdl)
                               ).astype(np.float32))
    return merge_scores(ids, scores)


def merge_scores(ids: list[np.ndarray], scores: list[np.ndarray],
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct row id, the sum of its scores (32-bit)."""
    if not ids:
        return np.zeros(0, np.uint64), np.zeros(0, np.float32)
    all_ids = np.concatenate(ids)
    all_scores = np.concatenate(scores).astype(np.float32)
    unique, inverse = np.unique(all_ids, return_inverse=True)
    total = np.zeros(len(unique), dtype=np.float32)
    np.add.at(total, inverse, all_scores)
    return unique, total


__all__ = ["INVERTED_URL", "InvertedSegment", "Partition", "Stats", "merge_scores",
           "open_segment", "postings", "score_segment", "segment_stats"]

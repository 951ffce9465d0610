"""Row version sequences: per-row dataset versions, run-length encoded
(``RowDatasetVersionSequence``). Pure byte <-> numpy code; no IO.

A fragment carries two: the version each row was created at and the version it was last
updated at, both in physical row order. A sequence is a list of runs; a run gives one version
to as many consecutive rows as its ``span`` segment holds values. Only that count matters when
reading. Lance writes the span as the range of row positions the run covers
(``[start, end)``); after compaction it may be any segment kind (positions of the surviving
rows), which is why the count, not the bounds, is what is read.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError

from alance._proto import rowids_pb2
from alance.errors import CorruptFileError
from alance.format.row_id_sequence import segment_length

RowDatasetVersionSequence = rowids_pb2.RowDatasetVersionSequence


def parse_versions(data: bytes | bytearray | memoryview) -> RowDatasetVersionSequence:
    """Parse a serialized ``RowDatasetVersionSequence`` (``CorruptFileError`` if it fails)."""
    seq = RowDatasetVersionSequence()
    try:
        seq.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise CorruptFileError(f"row version sequence does not decode: {exc}") from exc
    return seq


def run_lengths(seq: RowDatasetVersionSequence) -> tuple[np.ndarray, np.ndarray]:
    """``(versions, lengths)`` of the runs, as uint64 / int64 arrays."""
    versions = np.fromiter((r.version for r in seq.runs), dtype=np.uint64, count=len(seq.runs))
    lengths = np.fromiter((segment_length(r.span) for r in seq.runs), dtype=np.int64,
                          count=len(seq.runs))
    return versions, lengths


def decode_versions(data: bytes | bytearray | memoryview,
                    expected_length: int | None = None) -> np.ndarray:
    """Per-row versions (uint64, row order) of a serialized sequence.

    With ``expected_length`` (the fragment's physical rows) a sequence covering another
    number of rows is :class:`CorruptFileError`.
    """
    versions, lengths = run_lengths(parse_versions(data))
    total = int(lengths.sum()) if len(lengths) else 0
    if expected_length is not None and total != expected_length:
        raise CorruptFileError(f"row version sequence covers {total} rows, the fragment has "
                               f"{expected_length}")
    return np.repeat(versions, lengths)


def encode_versions(values: np.ndarray) -> RowDatasetVersionSequence:
    """Run-length encode per-row versions; each run's span is its range of row positions."""
    values = np.asarray(values, dtype=np.uint64)
    seq = RowDatasetVersionSequence()
    n = len(values)
    if not n:
        return seq
    starts = np.concatenate([[0], np.flatnonzero(values[1:] != values[:-1]) + 1])
    ends = np.concatenate([starts[1:], [n]])
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        run = seq.runs.add(version=int(values[a]))
        run.span.range.start = a
        run.span.range.end = b
        run.span.range.SetInParent()
    return seq


def encode_version_bytes(values: np.ndarray) -> bytes:
    """Serialized :func:`encode_versions`."""
    return encode_versions(values).SerializeToString(deterministic=True)


def uniform_versions(rows: int, version: int) -> bytes:
    """Serialized sequence giving all ``rows`` rows ``version`` (empty for no rows)."""
    seq = RowDatasetVersionSequence()
    if rows:
        run = seq.runs.add(version=version)
        run.span.range.end = rows
    return seq.SerializeToString(deterministic=True)


__all__ = [
    "decode_versions",
    "encode_version_bytes",
    "encode_versions",
    "parse_versions",
    "run_lengths",
    "uniform_versions",
]

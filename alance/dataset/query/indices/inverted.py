"""The INVERTED (full-text) index format as pylance 14 writes it, and BM25 (no IO).

An index segment is a directory of Lance files:

* ``metadata.lance``: schema metadata ``params`` (JSON: the analyzer settings, see
  :mod:`.tokenizer`), ``partitions`` (JSON list of partition ids), ``token_set_format``
  (``fst`` or ``arrow``), ``format_version``, ``posting_block_size`` and
  ``posting_tail_codec``; one row per deleted fragment list (unused here).
* per partition ``p``: ``part_{p}_tokens.lance`` (the partition's vocabulary: a Rust ``fst``
  map from token to token id in ``_token_fst_bytes``, or ``_token`` / ``_token_id`` columns),
  ``part_{p}_docs.lance`` (``_rowid`` and ``_num_tokens`` of each document; the document id
  is the row number; metadata ``total_tokens``) and ``part_{p}_invert.lance`` (row ``t`` is
  token ``t``'s posting list: ``_posting`` blocks, ``_max_score``, ``_length`` documents,
  and for format 2 ``_impacts``).

A posting list is split in blocks of ``posting_block_size`` (128) documents: each block
starts with its maximum score (``f32``); a full block holds the first document id (``u32``),
the bit width and the bit-packed deltas of the document ids, then the bit width and the
bit-packed frequencies (128 values in four interleaved 32-bit lanes); the last, partial block
holds the document-id deltas and the frequencies as LEB128 varints (``varint_delta_v1``) or as
``u32`` values (``fixed32_v1``, format version 1, which alance writes: with an ``arrow`` token
set and no ``_impacts``).

Scores are Lance's BM25 (``k1 = 1.2``, ``b = 0.75``) over the statistics of all partitions:
``idf = ln((N - n + 0.5) / (n + 0.5) + 1)`` and ``tf = (k1 + 1) f / (f + k1 (1 - b + b dl /
avgdl))``, in 32-bit floats.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np

from alance.errors import CorruptFileError, UnsupportedFeatureError

METADATA_FILE = "metadata.lance"
K1 = np.float32(1.2)
B = np.float32(0.75)
BLOCK_SIZE = 128


def tokens_file(partition: int) -> str:
    """The vocabulary file of a partition."""
    return f"part_{partition}_tokens.lance"


def docs_file(partition: int) -> str:
    """The documents file of a partition."""
    return f"part_{partition}_docs.lance"


def invert_file(partition: int) -> str:
    """The posting-lists file of a partition."""
    return f"part_{partition}_invert.lance"


@dataclass(frozen=True)
class IndexLayout:
    """What ``metadata.lance`` says about the files."""

    partitions: tuple[int, ...]
    token_set_format: str
    block_size: int
    tail_codec: str


def layout_of(metadata: dict[bytes, bytes]) -> IndexLayout:
    """The layout recorded in ``metadata.lance``'s schema metadata."""
    try:
        parts = tuple(int(p) for p in json.loads(metadata.get(b"partitions", b"[]")))
        block = int(metadata.get(b"posting_block_size", b"128"))
    except (ValueError, TypeError) as exc:
        raise CorruptFileError("INVERTED index: bad metadata") from exc
    fmt = metadata.get(b"token_set_format", b"arrow").decode()
    codec = metadata.get(b"posting_tail_codec", b"fixed32_v1").decode()
    if block != BLOCK_SIZE:
        raise UnsupportedFeatureError(f"INVERTED index posting_block_size={block} is not "
                                      "supported (alance reads 128)")
    if codec not in ("varint_delta_v1", "fixed32_v1"):
        raise UnsupportedFeatureError(f"INVERTED index posting_tail_codec={codec!r} is not "
                                      "supported")
    if fmt not in ("fst", "arrow"):
        raise UnsupportedFeatureError(f"INVERTED index token_set_format={fmt!r} is not "
                                      "supported")
    return IndexLayout(parts, fmt, block, codec)


# -- the token set: a Rust ``fst`` map ------------------------------------------------------
#: The bytes the fst format encodes in a node's state byte (index - 1).
_COMMON = (b"te/oasripcnw.hlm-du012g=:bf3y5&_4v9678k%?xCDASFIBEjPTzRNM+LOqHGWUV,YKJZXQ;)(~[]$!"
           b"'*@")


def _uint(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at:at + size], "little") if size else 0


def decode_fst(data: bytes) -> dict[str, int]:
    """Every key and value of a serialized ``fst`` map (format version 2 or 3)."""
    if len(data) < 32:
        raise CorruptFileError("INVERTED index: token map too short")
    version = struct.unpack_from("<Q", data, 0)[0]
    if version not in (2, 3):
        raise UnsupportedFeatureError(f"token map of fst version {version} is not supported")
    end = len(data) - (4 if version >= 3 else 0)
    root = struct.unpack_from("<Q", data, end - 8)[0]
    count = struct.unpack_from("<Q", data, end - 16)[0]
    out: dict[str, int] = {}
    # Depth-first walk: (node address, key bytes so far, output so far).
    stack: list[tuple[int, bytes, int]] = [(root, b"", 0)]
    while stack:
        addr, key, acc = stack.pop()
        final, final_out, trans = _node(data, addr, version)
        if final:
            out[key.decode("utf-8", "replace")] = acc + final_out
        for inp, out_val, target in reversed(trans):
            stack.append((target, key + bytes([inp]), acc + out_val))
    if len(out) != count:
        raise CorruptFileError(f"INVERTED index: token map holds {len(out)} keys, not {count}")
    return out


def _node(data: bytes, addr: int, version: int,
          ) -> tuple[bool, int, list[tuple[int, int, int]]]:
    """``(is final, final output, [(input byte, output, target address)])`` of one node."""
    if addr == 0:  # the empty final node
        return True, 0, []
    state = data[addr]
    kind = state >> 6
    if kind == 0b11:  # one transition to the node just before, no output
        idx = state & 0x3F
        if idx:
            inp, end = _COMMON[idx - 1], addr
        else:
            inp, end = data[addr - 1], addr - 1
        return False, 0, [(inp, 0, end - 1)]
    if kind == 0b10:  # one transition with output and address
        idx = state & 0x3F
        at = addr - 1
        if idx:
            inp = _COMMON[idx - 1]
        else:
            inp = data[at]
            at -= 1
        sizes = data[at]
        tsize, osize = sizes >> 4, sizes & 0x0F
        t_at = at - tsize
        delta = _uint(data, t_at, tsize)
        out_val = _uint(data, t_at - osize, osize)
        return False, 0, [(inp, out_val, _delta_target(t_at - osize, delta))]
    # Any number of transitions.
    final = bool(state & 0x40)
    n = state & 0x3F
    at = addr - 1
    if n == 0:
        n = data[at]
        if n == 1:
            n = 256
        at -= 1
    sizes = data[at]
    tsize, osize = sizes >> 4, sizes & 0x0F
    index_size = 256 if version >= 2 and n > 32 else 0
    inputs_end = at - index_size  # inputs occupy [inputs_end - n, inputs_end)
    inputs_start = inputs_end - n
    addrs_start = inputs_start - n * tsize
    outs_start = addrs_start - n * osize
    final_out = 0
    node_end = outs_start
    if final and osize:
        node_end -= osize
        final_out = _uint(data, node_end, osize)
    trans = []
    for i in range(n):
        inp = data[inputs_end - 1 - i]
        delta = _uint(data, inputs_start - (i + 1) * tsize, tsize)
        out_val = _uint(data, addrs_start - (i + 1) * osize, osize) if osize else 0
        trans.append((inp, out_val, _delta_target(node_end, delta)))
    return final, final_out, trans


def _delta_target(node_end: int, delta: int) -> int:
    """A transition's target from its packed delta (0: the empty final node); deltas count
    back from the node's first byte, ``node_end``."""
    return 0 if delta == 0 else node_end - delta


# -- posting lists ---------------------------------------------------------------------------
def _unpack4x(data: bytes, at: int, bits: int) -> tuple[np.ndarray, int]:
    """128 ``bits``-wide values packed in four interleaved 32-bit lanes (value ``4 i + j`` is
    the ``i``-th of lane ``j``, each lane a little-endian bit stream); and the bytes used."""
    if not bits:
        return np.zeros(BLOCK_SIZE, np.uint32), 0
    words = np.frombuffer(data, dtype="<u4", count=4 * bits, offset=at).reshape(bits, 4)
    padded = np.zeros((bits + 1, 4), dtype=np.uint64)
    padded[:bits] = words
    start = np.arange(32, dtype=np.int64) * bits
    word, offset = start // 32, (start % 32).astype(np.uint64)
    pair = padded[word] | (padded[word + 1] << np.uint64(32))  # (32, 4)
    values = (pair >> offset[:, None]) & np.uint64((1 << bits) - 1)
    return values.reshape(-1).astype(np.uint32), 16 * bits


def _varints(data: bytes, at: int, count: int) -> tuple[list[int], int]:
    out = []
    for _ in range(count):
        value = shift = 0
        while True:
            if at >= len(data):
                raise CorruptFileError("INVERTED index: truncated posting list")
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
        out.append(value)
    return out, at


def decode_postings(blocks: list[bytes], length: int, codec: str,
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(document ids, frequencies)`` of one posting list of ``length`` documents."""
    docs: list[np.ndarray] = []
    freqs: list[np.ndarray] = []
    full = length // BLOCK_SIZE
    rest = length % BLOCK_SIZE
    if len(blocks) != full + (1 if rest else 0):
        raise CorruptFileError(f"INVERTED index: {len(blocks)} posting blocks for {length} "
                               "documents")
    for b in range(full):
        data = blocks[b]
        first = struct.unpack_from("<I", data, 4)[0]
        bits = data[8]
        deltas, used = _unpack4x(data, 9, bits)
        docs.append((np.cumsum(deltas.astype(np.uint64)) + first).astype(np.uint32))
        at = 9 + used
        fbits = data[at]
        values, _ = _unpack4x(data, at + 1, fbits)
        freqs.append(values)
    if rest:
        data = blocks[full]
        if codec != "varint_delta_v1":
            ids = np.frombuffer(data, dtype="<u4", count=rest, offset=4)
            fr = np.frombuffer(data, dtype="<u4", count=rest, offset=4 + 4 * rest)
            docs.append(ids.astype(np.uint32))
            freqs.append(fr.astype(np.uint32))
        else:
            deltas_list, at = _varints(data, 4, rest)
            fr_list, _ = _varints(data, at, rest)
            docs.append(np.cumsum(np.asarray(deltas_list, dtype=np.uint64)).astype(np.uint32))
            freqs.append(np.asarray(fr_list, dtype=np.uint32))
    if not docs:
        return np.zeros(0, np.uint32), np.zeros(0, np.uint32)
    return np.concatenate(docs), np.concatenate(freqs)


# -- BM25 ------------------------------------------------------------------------------------
def idf(token_docs: int, num_docs: int) -> np.float32:
    """Lance's BM25 inverse document frequency (32-bit)."""
    n = np.float32(num_docs)
    t = np.float32(token_docs)
    return np.float32(np.log(np.float32((n - t + np.float32(0.5)) / (t + np.float32(0.5))
                                        + np.float32(1.0))))


def doc_weights(freqs: np.ndarray, doc_tokens: np.ndarray, avgdl: np.float32) -> np.ndarray:
    """BM25's term-frequency part of each (frequency, document length) pair (32-bit)."""
    f = freqs.astype(np.float32)
    dl = doc_tokens.astype(np.float32)
    norm = K1 * (np.float32(1.0) - B + B * dl / np.float32(avgdl))
    return ((K1 + np.float32(1.0)) * f / (f + norm)).astype(np.float32)




# -- building (format version 1: arrow token set, fixed-width tails) -------------------------
def _pack4x(values: np.ndarray, bits: int) -> bytes:
    """128 values as ``bits``-wide fields in four interleaved 32-bit lanes (see
    :func:`_unpack4x`)."""
    if not bits:
        return b""
    lanes = np.asarray(values, dtype=np.uint64).reshape(32, 4)
    words = np.zeros((bits + 1, 4), dtype=np.uint64)
    for i in range(32):
        start = i * bits
        word, offset = start // 32, start % 32
        words[word] |= (lanes[i] << np.uint64(offset)) & np.uint64(0xFFFFFFFF)
        if offset + bits > 32:
            words[word + 1] |= lanes[i] >> np.uint64(32 - offset)
    return words[:bits].astype("<u4").tobytes()


def _bits(value: int) -> int:
    return int(value).bit_length()


def encode_postings(docs: np.ndarray, freqs: np.ndarray, block_scores: list[float]) -> list[bytes]:
    """One posting list as blocks (format version 1: full blocks bit-packed, the last partial
    block as ``u32`` document ids then ``u32`` frequencies), each led by its maximum score."""
    out = []
    docs = np.asarray(docs, dtype=np.uint32)
    freqs = np.asarray(freqs, dtype=np.uint32)
    for b, start in enumerate(range(0, len(docs), BLOCK_SIZE)):
        d = docs[start:start + BLOCK_SIZE]
        f = freqs[start:start + BLOCK_SIZE]
        head = struct.pack("<f", block_scores[b])
        if len(d) == BLOCK_SIZE:
            deltas = np.diff(d.astype(np.int64), prepend=int(d[0])).astype(np.uint64)
            dbits = _bits(int(deltas.max()))
            fbits = _bits(int(f.max()))
            out.append(head + struct.pack("<IB", int(d[0]), dbits) + _pack4x(deltas, dbits)
                       + bytes([fbits]) + _pack4x(f, fbits))
        else:
            out.append(head + d.astype("<u4").tobytes() + f.astype("<u4").tobytes())
    return out


def block_max_scores(freqs: np.ndarray, doc_tokens: np.ndarray, num_docs: int,
                     avgdl: np.float32) -> list[float]:
    """Each block's upper bound of the token's BM25 score (Lance's ``_max_score`` recipe:
    the block's best ``f / (f + norm)`` times ``idf * (k1 + 1)``, in 32-bit floats)."""
    f = np.asarray(freqs, dtype=np.float32)
    dl = np.asarray(doc_tokens, dtype=np.float32)
    norm = K1 * (np.float32(1.0) - B + B * dl / np.float32(avgdl))
    part = (f / (f + norm)).astype(np.float32)
    scale = np.float32(idf(len(f), num_docs) * (K1 + np.float32(1.0)))
    return [float(np.float32(part[s:s + BLOCK_SIZE].max() * scale))
            for s in range(0, len(f), BLOCK_SIZE)]


@dataclass(frozen=True)
class BuiltPartition:
    """The three tables of one partition."""

    tokens: dict[str, object]     # column -> values
    docs: dict[str, object]
    invert: dict[str, object]
    total_tokens: int


def build_partition(docs_tokens: list[list[str]], row_ids: np.ndarray) -> BuiltPartition:
    """A partition over documents given as token lists (empty ones already left out) with
    their row ids: token ids by first appearance, posting lists by document id."""
    vocab: dict[str, int] = {}
    postings: list[dict[int, int]] = []
    lengths = np.zeros(len(docs_tokens), dtype=np.uint32)
    for doc, tokens in enumerate(docs_tokens):
        lengths[doc] = len(tokens)
        for token in tokens:
            tid = vocab.get(token)
            if tid is None:
                tid = vocab[token] = len(vocab)
                postings.append({})
            counts = postings[tid]
            counts[doc] = counts.get(doc, 0) + 1
    total = int(lengths.sum())
    num_docs = len(docs_tokens)
    avgdl = np.float32(np.float32(total) / np.float32(num_docs)) if num_docs else np.float32(1)
    blocks: list[list[bytes]] = []
    max_scores: list[float] = []
    sizes: list[int] = []
    for counts in postings:
        ids = np.fromiter(counts.keys(), dtype=np.uint32, count=len(counts))
        freqs = np.fromiter(counts.values(), dtype=np.uint32, count=len(counts))
        scores = block_max_scores(freqs, lengths[ids], num_docs, avgdl)
        blocks.append(encode_postings(ids, freqs, scores))
        max_scores.append(max(scores))
        sizes.append(len(ids))
    ordered = sorted(vocab.items())
    return BuiltPartition(
        tokens={"_token": [t for t, _ in ordered], "_token_id": [i for _, i in ordered]},
        docs={"_rowid": np.asarray(row_ids, dtype=np.uint64), "_num_tokens": lengths},
        invert={"_posting": blocks, "_max_score": max_scores, "_length": sizes},
        total_tokens=total)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def details_bytes(base_tokenizer: str, language: str, with_position: bool,
                  max_token_length: int | None, lower_case: bool, stem: bool,
                  remove_stop_words: bool, ascii_folding: bool) -> bytes:
    """The manifest's ``InvertedIndexDetails`` message (protobuf) for these settings; the
    language is JSON-quoted as Lance records it."""
    def text(field: int, value: str) -> bytes:
        data = value.encode()
        return _varint(field << 3 | 2) + _varint(len(data)) + data

    def number(field: int, value: int) -> bytes:
        return _varint(field << 3) + _varint(value) if value else b""

    out = text(1, base_tokenizer) + text(2, json.dumps(language)) + number(3, with_position)
    if max_token_length is not None:
        out += _varint(4 << 3) + _varint(max_token_length)
    return (out + number(5, lower_case) + number(6, stem) + number(7, remove_stop_words)
            + number(8, ascii_folding) + number(9, 3) + number(10, 3))


__all__ = ["B", "BLOCK_SIZE", "BuiltPartition", "IndexLayout", "K1", "METADATA_FILE",
           "block_max_scores", "build_partition", "decode_fst", "decode_postings",
           "details_bytes", "doc_weights", "docs_file", "encode_postings", "idf",
           "invert_file", "layout_of", "tokens_file"]

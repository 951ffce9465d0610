"""Building INVERTED (full-text) index files in Lance's format version 1, which pylance
reads: an ``arrow`` token set, fixed-width posting tails, one partition (see
:mod:`alance.dataset.query.indices.inverted`). Only the analyzers of
:mod:`alance.dataset.query.indices.tokenizer` are built; ``with_position=True`` is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyroaring

from alance.dataset.maintenance.index_files import write_index_file
from alance.dataset.query.indices import inverted
from alance.dataset.query.indices.tokenizer import AnalyzerParams, params_of, tokenize
from alance.errors import UnsupportedFeatureError
from alance.io.plans import decode_pool

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset

_INVERT_SCHEMA = pa.schema([
    pa.field("_posting", pa.list_(pa.field("item", pa.large_binary(), True)), False),
    pa.field("_max_score", pa.float32(), False),
    pa.field("_length", pa.uint32(), False)])
_TOKENS_SCHEMA = pa.schema([pa.field("_token", pa.string(), False),
                            pa.field("_token_id", pa.uint32(), False)])
_DOCS_SCHEMA = pa.schema([pa.field("_rowid", pa.uint64(), False),
                          pa.field("_num_tokens", pa.uint32(), False)])
_META_SCHEMA = pa.schema([pa.field("deleted_fragments", pa.binary(), False)])


def build_params(options: Mapping[str, Any]) -> AnalyzerParams:
    """The analyzer ``create_scalar_index(..., "INVERTED", **options)`` asks for, or
    :class:`UnsupportedFeatureError` naming what alance does not build."""
    params = params_of(dict(options), "create_scalar_index INVERTED")
    if params.with_position:
        raise UnsupportedFeatureError("INVERTED indices with_position=True (phrase queries) "
                                      "are not built by alance")
    return params


def params_options(params: AnalyzerParams) -> dict[str, Any]:
    """``create_scalar_index`` keywords that rebuild an index with ``params``."""
    return dataclasses.asdict(params)


def _build(texts: list[str | None], ids: np.ndarray, params: AnalyzerParams,
           ) -> inverted.BuiltPartition:
    docs: list[list[str]] = []
    rows: list[int] = []
    for text, row in zip(texts, ids.tolist(), strict=True):
        if text is None:
            continue
        tokens = tokenize(params, text)
        if tokens:
            docs.append(tokens)
            rows.append(row)
    return inverted.build_partition(docs, np.asarray(rows, dtype=np.uint64))


async def write_inverted(ds: LanceDataset, values: pa.Array, ids: np.ndarray,
                         directory: str, params: AnalyzerParams) -> list[tuple[str, int]]:
    """Write the files of an INVERTED index over ``(values, ids)``; ``(name, size)`` each."""
    loop = asyncio.get_running_loop()
    built = await loop.run_in_executor(decode_pool(), _build, values.to_pylist(), ids, params)
    store = ds._store
    invert = pa.table(built.invert, schema=_INVERT_SCHEMA)
    tokens = pa.table(built.tokens, schema=_TOKENS_SCHEMA)
    docs = pa.table(built.docs, schema=_DOCS_SCHEMA)
    meta = pa.table({"deleted_fragments": [pyroaring.BitMap().serialize()]},
                    schema=_META_SCHEMA)
    files = [
        (inverted.invert_file(0), invert, {}),
        (inverted.tokens_file(0), tokens, {}),
        (inverted.docs_file(0), docs, {"total_tokens": str(built.total_tokens)}),
        (inverted.METADATA_FILE, meta, {
            "params": json.dumps(params.to_json(), separators=(",", ":")),
            "partitions": "[0]", "token_set_format": "arrow"}),
    ]
    sizes = await asyncio.gather(*(
        write_index_file(store, f"{directory}/{name}", table, metadata=metadata)
        for name, table, metadata in files))
    return [(name, size) for (name, _, _), size in zip(files, sizes, strict=True)]


def details(params: AnalyzerParams) -> bytes:
    """The manifest details of an index built with ``params``."""
    return inverted.details_bytes(params.base_tokenizer, params.language, params.with_position,
                                  params.max_token_length, params.lower_case, params.stem,
                                  params.remove_stop_words, params.ascii_folding)


__all__ = ["build_params", "details", "params_options", "write_inverted"]

"""Full-text search (``full_text_query``) through pylance-built INVERTED indices: the same rows
and BM25 scores as pylance on the same dataset and index, unindexed fragments searched flat and
merged, filters before or after the search as pylance applies them.

pylance orders rows of equal score arbitrarily (it can differ between two runs), so the
comparisons here are tie-aware: equal rows and scores, and with a ``limit`` only cuts where the
score strictly drops."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.dataset.query.indices import inverted
from alance.dataset.query.indices.tokenizer import AnalyzerParams, params_of, tokenize

_VOCABULARY = """
apple apples banana cherry cherries running runs runner ran quickly quick organization
organizations organize generously general university universal happily happiness dying lying
tied ties agreed feeding national international connect connected connection connections
database databases query queries search searching searched index indexes indexing vector
vectors Lance lance the a an of to in is was were be been are and or not no very only once
über café naïve Straße résumé ÆON
"""
_WORDS = _VOCABULARY.split()
_PUNCT = (" ", " ", " ", ", ", ". ", "! ", "-", "_", "'", "/", " (", ") ", "\n", " 42 ",
          " 3.14 ")


def _texts(n: int, seed: int) -> list[str | None]:
    rng = random.Random(seed)
    out: list[str | None] = []
    for i in range(n):
        if i % 97 == 5:
            out.append(None)
            continue
        parts = []
        for _ in range(rng.randint(0, 30)):
            word = rng.choice(_WORDS)
            if rng.random() < 0.2:
                word = word.capitalize()
            elif rng.random() < 0.05:
                word = word.upper()
            parts += [word, rng.choice(_PUNCT)]
        if rng.random() < 0.02:
            parts.append("x" * 45)  # over the 40-byte token limit
        out.append("".join(parts))
    return out


def _table(n: int, seed: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "text": pa.array(_texts(n, seed), pa.string()),
                     "g": pa.array([i % 4 for i in range(start, start + n)], pa.int64())})


QUERIES = ["apple", "apples cherry", "Running database", "the", "organizations universal",
           "connected searching indexes", "happily dying", "cafe naive", "zzz nothing",
           "apple apple vector"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("fts") / "ds")
    ds = lance.write_dataset(_table(1500, 1), uri, max_rows_per_file=500)
    ds.create_scalar_index("text", "INVERTED")
    return uri


def _scores(table: pa.Table) -> dict[int, float]:
    return dict(zip(table["_rowid"].to_pylist(), table["_score"].to_pylist(), strict=True))


def _same(ours: pa.Table, theirs: pa.Table) -> None:
    """Same columns, rows and scores; rows of equal score in any order."""
    assert ours.schema.names == theirs.schema.names
    assert ours.num_rows == theirs.num_rows
    np.testing.assert_allclose(ours["_score"].to_numpy(), theirs["_score"].to_numpy(),
                               rtol=1e-5, atol=1e-6)
    if "_rowid" in ours.schema.names:
        a, b = _scores(ours), _scores(theirs)
        assert set(a) == set(b)
        for k, v in a.items():
            assert v == pytest.approx(b[k], rel=1e-5, abs=1e-6)
    scores = ours["_score"].to_numpy()
    assert (np.diff(scores) <= 1e-6).all()  # best first


def _strict_cut(scores: list[float], want: int) -> int | None:
    """A limit near ``want`` where the ranking's score strictly drops (no tie at the cut)."""
    for k in range(want, min(len(scores), want + 20)):
        if scores[k - 1] > scores[k] + 1e-5:
            return k
    return None


@pytest.mark.parametrize("query", QUERIES)
def test_pylance_index_same_rows_and_scores(indexed: str, query: str) -> None:
    ours = al.dataset(indexed).to_table(full_text_query=query, with_row_id=True)
    theirs = lance.dataset(indexed).to_table(full_text_query=query, with_row_id=True)
    _same(ours, theirs)


@pytest.mark.parametrize("query", ["apple", "connected searching indexes", "apple apple vector"])
def test_limit_offset_columns_and_dict_queries(indexed: str, query: str) -> None:
    full = lance.dataset(indexed).to_table(full_text_query=query)
    k = _strict_cut(full["_score"].to_pylist(), 7)
    assert k is not None
    for args in ({"limit": k}, {"limit": k - 2, "offset": 2}, {"limit": k, "columns": ["id"]},
                 {"limit": k, "columns": ["id", "_score"]},
                 {"limit": k, "with_row_address": True, "columns": ["g"]}):
        for q in (query, {"query": query, "columns": ["text"]}):
            ours = al.dataset(indexed).to_table(full_text_query=q, with_row_id=True, **args)
            theirs = lance.dataset(indexed).to_table(full_text_query=q, with_row_id=True,
                                                     **args)
            _same(ours, theirs)


@pytest.mark.parametrize("prefilter", [False, True])
def test_filters_before_or_after_the_search(indexed: str, prefilter: bool) -> None:
    for query in ("apple", "database queries"):
        flt = "g = 1 AND id > 100"
        # The cut is taken where pylance's ranking strictly drops: over the filtered rows
        # (prefilter) or over all rows (the filter applies to the best rows found).
        ranking = lance.dataset(indexed).to_table(
            full_text_query=query, filter=flt if prefilter else None, prefilter=prefilter)
        k = _strict_cut(ranking["_score"].to_pylist(), 9)
        assert k is not None
        args: dict[str, Any] = {"full_text_query": query, "filter": flt, "limit": k,
                                "prefilter": prefilter, "with_row_id": True}
        ours = al.dataset(indexed).to_table(**args)
        theirs = lance.dataset(indexed).to_table(**args)
        _same(ours, theirs)
        assert set(ours["g"].to_pylist()) <= {1}
        if not prefilter:
            assert ours.num_rows < k  # the filter cut the k best rows


def test_unindexed_fragments_deletions_and_fast_search(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(_table(800, 2), uri, max_rows_per_file=400)
    ds.create_scalar_index("text", "INVERTED")
    ds = lance.write_dataset(_table(300, 3, start=800), uri, mode="append")
    ds.delete("id % 11 = 0")
    for query in ("apple cherry", "searching lance"):
        for args in ({}, {"filter": "g < 2", "prefilter": True}, {"fast_search": True}):
            ours = al.dataset(uri).to_table(full_text_query=query, with_row_id=True, **args)
            theirs = lance.dataset(uri).to_table(full_text_query=query, with_row_id=True,
                                                 **args)
            _same(ours, theirs)
            assert all(i % 11 for i in ours["id"].to_pylist())
    rows = al.dataset(uri).to_table(full_text_query="apple", with_row_id=True)
    assert max(rows["id"].to_pylist()) >= 800  # appended rows are found
    plan = al.dataset(uri).scanner(full_text_query="apple").explain_plan()
    assert "MatchQuery: column=text" in plan and "FlatMatchQuery" in plan
    assert "FlatMatchQuery" not in al.dataset(uri).scanner(full_text_query="apple",
                                                            fast_search=True).explain_plan()


def test_delta_segments_compaction_and_stable_row_ids(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(_table(600, 4), uri, max_rows_per_file=300,
                             enable_stable_row_ids=True)
    ds.create_scalar_index("text", "INVERTED", with_position=True)
    ds = lance.write_dataset(_table(200, 5, start=600), uri, mode="append")
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    ds = lance.dataset(uri)
    assert len(ds.describe_indices()[0].segments) == 2
    ds.update({"text": "'apple apple apple'"}, where="id = 7")
    ds.delete("id % 13 = 0")

    def check() -> None:
        for query in ("apple", "connection database"):
            ours = al.dataset(uri).to_table(full_text_query=query, with_row_id=True)
            theirs = lance.dataset(uri).to_table(full_text_query=query, with_row_id=True)
            _same(ours, theirs)

    check()
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=10_000)
    check()


async def test_async_api_and_sync_scanner(indexed: str) -> None:
    ds = await alance.open_dataset(indexed)
    table = await ds.to_table(full_text_query="apple", columns=["id"])
    assert table.schema.names == ["id", "_score"]
    assert table.num_rows == await ds.count_rows() - await _non_matching(ds, "apple")
    scanner = al.dataset(indexed).scanner(full_text_query="apple", limit=3)
    assert scanner.to_table().num_rows == 3 == scanner.count_rows()
    assert scanner.output_schema.names[-1] == "_score"


async def _non_matching(ds: alance.LanceDataset, word: str) -> int:
    params = AnalyzerParams()
    want = set(tokenize(params, word))
    texts = (await ds.to_table(columns=["text"]))["text"].to_pylist()
    return sum(1 for t in texts if t is None or not want & set(tokenize(params, t)))


def test_tokenizer_matches_the_tokens_pylance_indexed(tmp_path: Path) -> None:
    """Every row's tokens, decoded from pylance's index files, are alance's tokens."""
    for options in ({}, {"stem": False, "remove_stop_words": False},
                    {"lower_case": False, "ascii_folding": False},
                    {"base_tokenizer": "whitespace"}, {"base_tokenizer": "raw"}):
        uri = str(tmp_path / f"ds{len(list(tmp_path.iterdir()))}")
        texts = _texts(400, 9)
        ds = lance.write_dataset(pa.table({"text": pa.array(texts, pa.string())}), uri)
        ds.create_scalar_index("text", "INVERTED", **options)
        index_dir = next((Path(uri) / "_indices").iterdir())
        meta = lance.file.LanceFileReader(str(index_dir / "metadata.lance"))
        codec = meta.metadata().schema.metadata[b"posting_tail_codec"].decode()
        tokens = lance.file.LanceFileReader(str(index_dir / "part_0_tokens.lance")
                                            ).read_all().to_table()
        vocab = inverted.decode_fst(tokens["_token_fst_bytes"][0].as_py())
        invert = lance.file.LanceFileReader(str(index_dir / "part_0_invert.lance")
                                            ).read_all().to_table()
        docs = lance.file.LanceFileReader(str(index_dir / "part_0_docs.lance")
                                          ).read_all().to_table()
        row_ids = docs["_rowid"].to_numpy()
        per_row: dict[int, Counter[str]] = {}
        for token, tid in vocab.items():
            ids, freqs = inverted.decode_postings(invert["_posting"][tid].as_py(),
                                                  invert["_length"][tid].as_py(), codec)
            for row, freq in zip(row_ids[ids].tolist(), freqs.tolist(), strict=True):
                per_row.setdefault(row, Counter())[token] += freq
        params = params_of(options)
        for i, text in enumerate(texts):
            mine = Counter(tokenize(params, text)) if text is not None else Counter()
            assert mine == per_row.get(i, Counter()), (options, text)


def test_unsupported_queries_and_indices_are_refused(tmp_path: Path, indexed: str) -> None:
    ds = al.dataset(indexed)
    with pytest.raises(alance.UnsupportedFeatureError, match="phrase"):
        ds.to_table(full_text_query='"apple pie"')
    with pytest.raises(alance.UnsupportedFeatureError):
        ds.to_table(full_text_query=lance.query.MatchQuery("apple", "text"))
    with pytest.raises(alance.UnsupportedFeatureError, match="several columns"):
        ds.to_table(full_text_query={"query": "apple", "columns": ["text", "g"]})
    with pytest.raises(alance.UnsupportedFeatureError, match="hybrid"):
        ds.to_table(full_text_query="apple", nearest={"column": "v", "q": [1.0]})
    uri = str(tmp_path / "ngram")
    lance.write_dataset(_table(50, 1), uri).create_scalar_index("text", "INVERTED",
                                                               base_tokenizer="ngram")
    with pytest.raises(alance.UnsupportedFeatureError, match="ngram"):
        al.dataset(uri).to_table(full_text_query="apple")
    with pytest.raises(alance.UnsupportedFeatureError, match="language"):
        params_of({"language": "French"})


def test_without_an_index_the_named_column_is_searched_flat(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(300, 6), uri)
    query = {"query": "apple database", "columns": ["text"]}
    ours = al.dataset(uri).to_table(full_text_query=query, with_row_id=True)
    theirs = lance.dataset(uri).to_table(full_text_query=query, with_row_id=True)
    # pylance returns these in scan order; alance best first.
    theirs = theirs.sort_by([("_score", "descending"), ("_rowid", "ascending")])
    _same(ours, theirs)
    with pytest.raises(alance.InvalidInputError, match="no INVERTED index"):
        al.dataset(uri).to_table(full_text_query="apple")


# -- INVERTED indices built by alance -------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"stem": False, "remove_stop_words": False},
                                     {"lower_case": False, "ascii_folding": False},
                                     {"base_tokenizer": "whitespace", "max_token_length": None}],
                         ids=["default", "no-stem", "case", "whitespace"])
def test_alance_built_index_used_by_pylance(tmp_path: Path, options: dict) -> None:
    uri = str(tmp_path / "ds")
    al.write_dataset(_table(1500, 7), uri, max_rows_per_file=600)
    al.dataset(uri).create_scalar_index("text", "INVERTED", **options)
    assert lance.dataset(uri).list_indices()[0]["type"] == "Inverted"
    for query in QUERIES:
        theirs = lance.dataset(uri).to_table(full_text_query=query, with_row_id=True)
        ours = al.dataset(uri).to_table(full_text_query=query, with_row_id=True)
        _same(ours, theirs)
        k = _strict_cut(theirs["_score"].to_pylist(), 8)
        if k is not None:  # pylance's top-k search (block max scores) over alance's files
            top = lance.dataset(uri).to_table(full_text_query=query, limit=k, with_row_id=True)
            _same(top, theirs.slice(0, k))


def test_alance_index_optimized_and_stable_row_ids(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    al.write_dataset(_table(700, 8), uri, max_rows_per_file=300, enable_stable_row_ids=True)
    al.dataset(uri).create_scalar_index("text", "INVERTED")
    ds = al.write_dataset(_table(300, 9, start=700), uri, mode="append")
    ds.delete("id % 9 = 0")
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    assert len(lance.dataset(uri).describe_indices()[0].segments) == 2
    for query in ("apple", "searching connections"):
        _same(al.dataset(uri).to_table(full_text_query=query, with_row_id=True),
              lance.dataset(uri).to_table(full_text_query=query, with_row_id=True))
    al.dataset(uri).optimize.optimize_indices()  # merged into one segment again
    assert len(lance.dataset(uri).describe_indices()[0].segments) == 1
    _same(al.dataset(uri).to_table(full_text_query="apple", with_row_id=True),
          lance.dataset(uri).to_table(full_text_query="apple", with_row_id=True))


def test_unsupported_analyzers_are_refused_when_building(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = al.write_dataset(_table(50, 1), uri)
    for options, word in (({"base_tokenizer": "ngram"}, "ngram"),
                          ({"with_position": True}, "with_position"),
                          ({"language": "French"}, "language"),
                          ({"custom_stop_words": ["apple"]}, "custom_stop_words"),
                          ({"no_such_option": 1}, "no_such_option")):
        with pytest.raises(alance.UnsupportedFeatureError, match=word):
            ds.create_scalar_index("text", "INVERTED", **options)
    with pytest.raises(alance.InvalidInputError):
        ds.create_scalar_index("id", "INVERTED")
    assert not lance.dataset(uri).list_indices()


def test_legacy_layout_is_refused(tmp_path: Path) -> None:
    """An INVERTED index without ``metadata.lance`` (Lance's oldest layout) is refused."""
    uri = str(tmp_path / "ds")
    al.write_dataset(_table(50, 1), uri)
    al.dataset(uri).create_scalar_index("text", "INVERTED")
    index_dir = next((Path(uri) / "_indices").iterdir())
    (index_dir / "metadata.lance").unlink()
    ds = al.dataset(uri)
    with pytest.raises(alance.UnsupportedFeatureError, match="legacy"):
        ds.to_table(full_text_query="apple")

"""The text analyzer of Lance's INVERTED index, for the settings alance supports (no IO).

pylance's default analyzer (``base_tokenizer="simple"``, ``language="English"``,
``max_token_length=40``, ``lower_case``, ``stem``, ``remove_stop_words``, ``ascii_folding``)
runs, in this order: split the text into runs of letters and digits; drop tokens of 40 or more
UTF-8 bytes; lower-case; stem with the English Snowball stemmer (:mod:`.porter2`); drop the
English stop words (compared with the stemmed tokens); fold accents to ASCII. ``whitespace``
splits on white space only and ``raw`` keeps the whole text as one token. Each filter can be
turned off as in pylance. Other base tokenizers (``ngram``, ``icu``, ``jieba/*``,
``lindera/*``), languages and custom stop words are refused with
:class:`~alance.errors.UnsupportedFeatureError`.

For ASCII text the tokens equal pylance's. For other text the letter test is Python's
``str.isalnum`` (Rust's ``char::is_alphanumeric`` differs for some combining marks) and ASCII
folding is Unicode decomposition with combining marks dropped plus a few ligatures, an
approximation of Lance's folding table.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alance.dataset.query.indices.porter2 import stem
from alance.errors import CorruptFileError, UnsupportedFeatureError

#: The English stop words pylance 14 drops (compared with the stemmed tokens).
_STOP_TEXT = """
a about after again against all am an and are as at be been below between both but by can
did do down each few for from further had has have he her here herself him himself his how i
if in into is it itself just me more most my myself now of off on or other our out over own
re same she should so some such than that the their them then there these they this those
through to too under until up was we were what when where which while who whom will with you
your yourself
"""
ENGLISH_STOP_WORDS = frozenset(_STOP_TEXT.split())
_FOLDS = {"ß": "ss", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ø": "o", "Ø": "O",
          "đ": "d", "Đ": "D", "ł": "l", "Ł": "L", "þ": "th", "Þ": "TH", "ð": "d", "Ð": "D"}
BASE_TOKENIZERS = ("simple", "whitespace", "raw")


@dataclass(frozen=True)
class AnalyzerParams:
    """The analyzer settings of an INVERTED index (the subset alance supports)."""

    base_tokenizer: str = "simple"
    language: str = "English"
    with_position: bool = False
    max_token_length: int | None = 40
    lower_case: bool = True
    stem: bool = True
    remove_stop_words: bool = True
    ascii_folding: bool = True

    def check(self) -> AnalyzerParams:
        """These settings, or :class:`UnsupportedFeatureError` naming what alance lacks."""
        if self.base_tokenizer not in BASE_TOKENIZERS:
            raise UnsupportedFeatureError(
                f"INVERTED index base_tokenizer={self.base_tokenizer!r} is not supported; "
                f"alance tokenizes with {', '.join(BASE_TOKENIZERS)}")
        if (self.stem or self.remove_stop_words) and self.language != "English":
            raise UnsupportedFeatureError(
                f"INVERTED index language={self.language!r} with stemming or stop words is "
                "not supported; alance stems and removes stop words for English only")
        return self

    def to_json(self) -> dict[str, Any]:
        """pylance's ``params`` record of the settings (the keys it writes)."""
        return {"lance_tokenizer": "text", "base_tokenizer": self.base_tokenizer,
                "language": self.language, "with_position": self.with_position,
                "max_token_length": self.max_token_length, "lower_case": self.lower_case,
                "stem": self.stem, "remove_stop_words": self.remove_stop_words,
                "custom_stop_words": None, "ascii_folding": self.ascii_folding,
                "min_ngram_length": 3, "max_ngram_length": 3, "prefix_only": False,
                "block_size": 128, "split_identifiers": False, "split_on_numerics": False,
                "preserve_original": False, "index_operators": False}


_DEFAULTS_OFF = {"lance_tokenizer": (None, "text"), "custom_stop_words": (None,),
                 "min_ngram_length": None, "max_ngram_length": None, "prefix_only": (False,),
                 "block_size": (128,), "split_identifiers": (False,),
                 "split_on_numerics": (False,), "preserve_original": (False,),
                 "index_operators": (False,), "memory_limit": None, "num_workers": None,
                 "format_version": None, "fts_target": None}


def params_of(raw: Mapping[str, Any], what: str = "INVERTED index") -> AnalyzerParams:
    """Analyzer settings from pylance's ``params`` (or ``create_scalar_index`` keywords);
    settings alance cannot honour raise :class:`UnsupportedFeatureError` naming them."""
    known = {f for f in AnalyzerParams.__dataclass_fields__}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in known:
            out[key] = value
        elif key in _DEFAULTS_OFF:
            allowed = _DEFAULTS_OFF[key]
            if allowed is not None and value not in allowed:
                raise UnsupportedFeatureError(f"{what}: {key}={value!r} is not supported")
        else:
            raise UnsupportedFeatureError(f"{what}: option {key!r} is not supported")
    try:
        params = AnalyzerParams(**out)
    except TypeError as exc:
        raise CorruptFileError(f"{what}: bad analyzer settings {dict(raw)!r}") from exc
    return params.check()


def params_from_json(text: bytes | str | None) -> AnalyzerParams:
    """Settings from an index's ``params`` metadata (pylance's defaults when absent)."""
    if not text:
        return AnalyzerParams()
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise CorruptFileError("INVERTED index: bad params metadata") from exc
    if not isinstance(raw, dict):
        raise CorruptFileError("INVERTED index: bad params metadata")
    return params_of(raw)


def _fold(token: str) -> str:
    if token.isascii():
        return token
    out = []
    for ch in token:
        if ch.isascii():
            out.append(ch)
            continue
        if ch in _FOLDS:
            out.append(_FOLDS[ch])
            continue
        decomposed = unicodedata.normalize("NFKD", ch)
        base = "".join(c for c in decomposed if not unicodedata.combining(c))
        out.append(base if base.isascii() and base else ch)
    return "".join(out)


def _split(params: AnalyzerParams, text: str) -> list[str]:
    if params.base_tokenizer == "raw":
        return [text]  # the whole text, even empty
    if params.base_tokenizer == "whitespace":
        return text.split()
    tokens: list[str] = []
    start = -1
    for i, ch in enumerate(text):
        if ch.isalnum():
            if start < 0:
                start = i
        elif start >= 0:
            tokens.append(text[start:i])
            start = -1
    if start >= 0:
        tokens.append(text[start:])
    return tokens


def tokenize(params: AnalyzerParams, text: str) -> list[str]:
    """The tokens of ``text`` under ``params``, in order (repeats kept)."""
    tokens = _split(params, text)
    limit = params.max_token_length
    if limit is not None:
        tokens = [t for t in tokens if len(t.encode()) < limit]
    if params.lower_case:
        tokens = [t.lower() for t in tokens]
    if params.stem:
        tokens = [stem(t) for t in tokens]
    if params.remove_stop_words:
        tokens = [t for t in tokens if t not in ENGLISH_STOP_WORDS]
    if params.ascii_folding:
        tokens = [_fold(t) for t in tokens]
    return tokens


__all__ = ["AnalyzerParams", "ENGLISH_STOP_WORDS", "params_from_json", "params_of", "tokenize"]

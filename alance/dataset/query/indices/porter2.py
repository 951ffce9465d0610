"""The English (Porter2) Snowball stemmer, as Lance's default full-text tokenizer applies it
(no IO).

Written from the description of the algorithm (https://snowballstem.org), in the current
revision, which Lance's stemmer follows: ``R1`` starts after the prefixes ``arsen``,
``commun``, ``emerg``, ``gener``, ``inter``, ``later``, ``organ``, ``past`` and ``univers``;
``-ing`` after a lone consonant and ``y`` becomes ``-ie`` (``dying``); ``-ing`` after
``even``, ``cann``, ``inn``, ``earr``, ``herr``, ``out`` stays; a double consonant after a
lone leading ``a``/``e``/``o`` stays (``add``); ``-ogist`` becomes ``-og``. Words are
expected in lower case (the tokenizer lower-cases first); non-ASCII letters count as
consonants.
"""

from __future__ import annotations

from functools import lru_cache

_VOWELS = frozenset("aeiouy")
_DOUBLES = ("bb", "dd", "ff", "gg", "mm", "nn", "pp", "rr", "tt")
_LI_ENDINGS = frozenset("cdeghkmnrt")

_EXCEPTIONS = {
    "skis": "ski", "skies": "sky", "idly": "idl", "gently": "gentl", "ugly": "ugli",
    "early": "earli", "only": "onli", "singly": "singl", "sky": "sky", "news": "news",
    "howe": "howe", "atlas": "atlas", "cosmos": "cosmos", "bias": "bias", "andes": "andes",
}
_R1_PREFIXES = ("arsen", "commun", "emerg", "gener", "inter", "later", "organ", "past",
                "univers")

_STEP2 = (  # longest first within shared endings; (suffix, replacement)
    ("ization", "ize"), ("ational", "ate"), ("fulness", "ful"), ("ousness", "ous"),
    ("iveness", "ive"), ("tional", "tion"), ("biliti", "ble"), ("lessli", "less"),
    ("entli", "ent"), ("ation", "ate"), ("alism", "al"), ("aliti", "al"), ("ousli", "ous"),
    ("iviti", "ive"), ("fulli", "ful"), ("ogist", "og"), ("enci", "ence"), ("anci", "ance"),
    ("abli", "able"),
    ("izer", "ize"), ("ator", "ate"), ("alli", "al"), ("bli", "ble"), ("ogi", "og"),
    ("li", ""),
)
_STEP3 = (
    ("ational", "ate"), ("tional", "tion"), ("alize", "al"), ("icate", "ic"),
    ("iciti", "ic"), ("ative", ""), ("ical", "ic"), ("ness", ""), ("ful", ""),
)
_STEP4 = ("ement", "ance", "ence", "able", "ible", "ment", "ant", "ent", "ism", "ate",
          "iti", "ous", "ive", "ize", "ion", "al", "er", "ic")


def _is_vowel(c: str) -> bool:
    return c in _VOWELS


def _region_after(word: str, start: int) -> int:
    """Start of the region after the first non-vowel following a vowel, from ``start``."""
    for i in range(start + 1, len(word)):
        if not _is_vowel(word[i]) and _is_vowel(word[i - 1]):
            return i + 1
    return len(word)


def _regions(word: str) -> tuple[int, int]:
    for prefix in _R1_PREFIXES:
        if word.startswith(prefix):
            r1 = len(prefix)
            break
    else:
        r1 = _region_after(word, 0)
    return r1, _region_after(word, r1)


def _short_syllable_at_end(word: str) -> bool:
    n = len(word)
    if n >= 3 and (not _is_vowel(word[-3]) and _is_vowel(word[-2])
                   and not _is_vowel(word[-1]) and word[-1] not in "wxY"):
        return True
    if n == 2 and _is_vowel(word[0]) and not _is_vowel(word[1]):
        return True
    return word.endswith("past")


def _has_vowel(text: str) -> bool:
    return any(_is_vowel(c) for c in text)


def _step_1b(w: str, r1: int) -> str:
    for suffix in ("eedly", "ingly", "edly", "eed", "ing", "ed"):
        if w.endswith(suffix):
            break
    else:
        return w
    base = w[: -len(suffix)]
    if suffix in ("eed", "eedly"):
        if len(base) >= r1 and base not in ("succ", "proc", "exc"):
            return base + "ee"
        return w
    if suffix == "ing":
        if len(base) == 2 and base[1] == "y" and not _is_vowel(base[0]):
            return base[0] + "ie"
        if base in ("even", "cann", "inn", "earr", "herr", "out"):
            return w
    if not _has_vowel(base):
        return w
    if base.endswith(("at", "bl", "iz")):
        return base + "e"
    if base.endswith(_DOUBLES):
        if len(base) == 3 and base[0] in "aeo":
            return base
        return base[:-1]
    if len(base) == r1 and _short_syllable_at_end(base):
        return base + "e"
    return base


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Porter2 stem of a lower-case word."""
    if word in _EXCEPTIONS:
        return _EXCEPTIONS[word]
    if len(word) <= 2:
        return word
    if word.startswith("'"):
        word = word[1:]
    chars = list(word)
    if chars and chars[0] == "y":
        chars[0] = "Y"
    for i in range(1, len(chars)):
        if chars[i] == "y" and _is_vowel(chars[i - 1]):
            chars[i] = "Y"
    marked = chars != list(word)
    w = "".join(chars)
    r1, r2 = _regions(w)

    # Step 0: possessives.
    for suffix in ("'s'", "'s", "'"):
        if w.endswith(suffix):
            w = w[: -len(suffix)]
            break

    # Step 1a.
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith(("ied", "ies")):
        w = w[:-2] if len(w) > 4 else w[:-1]
    elif w.endswith(("us", "ss")):
        pass
    elif w.endswith("s") and _has_vowel(w[:-2]):
        w = w[:-1]

    # Step 1b.
    w = _step_1b(w, r1)

    # Step 1c.
    if len(w) > 2 and w[-1] in "yY" and not _is_vowel(w[-2]):
        w = w[:-1] + "i"

    # Step 2.
    for suffix, repl in _STEP2:
        if w.endswith(suffix):
            if len(w) - len(suffix) >= r1:
                if suffix == "ogi":
                    if w[-4:-3] == "l":
                        w = w[:-3] + repl
                elif suffix == "li":
                    if w[-3:-2] and w[-3] in _LI_ENDINGS:
                        w = w[:-2]
                else:
                    w = w[: -len(suffix)] + repl
            break

    # Step 3.
    for suffix, repl in _STEP3:
        if w.endswith(suffix):
            if len(w) - len(suffix) >= r1:
                if suffix == "ative":
                    if len(w) - len(suffix) >= r2:
                        w = w[: -len(suffix)]
                else:
                    w = w[: -len(suffix)] + repl
            break

    # Step 4.
    for suffix in _STEP4:
        if w.endswith(suffix):
            if len(w) - len(suffix) >= r2:
                if suffix == "ion":
                    if w[-4:-3] in ("s", "t"):
                        w = w[:-3]
                else:
                    w = w[: -len(suffix)]
            break

    # Step 5.
    if w.endswith("e"):
        before = w[:-1]
        if len(before) >= r2 or (len(before) >= r1 and not _short_syllable_at_end(before)):
            w = before
    elif w.endswith("l") and len(w) - 1 >= r2 and w[-2:-1] == "l":
        w = w[:-1]

    return w.replace("Y", "y") if marked else w


__all__ = ["stem"]

"""Lexical search: an English + Arabic tokenizer and a lazily rebuilt ``bm25s`` index.

Tokenisation: case folding, Arabic normalisation (diacritics and tatweel removed,
alef variants unified, alef maqsura to ya), words of two or more characters,
English and Arabic stopwords removed, then stemming: Snowball English / Arabic
from PyStemmer when it is installed (``stemmer="auto"``), otherwise English words
are kept as they are; Arabic words always lose their article and attached
conjunction/preposition prefixes first (a light stemmer).

The BM25 statistics are owned by ``bm25s`` (never computed here). They are rebuilt
at most once per batch of changes, lazily, when the next query arrives: indexing N
documents one by one costs N tokenisations and a single rebuild. A saved index keeps
them (:class:`Postings`), so opening it tokenises and rebuilds nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selfrag_core.errors import MissingDependencyError

_TOKEN = re.compile(r"\w\w+")
_AR_MARKS = re.compile("[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]")
_AR_LETTERS = str.maketrans({"أ": "ا", "إ": "ا", "آ": "ا", "ٱ": "ا", "ى": "ي"})
_AR_PREFIXES = ("وال", "بال", "كال", "فال", "لل", "ال")

# Common Arabic function words (normalised like the text).
_ARABIC_STOPWORDS = """
في من على الى إلى عن ان أن إن كان كانت يكون التي الذي الذين اللذان اللتان اللاتي هذا هذه ذلك تلك
هؤلاء اولئك هو هي هم هن هما انا نحن انت انتم ما لا لم لن قد ثم او أو مع كل بين عند حتى بعد قبل كما اي
أي غير بل لكن اذا إذا لو منذ خلال حول ضد دون فوق تحت عليه عليها فيه فيها منه منها له لها لهم به بها وهو
وهي وقد وفي ومن وعلى وان كل ايضا أيضا اما أما هناك هنا حيث كيف متى اين لماذا ماذا عندما لدى تم يتم
""".split()  # noqa: SIM905


def _normalise_arabic(text: str) -> str:
    return _AR_MARKS.sub("", text).translate(_AR_LETTERS)


def _is_arabic(word: str) -> bool:
    return "\u0600" <= word[0] <= "\u06ff"


def _light_arabic_stem(word: str) -> str:
    for prefix in _AR_PREFIXES:
        if word.startswith(prefix) and len(word) - len(prefix) >= 2:
            return word[len(prefix) :]
    return word


def _english_stopwords() -> frozenset[str]:
    stopwords = _import_bm25s().stopwords
    return frozenset(stopwords.STOPWORDS_EN)


def _import_bm25s() -> Any:
    try:
        import bm25s  # type: ignore[import-untyped]
        import bm25s.stopwords  # type: ignore[import-untyped]
    except ImportError as e:
        raise MissingDependencyError(
            "lexical search needs the bm25s package: pip install 'selfrag[store]' (or pip install bm25s)"
        ) from e
    return bm25s


def _pystemmer(language: str) -> Callable[[str], str] | None:
    try:
        import Stemmer  # type: ignore[import-not-found,import-untyped]
    except ImportError:
        return None
    fn: Callable[[str], str] = Stemmer.Stemmer(language).stemWord
    return fn


class Tokenizer:
    """Text -> list of index terms, for documents and queries alike.

    ``stemmer``: ``"auto"`` (PyStemmer when installed), ``"pystemmer"`` (required),
    or ``None`` (no stemming beyond the light Arabic prefix stripping).
    """

    _CACHE_LIMIT = 500_000

    def __init__(self, stemmer: str | None = "auto") -> None:
        if stemmer not in ("auto", "pystemmer", None):
            raise ValueError(f"stemmer must be 'auto', 'pystemmer' or None, got {stemmer!r}")
        self._stem_en: Callable[[str], str] | None = None
        self._stem_ar: Callable[[str], str] = _light_arabic_stem
        if stemmer is not None:
            self._stem_en = _pystemmer("english")
            if self._stem_en is None and stemmer == "pystemmer":
                raise MissingDependencyError("stemmer='pystemmer' needs PyStemmer: pip install PyStemmer")
            snowball_ar = _pystemmer("arabic")
            if snowball_ar is not None:  # Snowball leaves the article on short words: strip it first
                self._stem_ar = lambda word: snowball_ar(_light_arabic_stem(word))
        self.stemming = "pystemmer" if self._stem_en is not None else "light"
        self._stop = _english_stopwords() | {_normalise_arabic(w) for w in _ARABIC_STOPWORDS}
        self._cache: dict[str, str] = {}

    def _term(self, word: str) -> str:
        """The index term of a new word ("" for a stopword), remembered in the cache."""
        if word in self._stop:
            term = ""
        elif _is_arabic(word):
            term = self._stem_ar(word)
        else:
            term = self._stem_en(word) if self._stem_en is not None else word
        if len(self._cache) >= self._CACHE_LIMIT:
            self._cache.clear()
        self._cache[word] = term
        return term

    def __call__(self, text: str) -> list[str]:
        cache = self._cache
        terms = []
        for word in _TOKEN.findall(_normalise_arabic(text.casefold())):
            term = cache.get(word)
            if term is None:
                term = self._term(word)
            if term:
                terms.append(term)
        return terms


@dataclass(frozen=True)
class Postings:
    """A BM25 index as ``bm25s`` builds it: the score of each term in each document that
    holds it, in compressed sparse column layout (term ``t``'s documents are
    ``indices[indptr[t]:indptr[t + 1]]``, their scores the same slice of ``data``).
    ``vocab`` maps each term to its column. Saved as it is, so loading rebuilds nothing."""

    vocab: dict[str, int]
    data: np.ndarray  # float32, one score per (term, document) pair
    indices: np.ndarray  # int32 document positions
    indptr: np.ndarray  # int64, one more than the terms
    k1: float
    b: float

    @classmethod
    def empty(cls, k1: float, b: float) -> Postings:
        return cls({}, np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(1, np.int64), k1, b)

    def terms(self) -> list[str]:
        """The terms in column order (how they are saved)."""
        terms = [""] * (len(self.indptr) - 1)
        for term, column in self.vocab.items():
            terms[column] = term
        return terms


class LexicalIndex:
    """A ``bm25s`` index over token lists, rebuilt in one go when asked, or restored."""

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self.rebuilds = 0
        self.ids: Sequence[str] = []  # a restored index's: its memory-mapped id column
        self.postings = Postings.empty(k1, b)

    def build(self, ids: Sequence[str], tokens: Sequence[list[str]]) -> None:
        bm25s = _import_bm25s()
        self.rebuilds += 1
        self.ids = list(ids)
        self.postings = Postings.empty(self.k1, self.b)
        if any(tokens):
            retriever = bm25s.BM25(k1=self.k1, b=self.b)  # method "lucene": no non-occurrence scores
            retriever.index([list(t) for t in tokens], show_progress=False)
            index = retriever.scores
            columns = len(index["indptr"]) - 1  # bm25s adds "" to the vocabulary, with no column
            self.postings = Postings(
                {t: c for t, c in retriever.vocab_dict.items() if c < columns},
                np.ascontiguousarray(index["data"], dtype=np.float32),
                np.ascontiguousarray(index["indices"], dtype=np.int32),
                np.ascontiguousarray(index["indptr"], dtype=np.int64),
                self.k1,
                self.b,
            )

    def restore(self, ids: Sequence[str], postings: Postings) -> None:
        """Take a saved index over the documents ``ids`` (as :meth:`build` left it)."""
        self.ids = ids
        self.postings = postings

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every indexed document (in ``ids`` order) for the query terms:
        bm25s's own sum, term by term in float32 (``np.add.at``, fast since numpy 1.25).
        Only the query terms' entries are read: a memory-mapped index is never copied."""
        scores = np.zeros(len(self.ids), dtype=np.float32)
        postings = self.postings
        for term in query_tokens:  # a repeated term counts each time, as in bm25s
            column = postings.vocab.get(term)
            if column is not None:
                start, end = int(postings.indptr[column]), int(postings.indptr[column + 1])
                np.add.at(scores, postings.indices[start:end], postings.data[start:end])
        return scores

"""Lexical search: an English + Arabic tokenizer and a segmented BM25 index.

Tokenisation: case folding, Arabic normalisation (diacritics and tatweel removed,
alef variants unified, alef maqsura to ya), words of two or more characters,
English and Arabic stopwords removed, then stemming: Snowball English / Arabic
from PyStemmer when it is installed (``stemmer="auto"``), otherwise English words
are kept as they are; Arabic words always lose their article and attached
conjunction/preposition prefixes first (a light stemmer).

Identifiers are terms too, written apart or together alike: a word and the number after
it ("PEP 572", "PEP-572", "PEP: 572", "ticket #1234", "E-501") is also the term of the
two together ("pep572", "e501", as "PEP572" and "E501" are), a number's leading zeros
dropped ("PEP-0572" is "pep572"); a dotted number ("3.8", "v2.3.1", "4.2.1") is also one
term. The identifiers of a document's file name (the last part of a source that is a
path or a file name, without its extension: ``pep-0572`` of ``peps/pep-0572.rst``; its
terms with a digit) are a field of their own: indexed with the prefix ``name:``, each
query term with a digit looked up there too (:meth:`Tokenizer.document`,
:meth:`Tokenizer.query`), scored by their IDF alone (:data:`NAME_WEIGHT`), so that a
question naming a numbered document ("What does PEP 572 introduce?", "ticket 1234",
"E501") finds it before the documents that mention the number. A file name's words are
not a field: "python" in a file's name would outrank every passage on Python.

The index stores term frequencies and document lengths (:class:`Postings`), not
scores: BM25 is computed at query time from the statistics of the live documents, as
``bm25s`` computes it. So documents added later go into a segment of their own and
deleted ones are only marked, and the scores are still those of a full rebuild; a
saved index is mapped as it is, so opening it tokenises and rebuilds nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from selfrag_core.errors import MissingDependencyError

_TOKEN = re.compile(r"\w\w+")
_DIGIT = re.compile(r"\d")
#: a number, dotted or not ("572", "3.8", "2.3.1"); a word and the number after it, apart
#: ("pep 572", "pep-572", "pep: 572", ":pep:`572`", "ticket #1234", "e-501", "version 3.8"),
#: make one term, and so does a dotted number (see the module docstring)
_NUMBER = re.compile(r"\d+(?:\.\d+)*")
#: what may stand between a word and its number: spaces, or these marks with spaces around
_MARKS = frozenset("-:#`'\"")
_SPACES = frozenset(" \t")
#: a word that ends in a number with leading zeros ("pep0572"): its term drops them
_ZERO_PADDED = re.compile(r"([^\W\d_]*)0+(\d+)")
#: the prefix of the terms of a document's file name (no word holds a colon)
NAME_FIELD = "name:"
#: a file name's term scores its IDF times this (a text's term at most its IDF, as it occurs
#: more often): a document the question names ranks before those that only mention the name
NAME_WEIGHT = 1.0
#: a file name's extension (a letter first: "3.8" has none)
_EXTENSION = re.compile(r"(?<=[^./\\])\.[^\W\d_]\w{0,7}$")
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
    if text.isascii():  # nothing to normalise (a fast check)
        return text
    return _AR_MARKS.sub("", text).translate(_AR_LETTERS)


def _light_arabic_stem(word: str) -> str:
    for prefix in _AR_PREFIXES:
        if word.startswith(prefix) and len(word) - len(prefix) >= 2:
            return word[len(prefix) :]
    return word


def _unpadded(term: str) -> str:
    """``term`` without the leading zeros of its number ("0572" -> "572", "pep0572" ->
    "pep572"; "0" and "3.08" as they are)."""
    match = _ZERO_PADDED.fullmatch(term)
    return match.group(1) + match.group(2) if match else term


def _text_length(tokens: Sequence[str]) -> int:
    """A chunk's length in BM25: its text's terms, not its file name's (the last ones)."""
    n = len(tokens)
    while n and tokens[n - 1].startswith(NAME_FIELD):
        n -= 1
    return n


def _names(terms: list[str]) -> list[str]:
    """The query terms looked up in the file name field: those with a digit, prefixed."""
    return [NAME_FIELD + _unpadded(t) for t in terms if _DIGIT.search(t)]


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _alone(text: str, start: int) -> bool:
    """Whether the word or number at ``start`` begins there (no word character before it)."""
    return start == 0 or not _word_char(text[start - 1])


def _mark_start(text: str, at: int) -> int:
    """Where the marks between a word and the number at ``at`` begin: spaces, or marks
    (:data:`_MARKS`) with spaces around them; ``at`` when there are none."""
    i = at
    while i > 0 and text[i - 1] in _SPACES:
        i -= 1
    j = i
    while j > 0 and text[j - 1] in _MARKS:
        j -= 1
    if j < i:
        while j > 0 and text[j - 1] in _SPACES:
            j -= 1
        return j
    return i


def file_name(source: str) -> str | None:
    """The file name of a source that is a path, a URL or a file name (its last part,
    without its extension: ``pep-0572`` of ``/peps/pep-0572.rst``), else None (an id such
    as ``4983`` or ``web:italy``, a content source ``doc-...``)."""
    if "/" not in source and "\\" not in source and not _EXTENSION.search(source):
        return None
    name = re.split(r"[/\\]", source.rstrip("/\\"))[-1]
    return _EXTENSION.sub("", name) or None


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
        english = _import_bm25s().stopwords.STOPWORDS_EN
        self._stop = frozenset(english) | {_normalise_arabic(w) for w in _ARABIC_STOPWORDS}
        self._cache: dict[str, str] = {}
        self._named: tuple[str | None, list[str]] = (None, [])  # the last source's file name terms

    def _term(self, word: str) -> str:
        """The index term of a new word ("" for a stopword), remembered in the cache."""
        if word in self._stop:
            term = ""
        elif word[-1].isdigit() and _ZERO_PADDED.fullmatch(word):  # "0572", "pep0572": as written apart
            term = _unpadded(word)
        elif "\u0600" <= word[0] <= "\u06ff":  # Arabic
            term = self._stem_ar(word)
        else:
            term = self._stem_en(word) if self._stem_en is not None else word
        if len(self._cache) >= self._CACHE_LIMIT:
            self._cache.clear()
        self._cache[word] = term
        return term

    @property
    def identity(self) -> str:
        """What a saved BM25 index records: its terms are this tokenizer's when it matches
        (:attr:`stemming`, then ``+identifiers``; an index that records the stemming alone
        was built without identifier or file name terms)."""
        return f"{self.stemming}+identifiers"

    def __call__(self, text: str) -> list[str]:
        folded = _normalise_arabic(text.casefold())
        words = _TOKEN.findall(folded)
        cache = self._cache
        try:
            terms = list(map(cache.__getitem__, words))
        except KeyError:  # a word seen for the first time
            terms = [cache[w] if w in cache else self._term(w) for w in words]
        terms = list(filter(None, terms))  # stopwords' terms are ""
        if _DIGIT.search(folded) is not None:
            terms += self._identifiers(folded)
        return terms

    def _identifiers(self, folded: str) -> list[str]:
        """The identifier terms of case-folded text: a word and the number after it, together
        (its leading zeros dropped), and dotted numbers (without a "v" before them). Found
        from each number back, not by a pattern tried at every letter (four times slower)."""
        out = []
        size = len(folded)
        for match in _NUMBER.finditer(folded):
            start, end = match.span()
            if end < size and (folded[end].isalnum() or folded[end] == "_"):
                continue  # "5mg", "1st": a word's part
            number = match.group()
            dotted = "." in number
            if dotted:  # a dotted number, on its own or after a "v" (not a part of "a.3.8")
                before = folded[start - 1] if start else " "
                if before == "v":
                    before = folded[start - 2] if start > 1 else " "
                if not (before.isalnum() or before in "._"):
                    out.append(number)
            word_end = _mark_start(folded, start)
            if word_end == start or word_end == 0 or not folded[word_end - 1].isalpha():
                continue  # no marks, or no word before them
            word_start = word_end - 1
            while word_start > 0 and folded[word_start - 1].isalpha():
                word_start -= 1
            if not _alone(folded, word_start):
                continue  # the end of a word that holds a digit ("h1n1 5")
            term = self._word_term(folded[word_start:word_end])
            if term:  # not a stopword ("in 2019")
                out.append(term + (number if dotted else number.lstrip("0") or "0"))
        return out

    def _word_term(self, word: str) -> str:
        """The term of a word before a number ("" for a stopword); a letter is its own."""
        if len(word) == 1:  # not a token of its own: "e" of "E-501"
            return "" if word in self._stop else word
        cached = self._cache.get(word)
        return cached if cached is not None else self._term(word)

    def document(self, text: str, source: str | None = None) -> list[str]:
        """The terms a chunk of ``source`` is indexed by: its text's, then its file name's
        identifiers (:func:`file_name`) with the prefix :data:`NAME_FIELD`, each once (not
        counted in the chunk's length)."""
        terms = self(text)
        if source is not None:
            if self._named[0] != source:  # a document's chunks come one after another
                name = file_name(source)
                found = self(name) if name and _DIGIT.search(name) is not None else []
                self._named = (source, sorted({NAME_FIELD + _unpadded(t) for t in found if _DIGIT.search(t)}))
            terms += self._named[1]
        return terms

    def query(self, text: str) -> list[str]:
        """The terms a query is searched by: its text's, and those with a digit again in
        the file name field (:meth:`names`)."""
        terms = self(text)
        return terms + _names(terms)

    def names(self, text: str) -> list[str]:
        """The terms a query is searched by in the file name field: its terms with a digit."""
        return _names(self(text))


@dataclass(frozen=True)
class Postings:
    """One segment of the BM25 index: how often each term occurs in each document that
    holds it, in compressed sparse column layout (term ``t``'s documents are
    ``indices[indptr[t]:indptr[t + 1]]``, ascending, their term frequencies the same slice
    of ``tf``), and each document's length in terms (its text's, not its file name's).
    ``vocab`` maps each term to its column. Nothing here depends on the rest of the index
    (no IDF, no average length), so a segment is never rewritten when documents are added
    or deleted elsewhere, and it is saved as it is."""

    vocab: dict[str, int]
    tf: np.ndarray  # float32, one term frequency per (term, document) pair
    indices: np.ndarray  # int32 document positions in the segment
    indptr: np.ndarray  # int64, one more than the terms
    lengths: np.ndarray  # int32, one per document
    k1: float
    b: float

    @classmethod
    def build(cls, tokens: Sequence[Sequence[str]], k1: float, b: float) -> Postings:
        """The postings of token lists, vectorised: each token gets its term's column, then
        one sort of (column, document) pairs counts the term frequencies."""
        sizes = np.fromiter(map(len, tokens), np.int64, count=len(tokens))
        flat = list(chain.from_iterable(tokens))
        vocab = {term: column for column, term in enumerate(dict.fromkeys(flat))}
        terms = np.fromiter(map(vocab.__getitem__, flat), np.int64, count=len(flat))
        del flat
        pairs = terms * max(len(tokens), 1) + np.repeat(np.arange(len(tokens), dtype=np.int64), sizes)
        lengths = np.fromiter(map(_text_length, tokens), np.int64, count=len(tokens))
        del terms
        pairs, counts = np.unique(pairs, return_counts=True)
        columns, docs = np.divmod(pairs, max(len(tokens), 1))
        indptr = np.zeros(len(vocab) + 1, np.int64)
        np.cumsum(np.bincount(columns, minlength=len(vocab)), out=indptr[1:])
        return cls(
            vocab, counts.astype(np.float32), docs.astype(np.int32), indptr, lengths.astype(np.int32), k1, b
        )

    def __len__(self) -> int:
        return len(self.lengths)

    def terms(self) -> list[str]:
        """The terms in column order (how they are saved)."""
        terms = [""] * (len(self.indptr) - 1)
        for term, column in self.vocab.items():
            terms[column] = term
        return terms

    def column(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The documents holding ``term`` and its frequencies in them (views, not copies)."""
        c = self.vocab.get(term)
        if c is None:
            return None
        start, end = int(self.indptr[c]), int(self.indptr[c + 1])
        return self.indices[start:end], self.tf[start:end]


def _joined(parts: list[np.ndarray], dtype: type[np.generic] = np.float32) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def merged_postings(segments: Sequence[tuple[Postings, np.ndarray]], k1: float, b: float) -> Postings:
    """One segment of the documents the ``(postings, position)`` pairs keep: ``position[d]``
    is document ``d``'s position in the merged segment, or -1 when it is dropped. Term
    frequencies and lengths are copied, nothing is tokenised again."""
    vocab: dict[str, int] = {}
    cols, docs, tfs = [], [], []
    size = 0
    for postings, position in segments:
        kept = position >= 0
        size = max(size, int(position[kept].max()) + 1 if kept.any() else 0)
        remap = np.fromiter((vocab.setdefault(t, len(vocab)) for t in postings.terms()), np.int64)
        entry_cols = np.repeat(remap, np.diff(postings.indptr)) if len(remap) else np.zeros(0, np.int64)
        entry_docs = position[postings.indices]
        live = entry_docs >= 0
        cols.append(entry_cols[live])
        docs.append(entry_docs[live])
        tfs.append(np.asarray(postings.tf)[live])
    lengths = np.zeros(size, np.int32)
    for postings, position in segments:
        kept = position >= 0
        lengths[position[kept]] = postings.lengths[kept]
    col, doc, tf = np.concatenate(cols), np.concatenate(docs), np.concatenate(tfs)
    order = np.lexsort((doc, col))
    indptr = np.zeros(len(vocab) + 1, np.int64)
    np.cumsum(np.bincount(col, minlength=len(vocab)), out=indptr[1:])
    used = np.diff(indptr) > 0  # terms whose every document was dropped leave the vocabulary
    if not used.all():
        keep_terms = np.flatnonzero(used)
        terms = [t for t, c in sorted(vocab.items(), key=lambda item: item[1])]
        vocab = {terms[c]: i for i, c in enumerate(keep_terms.tolist())}
        indptr = np.concatenate(([0], indptr[1:][used]))
    return Postings(
        vocab,
        tf[order].astype(np.float32),
        doc[order].astype(np.int32),
        indptr.astype(np.int64),
        lengths,
        k1,
        b,
    )


class LexicalIndex:
    """BM25 over segments of :class:`Postings`, scored at query time from the statistics
    of the documents counted (Lucene's variant, as ``bm25s`` computes it:
    ``idf * tf / (tf + k1 * (1 - b + b * length / average length))`` with
    ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``).

    Documents are numbered in the order they were added, across segments; ``position``
    maps each to its place among the index's current chunks (-1 once deleted). Adding
    documents appends a segment built from their tokens alone; deleting them only marks
    them. The statistics (N, document frequencies, average length) count the documents
    that were live at the last :meth:`refresh`, so scores are the same as a rebuild over
    those documents gives, to the bit; :meth:`merge` merges segments."""

    #: cached per-term scores kept until the next refresh, in entries (4 bytes each)
    CACHE_ENTRIES = 16_000_000
    #: segments searched side by side before the ones added since the first are merged
    MAX_SEGMENTS = 8

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self.rebuilds = 0
        self.segments: list[tuple[int, Postings]] = []  # (first document number, postings)
        self._live: np.ndarray | None = None  # position >= 0, made once per change of position
        self.stale = False  # documents added or deleted since the last refresh
        self.position = np.zeros(0, np.int64)
        self.counted: np.ndarray | None = None  # None: every document numbered so far
        self._norm: np.ndarray | None = None  # k1 * (1 - b + b * length / average), per document
        self._counted = 0
        self._cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._cached = 0

    @property
    def position(self) -> np.ndarray:
        """Each document's position among the index's current chunks, -1 once deleted."""
        return self._position

    @position.setter
    def position(self, value: np.ndarray) -> None:
        self._position = value
        self._live = None

    @property
    def live(self) -> np.ndarray:
        """Which documents are not deleted (``position >= 0``)."""
        if self._live is None:
            self._live = self._position >= 0
        return self._live

    @property
    def documents(self) -> int:
        """Documents numbered so far, deleted ones included."""
        return len(self.position)

    def build(self, tokens: Sequence[list[str]]) -> None:
        """Index ``tokens`` (one list per current chunk, in order) from scratch."""
        self.rebuilds += 1
        self.restore(Postings.build(tokens, self.k1, self.b))

    def restore(self, postings: Postings) -> None:
        """Take one segment over the current chunks, in order (as :meth:`merge` leaves it)."""
        self.segments = [(0, postings)]
        self.position = np.arange(len(postings), dtype=np.int64)
        self.counted = None
        self.refresh()

    def append_postings(self, postings: Postings, first: int) -> None:
        """Add a segment whose documents are at the chunk positions ``first``, ``first + 1``,
        ... They count in the statistics from the next refresh."""
        if self.counted is None:
            self.counted = np.ones(self.documents, dtype=bool)
        self.segments.append((self.documents, postings))
        self.position = np.concatenate(
            (self.position, np.arange(first, first + len(postings), dtype=np.int64))
        )
        self.counted = np.concatenate((self.counted, np.zeros(len(postings), dtype=bool)))
        self.stale = True

    def keep(self, positions: Sequence[int] | np.ndarray) -> None:
        """The chunks at ``positions`` (ascending) stay, renumbered from 0; the others are
        deleted. They leave the statistics at the next refresh."""
        live = np.flatnonzero(self.live)
        position = np.full(self.documents, -1, np.int64)
        kept = np.asarray(positions, dtype=np.int64)
        position[live[kept]] = np.arange(len(kept), dtype=np.int64)
        self.position = position
        if self.counted is None:
            self.counted = np.ones(self.documents, dtype=bool)
        self.stale = True

    def refresh(self) -> None:
        """Count the live documents in the statistics (cheap: no document is read), then
        merge segments when there are many, or many deleted documents."""
        live = self.live
        self.counted = None if live.all() else live
        self.stale = False
        self._counted = int(live.sum())
        lengths = np.concatenate([p.lengths for _, p in self.segments]) if self.segments else np.zeros(0)
        total = int(lengths[live].sum(dtype=np.int64)) if self._counted else 0
        average = total / self._counted if self._counted else 1.0
        k1, b = self.k1, self.b
        self._norm = (k1 * ((1 - b) + b * lengths.astype(np.float64) / max(average, 1e-9))).astype(np.float32)
        self._forget()
        if len(self.segments) > 1:
            head = len(self.segments[0][1])
            if self.documents >= 2 * max(self._counted, 1) or self.documents - head > head:
                self.merge(0)
            elif len(self.segments) > self.MAX_SEGMENTS:
                self.merge(1)  # the small segments added since the first, into one

    def merge(self, first: int = 0) -> None:
        """Merge the segments from ``first`` on into one over their live documents (after
        a refresh: their statistics are unchanged, their documents renumbered)."""
        if first >= len(self.segments):
            return
        start = self.segments[first][0]
        live = self.position[start:] >= 0
        number = np.full(len(live), -1, np.int64)
        number[live] = np.arange(int(live.sum()), dtype=np.int64)
        pairs = [(p, number[base - start : base - start + len(p)]) for base, p in self.segments[first:]]
        self.segments = [*self.segments[:first], (start, merged_postings(pairs, self.k1, self.b))]
        self.position = np.concatenate((self.position[:start], self.position[start:][live]))
        if self.counted is not None:
            self.counted = np.concatenate((self.counted[:start], self.counted[start:][live]))
            if self.counted.all():
                self.counted = None
        if self._norm is not None:
            self._norm = np.concatenate((self._norm[:start], self._norm[start:][live]))
        self._forget()

    def _forget(self) -> None:
        self._cache.clear()
        self._cached = 0

    def postings(self, start: int = 0) -> Postings:
        """The documents at chunk positions ``start`` and after, as one segment numbered
        from 0 (what a save writes; the index itself is left as it is)."""
        live = self.live
        if start == 0 and len(self.segments) == 1 and live.all():
            return self.segments[0][1]  # as it is: a mapped segment is written from its pages
        numbers = np.where(live & (self.position >= start), self.position - start, -1)
        pairs = [(p, numbers[base : base + len(p)]) for base, p in self.segments]
        return merged_postings(pairs, self.k1, self.b)

    def _term(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """``term``'s scores: the numbers of the documents holding it (each once) and
        their scores, across segments."""
        cached = self._cache.get(term)
        if cached is not None:
            return cached
        found = []
        df = 0
        for base, postings in self.segments:
            column = postings.column(term)
            if column is None:
                continue
            docs, tf = column
            if self.counted is not None:
                counted = self.counted[base + docs]
                if not counted.all():
                    docs, tf = docs[counted], tf[counted]
            df += len(docs)
            found.append((docs if base == 0 else docs + base, tf))
        idf = np.float32(math.log(1 + (self._counted - df + 0.5) / (df + 0.5)))
        norm = self._norm
        assert norm is not None
        numbers = [docs for docs, _ in found]
        if term.startswith(NAME_FIELD):  # a file name's term: in it or not, however long the chunk
            scores = [np.full(len(docs), idf * NAME_WEIGHT, np.float32) for docs, _ in found]
        else:
            scores = [idf * (tf / (norm[docs] + tf)) for docs, tf in found]
        out = (numbers[0], scores[0]) if len(found) == 1 else (_joined(numbers, np.int64), _joined(scores))
        size = len(out[0])
        if size <= self.CACHE_ENTRIES:
            while self._cache and self._cached + size > self.CACHE_ENTRIES:
                self._cached -= len(self._cache.pop(next(iter(self._cache)))[0])
            self._cache[term] = out
            self._cached += size
        return out

    def scores(self, query_tokens: list[str], chunks: int) -> np.ndarray:
        """BM25 score of each of the ``chunks`` current chunks for the query terms (a
        repeated term counts each time, as in ``bm25s``); deleted documents score nothing.
        Only the query terms' entries are read: a memory-mapped index is never copied."""
        if self._norm is None:
            self.refresh()
        raw = np.zeros(self.documents, dtype=np.float32)
        for term in query_tokens:  # a term's documents are distinct: += adds each score once
            docs, scores = self._term(term)
            raw[docs] += scores
        if self.documents == chunks and self.counted is None:
            return raw
        out = np.zeros(chunks, dtype=np.float32)
        live = self.live
        out[self.position[live]] = raw[live]
        return out

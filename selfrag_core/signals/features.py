"""The LLM-free features the fitted checks read (:mod:`selfrag_core.signals.fitted`).

Each feature is a number computed from text alone, named, so a check's JSON file says
which it weighs and how much; none encodes a benchmark's question template. Two sets:

* **support**, of a claim (one sentence) against passages: how much of it the best
  place of one passage holds (its content words in a window of two sentences, their
  pairs in order, its runs of three words), how much the union of all passages holds,
  whether its names and numbers occur, its length, and the lexical verifier's own
  score; with an embedder, the cosine similarity of the claim and its best window;
* **answering**, of a sentence against the question it answers: how long it is, how
  many content words it adds to the question's, how much of it the question already
  holds, whether it names or numbers anything the question does not, and how much of
  what it adds the passages hold (a restatement or a hedge, "The document states that
  ...", adds words no passage holds); with an embedder, the cosine similarity of the two.

``embed``: a function from a list of texts to vectors (an embedder's
``embed_documents``), or None: then the features that need it are absent, and a check
fitted without them is used.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from selfrag_core.signals.text import NUMBER, clean_sentence, content, names, split_sentences, stem, tokens

Embed = Callable[[list[str]], Any]

SUPPORT_FEATURES = (
    "window", "union", "pairs", "runs", "names_missing", "numbers_missing", "length", "lexical",
)  # fmt: skip
ANSWERING_FEATURES = (
    "length", "added", "restated", "new_names", "new_numbers", "supported_share", "added_supported",
)  # fmt: skip
SEMANTIC = "cosine"


def _stems(text: str) -> list[str]:
    return [stem(t) for t in content(tokens(text))]


@dataclass(frozen=True)
class _Passage:
    sentences: tuple[frozenset[str], ...]  # each sentence's content stems
    stems: frozenset[str]
    pairs: frozenset[tuple[str, str]]  # consecutive content stems, within a sentence
    runs: frozenset[tuple[str, str, str]]  # consecutive tokens
    words: frozenset[str]
    windows: tuple[str, ...]  # two sentences at a time, as text


@lru_cache(maxsize=256)  # an answer's sentences are each checked against the same passages
def _passage(text: str) -> _Passage:
    pieces = split_sentences(text)
    seqs = [_stems(p) for p in pieces]
    sets = tuple(frozenset(s) for s in seqs)
    words = tokens(text)
    windows = tuple(" ".join(pieces[i : i + 2]) for i in range(max(1, len(pieces) - 1))) if pieces else ()
    return _Passage(
        sets,
        frozenset().union(*sets) if sets else frozenset(),
        frozenset(pair for s in seqs for pair in itertools.pairwise(s)),
        frozenset(zip(words, words[1:], words[2:], strict=False)),
        frozenset(words),
        windows,
    )


def _covered_by_runs(words: list[str], runs: frozenset[tuple[str, str, str]]) -> float:
    covered = [False] * len(words)
    for i in range(len(words) - 2):
        if (words[i], words[i + 1], words[i + 2]) in runs:
            covered[i] = covered[i + 1] = covered[i + 2] = True
    return sum(covered) / len(words) if words else 0.0


def _window_share(wanted: set[str], p: _Passage, size: int) -> float:
    """The largest share (of ``size``) of ``wanted`` that a window of two sentences of
    ``p`` holds, 0 for a passage without sentences."""
    share = 0.0
    for i, here in enumerate(p.sentences):
        held = here | p.sentences[i + 1] if i + 1 < len(p.sentences) else here
        share = max(share, len(wanted & held) / size)
    return share


def _missing_share(wanted: set[str], p: _Passage) -> float:
    """The share of ``wanted`` (names or numbers, not empty) that ``p``'s words lack."""
    return sum(n not in p.words for n in wanted) / len(wanted)


def support_features(
    claim: str, passages: Sequence[str], lexical: float, embed: Embed | None = None
) -> dict[str, float]:
    """The support features of ``claim`` against ``passages`` (``lexical``: the lexical
    verifier's best score for it), with :data:`SEMANTIC` when ``embed`` is given."""
    text = clean_sentence(claim)
    words = tokens(text)
    seq = _stems(text)
    wanted = set(seq)
    size = len(wanted) or 1
    pairs = set(itertools.pairwise(seq))
    named = {n for n in names(text) if not NUMBER.fullmatch(n)}
    numbers = {t.replace(",", "") for t in words if NUMBER.fullmatch(t)}
    window = union_share = pair_share = run_share = 0.0
    names_missing = numbers_missing = 1.0
    union: set[str] = set()
    prepared = [_passage(p) for p in passages]
    for p in prepared:
        union |= p.stems
        window = max(window, _window_share(wanted, p, size))
        if pairs:
            pair_share = max(pair_share, len(pairs & p.pairs) / len(pairs))
        run_share = max(run_share, _covered_by_runs(words, p.runs))
        if named:
            names_missing = min(names_missing, _missing_share(named, p))
        if numbers:
            numbers_missing = min(numbers_missing, _missing_share(numbers, p))
    union_share = len(wanted & union) / size
    found = {
        "window": window,
        "union": union_share,
        "pairs": pair_share if pairs else window,
        "runs": run_share,
        "names_missing": names_missing if named and prepared else 0.0,
        "numbers_missing": numbers_missing if numbers and prepared else 0.0,
        "length": math.log1p(len(wanted)),
        "lexical": lexical,
    }
    if embed is not None:
        windows = _closest_windows(wanted, prepared)
        found[SEMANTIC] = float(_cosines(embed, text, windows).max()) if windows else 0.0
    return found


#: how many windows, those sharing most content words with the claim, are embedded
EMBEDDED_WINDOWS = 8


def _closest_windows(wanted: set[str], prepared: list[_Passage]) -> list[str]:
    scored = []
    for p in prepared:
        for i, window in enumerate(p.windows):
            held = p.sentences[i].union(*p.sentences[i + 1 : i + 2]) if p.sentences else frozenset()
            scored.append((len(wanted & held), window))
    scored.sort(key=lambda pair: -pair[0])
    return [window for _, window in scored[:EMBEDDED_WINDOWS]]


def answering_features(
    sentence: str, question: str, embed: Embed | None = None, passages: Sequence[str] = ()
) -> dict[str, float]:
    """The answering features of ``sentence`` as an answer to ``question`` read against
    the retrieved ``passages``, with :data:`SEMANTIC` when ``embed`` is given."""
    text = clean_sentence(sentence)
    words = tokens(text)
    said = set(_stems(text))
    asked = set(_stems(question))
    given = set(tokens(question))
    added = said - asked
    held = added & frozenset().union(*(_passage(p).stems for p in passages))
    found = {
        "length": math.log1p(len(words)),
        "added": math.log1p(len(said - asked)),
        "restated": len(said & asked) / len(said) if said else 1.0,
        "new_names": float(any(n not in given for n in names(text) if not NUMBER.fullmatch(n))),
        "new_numbers": float(any(NUMBER.fullmatch(t) and t not in given for t in words)),
        "supported_share": len(held) / len(added) if added else 0.0,
        "added_supported": math.log1p(len(held)),
    }
    if embed is not None:
        found[SEMANTIC] = float(_cosines(embed, question, [text])[0])
    return found


def _cosines(embed: Embed, text: str, others: list[str]) -> np.ndarray:
    vectors = np.asarray(embed([text, *others]), dtype=np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    result: np.ndarray = vectors[1:] @ vectors[0]
    return result


RELEVANCE_FEATURES = ("best", "window", "union", "length")


def relevance_features(
    question: str, passages: Sequence[str], embed: Embed | None = None
) -> dict[str, float]:
    """The relevance features of the retrieved ``passages`` to ``question``: the share of
    the question's content words that the best passage holds, its best window of two
    sentences, and all of them together, and how many there are; with ``embed``,
    :data:`SEMANTIC`, the cosine of the question and its closest window. A backend's
    scores cannot say "nothing relevant" (min-max scaled, the best of irrelevant
    passages scores 1): these can."""
    asked = set(_stems(question))
    size = len(asked) or 1
    prepared = [_passage(p) for p in passages]
    best = window = 0.0
    union: set[str] = set()
    for p in prepared:
        union |= p.stems
        best = max(best, len(asked & p.stems) / size)
        for i, here in enumerate(p.sentences):
            held = here | p.sentences[i + 1] if i + 1 < len(p.sentences) else here
            window = max(window, len(asked & held) / size)
    found = {
        "best": best,
        "window": window,
        "union": len(asked & union) / size,
        "length": math.log1p(len(asked)),
    }
    if embed is not None:
        windows = _closest_windows(asked, prepared)
        found[SEMANTIC] = float(_cosines(embed, question, windows).max()) if windows else 0.0
    return found

"""The claim-level verifier: is each sentence of an answer supported by one passage?

Everything that decides whether an answer is supported (citations, grounding,
SelfIRAG's ``stop_when_supported``, SelfHealingRAG's evidence, the evaluation's
``unsupported`` metric) asks a :class:`Verifier`. The default, :class:`LexicalVerifier`,
needs no LLM and no model:

* the answer is split into sentences that survive lists ("1.", "- "), markup
  (``<p>``, ``<br>``, ``<li>``), hard-wrapped lines, decimals and abbreviations
  (:func:`sentence_spans`);
* each sentence is checked against **one passage at a time**, never the union of all
  (words of two documents do not make a supported sentence);
* its **numbers, dates and names** must occur in the passage, in the sentence the claim
  is read from (or the one before it, when that sentence opens with a pronoun): a
  year the passage does not hold, or a name taken from another sentence, caps the score;
* a **negation** the passage's sentence does not share (or drops) caps the score ("not
  only" negates nothing);
* a **list** whose item the passage does not hold caps the score, and so does a **name of
  several words** ("Washington County") the passage does not hold as one, though it
  holds each word;
* **degenerate text** (a repetition loop, an "Answer:" loop) is never supported;
* with an ``embedder`` (the index's own, or the local MiniLM), the cosine similarity of
  the sentence and the passage's best window lifts paraphrases the word check misses;
  the checks above still cap it.

With the question (:func:`verify_answer`'s ``question``), the answer is also held to it:
its names and numbers are given, not claimed; the "no" of an answer to a yes/no question
is its answer, not a negation a passage must share; a sentence that picks one of two
alternatives restates the question's words, and is checked against the passages' dates
(a comparison by date) or against what each alternative's own passage holds of the
question; an answer that gives no date to a "when" question, no number to a "how many"
one, neither alternative to a question offering two, or nothing the question did not say
scores at most :data:`NOT_AN_ANSWER` (:func:`not_an_answer`); and the sentences' scores
are weighed by how far the answer speaks to the question, read where the words it adds to
the question come from (:func:`answer_place_coverage`).

A score is in [0, 1]; a sentence is supported at ``threshold`` (0.5) and above. The
answer's score is the mean of the mean and the minimum of its sentences' scores, so
one invented sentence pulls a long answer down.

A verifier is one small protocol, ``verify(sentences, passages) -> list[Verdict]``,
so an NLI or fact-checking model a user has can replace the default
(:class:`CrossEncoderVerifier` wraps a sentence-transformers ``CrossEncoder``; no weights
are shipped or downloaded).
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any

import numpy as np

from selfrag_core.comparison import (
    Comparison,
    Resolution,
    alternatives,
    both_hold,
    chosen,
    decided,
    favoured,
    same_origin,
)
from selfrag_core.grounding import (
    STOPWORDS,
    asked_stems,
    check_support_with,
    content_stems,
    question_coverage,
    repetition,
)
from selfrag_core.protocols import Verdict as Verdict
from selfrag_core.protocols import Verifier as Verifier
from selfrag_core.signals.features import answering_features, support_features
from selfrag_core.signals.fitted import Checks, LogisticCheck, shipped
from selfrag_core.signals.text import GENERIC as _GENERIC
from selfrag_core.signals.text import NUMBER as _NUMBER
from selfrag_core.signals.text import PRONOUNS as _PRONOUNS
from selfrag_core.signals.text import clean_sentence as clean_sentence
from selfrag_core.signals.text import content as _content
from selfrag_core.signals.text import names as _names
from selfrag_core.signals.text import negated as _negated
from selfrag_core.signals.text import number as _number
from selfrag_core.signals.text import sentence_spans as sentence_spans
from selfrag_core.signals.text import split_sentences as split_sentences
from selfrag_core.signals.text import stem as _stem
from selfrag_core.signals.text import strip_markup as strip_markup
from selfrag_core.signals.text import tokens as _tokens

#: the score at which a sentence counts as supported
THRESHOLD = 0.5

_YES_NO_START = re.compile(r"^\s*(?:yes|no|نعم|لا)\b[\s,.!:;-]*", re.IGNORECASE)


@dataclass(frozen=True)
class AnswerVerdict:
    """The verdicts of an answer's sentences and the answer's score (None when it has no
    sentence with a content word to check). ``probability``: the fitted support check's
    probability that the answer is supported (:mod:`selfrag_core.signals.fitted`);
    ``informativeness``: the fitted answering check's probability that it answers the
    question, in [0, 1] (None without a question); ``answering_threshold``: where that
    check passes (:attr:`answers`)."""

    sentences: list[tuple[str, Verdict]] = field(default_factory=list)
    score: float | None = None
    threshold: float = THRESHOLD
    probability: float | None = None
    informativeness: float | None = None
    answering_threshold: float = THRESHOLD

    @property
    def answers(self) -> bool:
        """Whether the answer says something the question asks (True when unknown)."""
        return self.informativeness is None or self.informativeness >= self.answering_threshold

    @property
    def supported(self) -> bool:
        return self.score is not None and self.score >= self.threshold

    @property
    def supported_share(self) -> float | None:
        if not self.sentences:
            return None
        return sum(v.supported for _, v in self.sentences) / len(self.sentences)


def best(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict of the passage that supports a sentence best (the first on a tie), or a
    ``"no_passage"`` verdict when there is none."""
    return max(verdicts, key=lambda v: v.score, default=Verdict(0.0, False, None, "no_passage"))


@dataclass
class _Sentence:
    tokens: list[str]
    stems: set[str]
    names: set[str]
    pronoun: bool


@dataclass
class _Passage:
    stems: set[str]
    names: set[str]
    sentences: list[_Sentence]
    text: str
    joined: str = ""  # its tokens, one space apart, with a space at each end

    @classmethod
    def of(cls, text: str) -> _Passage:
        sentences = []
        for piece in split_sentences(text):
            tokens = _tokens(piece)
            sentences.append(
                _Sentence(
                    tokens,
                    {_stem(t) for t in _content(tokens)},
                    {n for n in _names(piece)} | {_number(t) for t in tokens if _NUMBER.fullmatch(t)},
                    any(t in _PRONOUNS and t not in ("who", "which") for t in tokens[:4]),
                )
            )
        stems = set().union(*(s.stems for s in sentences)) if sentences else set()
        names = {t for s in sentences for t in s.tokens} | {_number(t) for s in sentences for t in s.tokens}
        return cls(stems, names, sentences, text, " " + " ".join(_tokens(text)) + " ")


@dataclass
class _Claim:
    text: str
    tokens: list[str]
    stems: list[str]
    names: set[str]
    negated: bool
    items: list[set[str]]
    loop: str | None
    phrases: list[str] = field(default_factory=list)
    polar: bool = False  # it answers a yes/no question about two things: its negation is its answer
    given: frozenset[str] = frozenset()  # the question's words, which a choice's restates

    @classmethod
    def of(cls, sentence: str, question: _Question | None = None) -> _Claim:
        """The claim of ``sentence``; with the ``question``, its names and numbers are
        given, not claimed, and so are its words when it picks an alternative or answers
        yes or no ("Rolling Stone is published more often than Shonen Jump")."""
        text = clean_sentence(sentence)
        body = _YES_NO_START.sub("", text)  # "No, X is not Y": the leading "No" answers the question
        tokens = _tokens(body)
        given = question.names if question else frozenset()
        return cls(
            text,
            tokens,
            [_stem(t) for t in _content(tokens)],
            _names(body) - given,
            _negated(tokens),
            _list_items(body),
            repetition(sentence),
            [p for p in _phrases(body) if not set(p.split()) <= given],
            bool(question and question.two_things),
            question.stems if question and (question.polar or question.offered) else frozenset(),
        )


@dataclass(frozen=True)
class _Question:
    """What a question gives: its names and numbers, its content stems, whether it asks
    yes or no, the two alternatives it offers (or None)."""

    names: frozenset[str]
    stems: frozenset[str]
    polar: bool
    offered: tuple[str, str] | None = None
    two_things: bool = False  # a yes/no question about two things ("Are A and B both X?")

    @classmethod
    @lru_cache(maxsize=256)  # one verify_answer reads its question three times (checks, topic, pick)
    def of(cls, question: str) -> _Question:
        tokens = _tokens(question)
        names = _names(question) | {_number(t) for t in tokens if _NUMBER.fullmatch(t)}
        polar = bool(tokens) and tokens[0] in _AUXILIARIES
        stems = frozenset(_stem(t) for t in _content(tokens))
        two = polar and _TWO_THINGS.search(question) is not None
        return cls(frozenset(names), stems, polar, alternatives(question), two)


#: a yes/no question about two things ("Are A and B both X?", "Is A taller than B?")
_TWO_THINGS = re.compile(
    r"(?<!\w)(?:both|and|same|different|differ|either|neither|than|share|و|كلا|كلاهما|نفس)(?!\w)", re.I
)
_AUXILIARIES = frozenset([
    "is", "are", "was", "were", "do", "does", "did", "can", "could", "has", "have", "had", "will",
    "would", "should", "هل",
])  # fmt: skip
#: runs of two or more capitalised words ("Washington County"): a name of several words
_PHRASE = re.compile(r"\b[A-Z][\w'’.-]*(?:\s+(?:of\s+|de\s+|von\s+|the\s+)?[A-Z][\w'’.-]*)+")


def _phrases(sentence: str) -> list[str]:
    """The names of several words of ``sentence``, as their tokens joined by spaces
    ("washington county"), the sentence's first word left out when it is a stopword."""
    found = []
    for m in _PHRASE.finditer(unicodedata.normalize("NFKC", sentence)):
        tokens = _tokens(m.group())
        while tokens and (tokens[0] in STOPWORDS or tokens[0] in _PRONOUNS or tokens[0] in _GENERIC):
            tokens = tokens[1:]  # "Both Truth in Science": the sentence's first word
        if tokens and tokens[-1] == "s":  # "Bob Seger's"
            tokens = tokens[:-1]
        if len(tokens) >= 2:
            found.append(" ".join(tokens))
    return found


#: what separates a list's items: a comma (not of "1,000"), "and", "or", the Arabic comma and "و"
_ITEM_SEPARATOR = re.compile(r",(?!\d{3})\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|،\s*|\s+و")


def _list_items(sentence: str) -> list[set[str]]:
    """The content stems of each item of a list in ``sentence`` ("A, B, and C"), or []."""
    parts = [p for p in _ITEM_SEPARATOR.split(sentence) if p.strip()]
    if len(parts) < 3:
        return []
    items = [{_stem(t) for t in _content(_tokens(p)) if t not in _GENERIC} for p in parts[1:]]
    return [i for i in items if i]  # the first part holds the sentence's subject and verb


class LexicalVerifier:
    """The default verifier: no LLM; words, numbers, names, negations and lists checked
    against one passage at a time (see the module docstring). ``embedder``: an object
    with ``embed_documents(texts) -> vectors`` (the index's embedder, ``LocalEmbeddings``);
    its cosine similarity lifts paraphrases, above ``semantic_floor`` mapped linearly
    onto [0, 1]. ``checks``: the fitted checks its answers' ``probability`` and
    ``informativeness`` are read with (:func:`checks_of`), e.g. ``Checks.load(path)`` of
    a file ``selfrag eval --fit-verifier`` wrote; None: the shipped ones."""

    def __init__(
        self,
        *,
        threshold: float = THRESHOLD,
        embedder: Any = None,
        semantic_floor: float = 0.55,
        checks: Checks | None = None,
    ) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold!r}")
        if checks is not None and not isinstance(checks, Checks):
            raise TypeError(f"checks must be Checks (Checks.load(path)) or None, got {type(checks).__name__}")
        self.threshold = threshold
        self.embedder = embedder
        self.semantic_floor = semantic_floor
        self.checks = checks

    def verify(
        self, sentences: Sequence[str], passages: Sequence[str], question: str = ""
    ) -> list[list[Verdict]]:
        prepared = [_Passage.of(p) for p in passages]
        asked = _Question.of(question) if question else None
        claims = [_Claim.of(s, asked) for s in sentences]
        semantic = (
            _semantic_matrix(self, claims, prepared) if self.embedder is not None and prepared else None
        )
        rows = []
        for i, claim in enumerate(claims):
            row = []
            for j, passage in enumerate(prepared):
                score, reason = self._score(
                    claim, passage, None if semantic is None else float(semantic[i, j])
                )
                row.append(Verdict(score, score >= self.threshold, j, reason))
            rows.append(row)
        return rows

    def _score(self, claim: _Claim, passage: _Passage, semantic: float | None) -> tuple[float, str | None]:
        if claim.loop:
            return 0.0, claim.loop
        if not claim.stems:
            return 0.0, "no_content"
        weights = [0.5 if s in _GENERIC else 1.0 for s in claim.stems]
        found = passage.stems | claim.given
        hit = sum(w for s, w in zip(claim.stems, weights, strict=True) if s in found)
        miss = sum(weights) - hit
        score = hit / (hit + 2.0 * miss) if hit + miss else 0.0  # a missing word weighs twice a found one
        reason = None if score >= self.threshold else "low_overlap"
        if semantic is not None and semantic > score:
            score, reason = semantic, None
        cap, why = self._caps(claim, passage)
        if why is not None and score > cap:
            return cap, why
        return score, reason or why

    @staticmethod
    def _caps(claim: _Claim, passage: _Passage) -> tuple[float, str | None]:
        """The cap on the claim's score against ``passage`` and why; (1.0, None): none."""
        return _names_cap(claim, passage) or _reading_cap(claim, passage) or (1.0, None)


def _names_cap(claim: _Claim, passage: _Passage) -> tuple[float, str] | None:
    """The cap on the claim's score when ``passage`` lacks one of its names or numbers,
    or holds a number of it about something else; None when none is lacking."""
    missing = sorted(n for n in claim.names if n not in passage.names and _stem(n) not in passage.stems)
    numbers = [n for n in missing if _NUMBER.fullmatch(n)]
    if numbers:
        return 0.1, f"number_not_in_source:{numbers[0]}"
    if missing:
        return 0.25, f"name_not_in_source:{missing[0]}"
    for phrase in claim.phrases:  # "Washington County" from "Washington" and "Fairfax County"
        if f" {phrase} " not in passage.joined:
            return 0.3, f"name_not_in_source:{phrase}"
    for number in sorted(n for n in claim.names if _NUMBER.fullmatch(n)):
        if not any(_bound(claim, w) for w in _windows(passage, number)):
            return 0.3, f"misattributed:{number}"
    return None


def _reading_cap(claim: _Claim, passage: _Passage) -> tuple[float, str] | None:
    """The cap on the claim's score when the sentence it is read from negates it (or it
    negates that sentence), or ``passage`` lacks an item of its list; None otherwise."""
    window = None if claim.polar else _home(claim, passage)
    if window is not None:  # the sentence read, not the one before it it may refer back to
        tokens = window[-1].tokens
        if claim.negated != _negated(tokens, None if claim.negated else set(claim.stems)):
            return 0.2, "negation"
    for item in claim.items:
        if len(item & passage.stems) * 2 < len(item):
            return 0.35, "list_item_not_in_source"
    return None


def _window(passage: _Passage, i: int) -> list[_Sentence]:
    """Sentence ``i`` of the passage, with the one before it when it refers back with a
    pronoun ("She won ...")."""
    here = passage.sentences[i]
    return [passage.sentences[i - 1], here] if here.pronoun and i > 0 else [here]


def _windows(passage: _Passage, number: str) -> list[list[_Sentence]]:
    return [_window(passage, i) for i, s in enumerate(passage.sentences) if number in s.names]


def _bound(claim: _Claim, window: list[_Sentence]) -> bool:
    """Whether a number of the claim, read in ``window``, is about what the claim says:
    not when the window names someone the claim does not while the claim names someone
    the window does not ("Einstein won in 1903" against "Curie won in 1903")."""
    names = {n for s in window for n in s.names if not _NUMBER.fullmatch(n)}
    tokens = {t for s in window for t in s.tokens}
    claimed = {n for n in claim.names if not _NUMBER.fullmatch(n)}
    return not (names - claimed and claimed - tokens - names)


def _home(claim: _Claim, passage: _Passage) -> list[_Sentence] | None:
    """The passage's sentence the claim is read from: the one sharing most of its words
    (with the one before it when it refers back with a pronoun)."""
    if not passage.sentences:
        return None
    stems = set(claim.stems)
    best = max(range(len(passage.sentences)), key=lambda i: len(stems & passage.sentences[i].stems))
    return _window(passage, best)


def _semantic_matrix(verifier: LexicalVerifier, claims: list[_Claim], passages: list[_Passage]) -> np.ndarray:
    """The embedder's support of each claim by each passage: the cosine similarity of the
    claim and the passage's best window of two sentences, ``semantic_floor`` and below
    mapped to 0, 1 to 1."""
    windows = []
    for passage in passages:
        texts = [" ".join(s.tokens) for s in passage.sentences] or [passage.text]
        windows.append([" ".join(texts[k : k + 2]) for k in range(max(1, len(texts) - 1))])
    embedder = verifier.embedder
    embed: Callable[[list[str]], Any] = getattr(embedder, "embed_documents", None) or embedder
    texts = [c.text for c in claims] + [w for ws in windows for w in ws]
    vectors = np.asarray(embed(texts), dtype=np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    similarity = vectors[: len(claims)] @ vectors[len(claims) :].T
    bounds = np.cumsum([0] + [len(ws) for ws in windows])
    best = np.stack([similarity[:, a:b].max(axis=1) for a, b in itertools.pairwise(bounds)], axis=1)
    floor = verifier.semantic_floor
    return np.clip((best - floor) / (1.0 - floor), 0.0, 1.0) if floor < 1.0 else np.zeros_like(best)


class CrossEncoderVerifier:
    """A verifier over an NLI cross-encoder the user has (sentence-transformers'
    ``CrossEncoder("cross-encoder/nli-deberta-v3-small")``, for instance, loaded by the
    user: nothing is downloaded here). ``model.predict([(passage, sentence), ...])``
    returns one row of label scores per pair; ``entailment`` is the column of the
    entailment label (read from the model's ``config.id2label`` when it has one). The
    score is the softmax probability of entailment; loops are never supported."""

    def __init__(self, model: Any, *, threshold: float = THRESHOLD, entailment: int | None = None) -> None:
        if not callable(getattr(model, "predict", None)):
            raise TypeError(
                "CrossEncoderVerifier needs a model with predict(pairs), "
                "e.g. a sentence-transformers CrossEncoder"
            )
        self.model = model
        self.threshold = threshold
        self.entailment = entailment if entailment is not None else _entailment_column(model)

    def verify(
        self, sentences: Sequence[str], passages: Sequence[str], question: str = ""
    ) -> list[list[Verdict]]:
        pairs = [(p, clean_sentence(c)) for c in sentences for p in passages]
        scores = iter(list(self.model.predict(pairs)) if pairs else [])
        rows = []
        for sentence in sentences:
            loop = repetition(sentence)
            row = []
            for j in range(len(passages)):
                score = 0.0 if loop else _softmax(next(scores))[self.entailment]
                supported = score >= self.threshold
                row.append(Verdict(score, supported, j, loop or (None if supported else "not_entailed")))
            rows.append(row)
        return rows


def _entailment_column(model: Any) -> int:
    labels = getattr(getattr(model, "config", None), "id2label", None) or {}
    for index, label in dict(labels).items():
        if str(label).casefold().startswith("entail"):
            return int(index)
    raise ValueError("cannot tell the entailment column of this model: pass entailment=<its index>")


def _softmax(row: Any) -> list[float]:
    values = [float(x) for x in (row if hasattr(row, "__iter__") else [row])]
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    total = sum(exps)
    return [e / total for e in exps]


DEFAULT = LexicalVerifier()


def verify_answer(
    answer: str, passages: Sequence[str], verifier: Verifier | None = None, question: str = ""
) -> AnswerVerdict:
    """Each sentence of ``answer`` (those with a content word) checked by ``verifier``
    (the default :class:`LexicalVerifier`) against ``passages``, and the answer's score.
    With ``question``, the lexical verifier's sentence scores are also weighed by how far
    the passage they are read from speaks to the question
    (:func:`~selfrag_core.grounding.question_coverage`: a name copied from a passage on
    another subject is supported, but is no answer) and held to its picks and asked kind
    (:func:`not_an_answer`); a verifier of yours is taken as it scores. Beside the score,
    the fitted checks' ``probability`` (supported) and ``informativeness`` (answers the
    question) of :mod:`selfrag_core.signals.fitted`."""
    checker = verifier or DEFAULT
    loop = repetition(answer)
    if loop is not None:  # a loop across sentences ("Answer: 2003\nAnswer: 2004") is one
        return AnswerVerdict(
            [(clean_sentence(answer), Verdict(0.0, False, None, loop))],
            0.0,
            checker.threshold,
            0.0,
            0.0 if question else None,
        )
    sentences = _checked_sentences(answer)
    if not sentences:
        return AnswerVerdict([], None, checker.threshold)
    texts = list(passages)
    verdicts = [best(row) for row in checker.verify(sentences, texts, question)]
    fitted = _fitted(sentences, [v.score for v in verdicts], texts, question, checker)
    if question and isinstance(checker, LexicalVerifier):  # a verifier of yours gets none of its rules
        verdicts = _on_topic(verdicts, sentences, question, texts, checker.threshold)
        verdicts = _compared(verdicts, sentences, question, texts, checker.threshold)
        why = not_an_answer(answer, question)
        if why is not None:
            verdicts = [
                v if v.score <= NOT_AN_ANSWER else Verdict(NOT_AN_ANSWER, False, v.passage, why)
                for v in verdicts
            ]
    score = _mean_and_min([v.score for v in verdicts])
    return AnswerVerdict(list(zip(sentences, verdicts, strict=True)), score, checker.threshold, *fitted)


def _mean_and_min(scores: Sequence[float]) -> float:
    """An answer's score from its sentences': the mean of their mean and their minimum, so
    one invented sentence pulls a long answer down."""
    return 0.5 * (sum(scores) / len(scores)) + 0.5 * min(scores)


def _fitted(
    sentences: list[str], lexical: list[float], passages: list[str], question: str, checker: Verifier
) -> tuple[float, float | None, float]:
    """The fitted checks' probabilities for an answer (the checks of ``checker``,
    :func:`checks_of`): that it is supported (:func:`support_probability`), that it
    answers ``question`` (its most answering sentence's; None without a question), and
    the answering check's threshold; over the embedder of ``checker`` when it has one."""
    embed, checks = _embed_of(checker), checks_of(checker)
    support = checks.pick("support", embed is not None)
    rows = _support_rows(sentences, lexical, passages, embed)
    answering = checks.pick("answering", embed is not None)
    informative = _answering(sentences, question, passages, embed, checks)
    return support_probability(support, rows), informative, answering.threshold


def checks_of(verifier: Verifier | None) -> Checks:
    """The fitted checks ``verifier`` reads its answers' ``probability`` and
    ``informativeness`` with: its own (``LexicalVerifier(checks=Checks.load(path))``, or
    any verifier with a ``checks`` attribute holding :class:`Checks`), else the shipped
    ones."""
    own = getattr(verifier, "checks", None)
    return own if isinstance(own, Checks) else shipped()


def support_rows(
    answer: str, question: str, docs: Sequence[str], verifier: Verifier | None = None
) -> list[dict[str, float]]:
    """The feature rows the support check scores for ``answer`` against the passages
    ``docs`` (:func:`~selfrag_core.signals.features.support_features`): one per sentence
    that :func:`verify_answer` checks, its ``lexical`` feature the best score ``verifier``
    (the default :class:`LexicalVerifier`) gives it, with ``question``; ``cosine`` too
    when ``verifier`` has an embedder. [] for a loop or an answer without such a sentence
    (its probability is fixed, not fitted). What ``selfrag eval --fit-verifier`` refits
    the check on, so the fit reads what the check scores at run time."""
    checker = verifier or DEFAULT
    sentences = [] if repetition(answer) is not None else _checked_sentences(answer)
    if not sentences:
        return []
    texts = list(docs)
    lexical = [best(row).score for row in checker.verify(sentences, texts, question)]
    return _support_rows(sentences, lexical, texts, _embed_of(checker))


def support_probability(check: LogisticCheck, rows: Sequence[dict[str, float]]) -> float:
    """The support ``check``'s probability that an answer is supported, from its
    sentences' :func:`support_rows`: the :func:`_mean_and_min` of theirs."""
    return _mean_and_min([check.probability(row) for row in rows])


def _support_rows(
    sentences: list[str], lexical: list[float], passages: list[str], embed: Any
) -> list[dict[str, float]]:
    return [support_features(s, passages, score, embed) for s, score in zip(sentences, lexical, strict=True)]


def _checked_sentences(answer: str) -> list[str]:
    """The sentences of ``answer`` the verifier checks: those with a content word."""
    return [s for s in split_sentences(answer) if _Claim.of(s).stems]


def _embed_of(checker: Verifier | None) -> Any:
    embedder = getattr(checker, "embedder", None)
    return None if embedder is None else getattr(embedder, "embed_documents", embedder)


def _answering(
    sentences: list[str], question: str, passages: Sequence[str], embed: Any, checks: Checks
) -> float | None:
    if not question or not sentences:
        return None
    check = checks.pick("answering", embed is not None)
    return max(check.probability(answering_features(s, question, embed, passages)) for s in sentences)


def informativeness(
    answer: str, question: str, passages: Sequence[str] = (), verifier: Verifier | None = None
) -> float | None:
    """The fitted answering check's probability that ``answer`` answers ``question``
    (:attr:`AnswerVerdict.informativeness`, without the support check): its most answering
    sentence's, read against ``passages`` (what it adds to the question's words that they
    hold); over the embedder of ``verifier`` when it has one. None without a question or a
    sentence with a content word; 0.0 for a loop."""
    if repetition(answer) is not None:
        return 0.0 if question else None
    sentences = _checked_sentences(answer)
    return _answering(sentences, question, list(passages), _embed_of(verifier), checks_of(verifier))


def answers_as_well(
    candidate: float | None, incumbent: float | None, verifier: Verifier | None = None
) -> bool:
    """Whether an answer of ``candidate`` informativeness may replace one of ``incumbent``
    on support: only when it answers the question about as well, less by no more than the
    answering check's ``margin`` (fitted: how far apart its two classes lie; a smaller
    difference is noise; the check of ``verifier``'s :func:`checks_of`); True when either
    is unknown. Every strategy that picks between answers by the verifier asks this, so a
    restatement that says nothing ("The document states that ...") does not replace a
    substantive answer because its words are easier to find in the passages."""
    if candidate is None or incumbent is None:
        return True
    margin = checks_of(verifier).pick("answering", False).about.get("margin", 0.0)
    return candidate >= incumbent - float(margin)


#: an answer that is not of the kind the question asks for scores at most this
NOT_AN_ANSWER = 0.2
_ASKS_DATE = re.compile(
    r"^\s*(?:when|متى)\b|\b(?:what|which)\s+(?:year|date|decade|century|month)\b|في\s+أي\s+عام", re.I
)
_ASKS_NUMBER = re.compile(
    r"\bhow\s+(?:many|much|old|far|tall|high|large|big|deep|wide)\b|"
    r"\bwhat\s+(?:percentage|percent|number|proportion|amount)\b|^\s*كم\b",
    re.I,
)
_DATE_WORDS = re.compile(
    r"\d|\b(?:january|february|march|april|may|june|july|august|september|october|november|december|"
    r"century|centuries|decade|ancient|medieval|bc|ad)\b",
    re.I,
)
_NUMBER_WORDS = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|"
    r"hundred|thousand|million|billion|dozens?|half|single|double|twice|none|no)\b",
    re.I,
)


def not_an_answer(answer: str, question: str) -> str | None:
    """Why ``answer`` is no answer to ``question`` whatever the passages say, or None: it
    gives no date to a "when" question (``"not_a_date"``), no number to a "how many" one
    (``"not_a_number"``), neither alternative to a question offering two
    (``"no_alternative"``), or nothing the question did not already say
    (``"restates_the_question"``; a yes/no question's answer may)."""
    if _ASKS_DATE.search(question) and not _DATE_WORDS.search(answer):
        return "not_a_date"
    if _ASKS_NUMBER.search(question) and not _NUMBER_WORDS.search(answer):
        return "not_a_number"
    asked = _Question.of(question)
    if asked.offered is not None:
        return "no_alternative" if chosen(Comparison(asked.offered, True, ""), answer) is None else None
    if asked.polar:
        return None
    claims = [_Claim.of(s, asked) for s in split_sentences(answer)]
    if any(set(c.stems) - asked.stems or c.names for c in claims):
        return None
    return "restates_the_question"


#: a comparison answer the passages' dates contradict scores at most this; one they agree with at least
CONTRADICTED, AGREED = 0.1, 0.8


def _compared(
    verdicts: list[Verdict], sentences: list[str], question: str, passages: list[str], threshold: float
) -> list[Verdict]:
    """``verdicts`` with the sentence that picks an alternative checked against the
    passages: of a comparison by date ("Who was born first, A or B?") against both
    passages' dates (:mod:`selfrag_core.comparison`), of one by a number ("Which genus has
    more species, A or B?") against the numbers both passages state
    (:func:`~selfrag_core.comparison.counted`), else ("Which filmmaker was known for
    animation, A or B?") against what each alternative's passage holds of the question
    (:func:`~selfrag_core.comparison.favoured`); capped when they favour the other
    alternative, lifted when they favour it. The yes or no of an answer to "Are A and B
    both X?" is checked the same way when each one's passage states X
    (:func:`~selfrag_core.comparison.both_hold`: "yes" lifted, "no" capped), and to "Were
    A and B of the same nationality?" or "both American?" by the countries their passages
    name (:func:`~selfrag_core.comparison.same_origin`). A pick, or a yes or no to a
    question about two things, that none of these decides scores just under
    ``threshold`` (``"undecided"``): its words are the question's, so the word checks hold
    it whichever way it goes, and such answers were right about half the time whatever
    their word score (HotpotQA tuning questions)."""
    origin = same_origin(question, passages)
    if origin is not None or both_hold(question, passages):
        said = "yes" if origin is None or origin else "no"
        why = "both_hold:yes" if origin is None else f"origin:{said}"
        bounds = (AGREED, CONTRADICTED)
        return _picked(
            verdicts, sentences, _yes_or_no, int(said == "no"), None, why, bounds, lifts=_said_yes_or_no
        )
    decision = decided(question, passages)  # by the dates, else by a number
    if decision is not None:
        side, home = decision.winner, decision.passages[decision.winner]
        kind = "comparison" if isinstance(decision, Resolution) else "count"
        why = f"{kind}_contradicted:{decision.alternatives[side]}"
        pick = partial(chosen, Comparison(decision.alternatives, True, ""))
        return _picked(verdicts, sentences, pick, side, home, why, (AGREED, CONTRADICTED))
    asked = _Question.of(question)
    offered = asked.offered
    picks: Callable[[str], int | None] | None = None
    if offered is not None:
        picks = partial(chosen, Comparison(offered, True, ""))
        winner = favoured(question, passages)
        if winner is not None:
            why = f"not_favoured:{offered[winner]}"
            return _picked(verdicts, sentences, picks, winner, None, why, (FAVOURED, DISFAVOURED))
    elif asked.two_things:
        picks = _yes_or_no
    if picks is None or all(picks(sentence) is None for sentence in sentences):
        return verdicts
    undecided = threshold - UNDECIDED_BELOW
    return [Verdict(undecided, False, v.passage, "undecided") for v in verdicts]


def opening_yes_no(text: str) -> bool | None:
    """The yes (True) or no (False) ``text`` opens with ("No, they are not ..."), or None."""
    opening = _OPENING_YES_NO.match(text)
    return None if opening is None else opening.group(1).casefold() in ("yes", "نعم")


_OPENING_YES_NO = re.compile(r"^\W*(yes|no|نعم|لا)\b", re.IGNORECASE)


def _yes_or_no(sentence: str) -> int:
    """The pick of a sentence answering a yes/no question, as :func:`_picked` reads one:
    yes (0) or no (1) by the word it opens with, else by whether it is negated ("A and B
    are both from Iceland" implies yes)."""
    said = _said_yes_or_no(sentence)
    return int(_negated(_tokens(sentence))) if said is None else said


def _said_yes_or_no(sentence: str) -> int | None:
    """The yes (0) or no (1) a sentence opens with, or None."""
    said = opening_yes_no(sentence)
    return None if said is None else int(not said)


def _picked(
    verdicts: list[Verdict],
    sentences: list[str],
    pick: Callable[[str], int | None],
    winner: int,
    home: int | None,
    why: str,
    bounds: tuple[float, float],
    lifts: Callable[[str], int | None] | None = None,
) -> list[Verdict]:
    """``verdicts`` with the first sentence that picks (``pick(sentence)``: an alternative's
    index, or None) capped at ``bounds[1]`` (``why``) when it picks another than the
    ``winner``, and all of them lifted to ``bounds[0]`` when it picks the winner (and
    ``lifts``, when given, reads the same pick); read from passage ``home`` (None: its own)."""
    for i, sentence in enumerate(sentences):
        picked = pick(sentence)
        if picked is None:
            continue
        old = verdicts[i]
        where = old.passage if home is None else home
        if picked == winner:
            if lifts is not None and lifts(sentence) != winner:
                return verdicts  # an implied pick is not lifted: the answer may say neither
            # the answer's point holds: its other sentences add detail
            lifted = [Verdict(max(v.score, bounds[0]), True, v.passage, None) for v in verdicts]
            return [*lifted[:i], Verdict(lifted[i].score, True, where, None), *lifted[i + 1 :]]
        verdict = Verdict(min(old.score, bounds[1]), False, where, why)
        return [*verdicts[:i], verdict, *verdicts[i + 1 :]]
    return verdicts


#: a pick of the alternative the passages favour scores at least this; of the other, at most this
FAVOURED, DISFAVOURED = 0.7, 0.3
#: a pick, or a yes or no, that the passages neither favour nor contradict scores this much
#: under the verifier's threshold: not supported, above the answers the passages barely hold
UNDECIDED_BELOW = 0.01


#: how much of a sentence's score rests on its passage speaking to the question
RELEVANCE_WEIGHT = 0.7


def _on_topic(
    verdicts: list[Verdict], sentences: list[str], question: str, passages: list[str], threshold: float
) -> list[Verdict]:
    """``verdicts`` weighed by how far the answer speaks to the question: the
    :func:`answer_place_coverage` of its sentence that speaks to it most (the others may
    add true detail the question did not ask for)."""
    read = [
        (s, v.passage) for v, s in zip(verdicts, sentences, strict=True) if v.passage is not None and v.score
    ]
    if not read:
        return verdicts
    weight = 1.0 - RELEVANCE_WEIGHT * (
        1.0 - max(answer_place_coverage(s, question, passages[i]) for s, i in read)
    )
    return [v if v.passage is None or v.score == 0.0 else _weighed(v, weight, threshold) for v in verdicts]


def _weighed(verdict: Verdict, weight: float, threshold: float) -> Verdict:
    score = verdict.score * weight
    supported = verdict.supported and score >= threshold
    return Verdict(
        score, supported, verdict.passage, verdict.reason or (None if supported else "off_the_question")
    )


def answer_place_coverage(answer: str, question: str, passage: str) -> float:
    """How far the place in ``passage`` that ``answer``'s own words come from speaks to
    the question, in [0, 1]: the share of the question's content words in the passage's
    sentence holding most of the answer's words that the question does not hold. An
    answer restating the question ("The Broncos defeated the Pittsburgh Steelers in the
    AFC Championship") brings the question's words along, which
    :func:`~selfrag_core.grounding.question_coverage` counts; here the Steelers are read
    where the passage names them (the divisional round), which says nothing of the AFC
    Championship. ``question_coverage`` when the answer adds no word of the passage's."""
    asked = asked_stems(question)
    new = content_stems(answer) - content_stems(question)
    sentences = [content_stems(s) for s in split_sentences(passage)]
    most = max((len(new & s) for s in sentences), default=0)
    if not asked or not most:
        return question_coverage(answer, question, passage)
    return max(len(asked & s) for s in sentences if len(new & s) == most) / len(asked)


def _answer_support(
    answer: str, passages: Sequence[str], verifier: Verifier | None, question: str, threshold: float
) -> tuple[float | None, bool, float | None]:
    """:func:`~selfrag_core.grounding.assess`'s support check: :func:`verify_answer` with
    ``verifier``, else with the lexical verifier at ``threshold``; its score, verdict and
    informativeness."""
    if verifier is None:
        verifier = DEFAULT if threshold == DEFAULT.threshold else LexicalVerifier(threshold=threshold)
    verdict = verify_answer(answer, passages, verifier, question)
    return verdict.score, verdict.supported, verdict.informativeness


# grounding (below this module: its words are this module's) checks support with it
check_support_with(_answer_support)

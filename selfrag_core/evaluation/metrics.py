"""Evaluation metrics: answer exact match and token F1 (SQuAD v1.1), whether a gold
answer occurs in the answer, retrieval recall, nDCG and MRR (as BEIR / pytrec_eval
compute them), a paired bootstrap of the difference between two systems, and percentiles.

Every per-question metric returns ``None`` when it cannot be computed (no gold answers,
no relevant document), so averages skip those questions instead of counting them as 0.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selfrag_core.comparison import Comparison, alternatives, chosen
from selfrag_core.verify import opening_yes_no

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
#: bootstrap resamples drawn at once are capped near this many numbers (memory)
_BOOTSTRAP_BLOCK = 1_000_000


# -- answers -----------------------------------------------------------------------


def _unicode_punctuation(ch: str) -> bool:
    return ch > "\x7f" and unicodedata.category(ch).startswith("P")


def normalize_answer(text: str) -> str:
    """SQuAD v1.1's normalisation: lower case, no punctuation, no articles (a, an, the),
    single spaces. Punctuation is ASCII's and Unicode's (curly quotes, dashes, "，"):
    SQuAD's script keeps “sea, so a quoted answer scored 0 against the gold word."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION and not _unicode_punctuation(ch))
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Sequence[str]) -> float | None:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0;
    None without gold answers."""
    if not golds:
        return None
    predicted = normalize_answer(prediction)
    return max(float(predicted == normalize_answer(gold)) for gold in golds)


def token_f1(prediction: str, golds: Sequence[str]) -> float | None:
    """SQuAD token F1 of the normalised answers, the best over the gold answers; None
    without gold answers."""
    if not golds:
        return None
    return max(_f1(normalize_answer(prediction).split(), normalize_answer(gold).split()) for gold in golds)


def new_word_f1(prediction: str, golds: Sequence[str], question: str) -> float | None:
    """Token F1 over the words that the question does not hold, of the prediction and of
    each gold answer (the best over them): restating the question cannot raise it ("The
    answer to the question 'Do X enable Y?' is: No." scores as "No."). Plain
    :func:`token_f1` for a gold answer made only of the question's words; None without
    gold answers."""
    if not golds:
        return None
    asked = set(normalize_answer(question).split())
    predicted = [t for t in normalize_answer(prediction).split() if t not in asked]
    best = 0.0
    for gold in golds:
        words = normalize_answer(gold).split()
        new = [t for t in words if t not in asked]
        best = max(best, _f1(predicted, new) if new else _f1(normalize_answer(prediction).split(), words))
    return best


def decision_match(prediction: str, decision: str | None) -> float | None:
    """1.0 when the answer opens with the gold yes or no (:func:`opening_yes_no`), or
    ends with it after a preamble ("The answer to the question ... is: No."), else 0.0
    (another one, or none); None without a gold yes or no (none, or "maybe")."""
    if decision not in ("yes", "no"):
        return None
    said = opening_yes_no(prediction)
    if said is None:
        closing = _CLOSING_YES_NO.search(prediction)
        said = None if closing is None else closing.group(1).casefold() == "yes"
    return float(said is not None and said == (decision == "yes"))


#: a yes or no closing an answer after a preamble ("The answer ... is: No.")
_CLOSING_YES_NO = re.compile(r"(?:\bis|:)\s*[\"'“]?(yes|no)\b\W*$", re.IGNORECASE)


def answer_contains_gold(prediction: str, golds: Sequence[str], question: str = "") -> float | None:
    """1.0 when a normalised gold answer occurs in the normalised prediction as a run of
    whole tokens ("1916" in "the answer is 1916", not "191"), else 0.0; None without gold
    answers.

    With the ``question``, an answer that must pick is judged by its pick, not by the
    words it contains: to a question offering two alternatives, one of them the gold
    answer ("Which magazine is published more often, Shonen Jump or Rolling Stone?"), the
    answer is right when the alternative it picks (names first,
    :func:`~selfrag_core.comparison.chosen`) is the gold one ("Shonen Jump is published
    more often than Rolling Stone" holds the gold "Rolling Stone", and is wrong); to a
    yes/no question whose gold is "yes" or "no", by the yes or no it opens with ("No,
    the answer is not 'yes'" holds both)."""
    if not golds:
        return None
    picked = _pick(prediction, golds, question) if question else None
    if picked is not None:
        return picked
    predicted = f" {normalize_answer(prediction)} "
    return max(float(f" {normalize_answer(gold)} " in predicted) for gold in golds)


def _pick(prediction: str, golds: Sequence[str], question: str) -> float | None:
    """Whether ``prediction`` picks the gold one of the alternatives ``question`` offers,
    or opens with the gold yes or no; None when the question asks for neither pick, or
    the answer makes none."""
    normalized = {normalize_answer(g) for g in golds}
    if normalized & {"yes", "no"}:
        said = opening_yes_no(prediction)
        return None if said is None else float(("yes" if said else "no") in normalized)
    offered = alternatives(question)
    if offered is None:
        return None
    gold = _gold_alternative(offered, normalized)
    if gold is None:
        return None
    pick = chosen(Comparison(offered, True, ""), prediction)
    return None if pick is None else float(pick == gold)


def _gold_alternative(offered: tuple[str, str], golds: set[str]) -> int | None:
    """The alternative a gold answer names: the one sharing the larger share (at least
    half) of its words with a gold answer ("Ken Flach" of "Kenneth Eliot Flach"), or None
    when neither or both do as well."""
    shares = []
    for alternative in offered:
        words = set(normalize_answer(alternative).split())
        shares.append(max(len(words & set(g.split())) / len(words) for g in golds) if words else 0.0)
    if max(shares) < 0.5 or shares[0] == shares[1]:
        return None
    return shares.index(max(shares))


def _f1(predicted: list[str], gold: list[str]) -> float:
    if not predicted or not gold:
        return float(predicted == gold)  # a gold answer of only articles/punctuation
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


# -- retrieval ---------------------------------------------------------------------


def doc_ids(ranked: Sequence[str]) -> list[str]:
    """``ranked`` without repeats, each id at its first position."""
    return list(dict.fromkeys(ranked))


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, float], k: int) -> float | None:
    """The share of the relevant ids (grade > 0) among the first ``k`` distinct ids of
    ``ranked``; None when nothing is relevant."""
    wanted = _relevant(relevant)
    if not wanted:
        return None
    return len(wanted.keys() & set(_top(ranked, k))) / len(wanted)


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, float], k: int = 10) -> float | None:
    """nDCG@k with linear gains, as BEIR (pytrec_eval): DCG = sum of grade / log2(rank + 1)
    over the first ``k`` distinct ids, divided by the DCG of the ideal ranking; None when
    nothing is relevant."""
    wanted = _relevant(relevant)
    if not wanted:
        return None
    dcg = _dcg([wanted.get(doc, 0.0) for doc in _top(ranked, k)])
    ideal = _dcg(sorted(wanted.values(), reverse=True)[:k])
    return dcg / ideal


def mrr(ranked: Sequence[str], relevant: Mapping[str, float], k: int | None = None) -> float | None:
    """1 / rank of the first relevant id among the first ``k`` distinct ids (all when
    ``k`` is None), 0.0 when none is; None when nothing is relevant."""
    wanted = _relevant(relevant)
    if not wanted:
        return None
    top = doc_ids(ranked) if k is None else _top(ranked, k)
    return next((1.0 / rank for rank, doc in enumerate(top, start=1) if doc in wanted), 0.0)


# -- the verifier --------------------------------------------------------------------


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """The area under the ROC curve of ``scores`` predicting ``labels``: the chance that a
    random positive scores above a random negative (ties count half), by the rank-sum
    (Mann-Whitney) formula. None without a positive and a negative."""
    positives = sum(1 for label in labels if label)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return None
    ranks = _average_ranks(np.asarray(scores, dtype=float))
    rank_sum = float(sum(r for r, label in zip(ranks, labels, strict=True) if label))
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, ties given the mean of their ranks."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def _relevant(relevant: Mapping[str, float]) -> dict[str, float]:
    return {doc: grade for doc, grade in relevant.items() if grade > 0}


def _top(ranked: Sequence[str], k: int) -> list[str]:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    return doc_ids(ranked)[:k]


def _dcg(grades: Sequence[float]) -> float:
    return sum(grade / math.log2(i + 2) for i, grade in enumerate(grades))


# -- comparing two systems ---------------------------------------------------------


@dataclass(frozen=True)
class PairedDifference:
    """The mean of (contender - baseline) over paired questions, with a bootstrap
    percentile confidence interval [low, high]."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float
    higher_is_better: bool = True

    @property
    def verdict(self) -> str:
        """ "better" or "worse" when the whole interval lies on one side of 0, else
        "no detectable difference" (always so for a single pair)."""
        if self.n < 2:
            return "no detectable difference"
        good, bad = (self.low > 0, self.high < 0) if self.higher_is_better else (self.high < 0, self.low > 0)
        return "better" if good else "worse" if bad else "no detectable difference"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean": round(self.mean, 6),
            "low": round(self.low, 6),
            "high": round(self.high, 6),
            "n": self.n,
            "confidence": self.confidence,
            "verdict": self.verdict,
        }


def paired_difference(
    contender: Sequence[float | None],
    baseline: Sequence[float | None],
    *,
    higher_is_better: bool = True,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedDifference | None:
    """Compare two systems' per-question scores, paired by position. Pairs where either
    score is None or not finite are dropped; None when no pair is left. The interval is
    the percentile bootstrap of the mean difference, deterministic for a ``seed``."""
    if len(contender) != len(baseline):
        raise ValueError(
            f"contender and baseline must score the same questions: {len(contender)} != {len(baseline)}"
        )
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    pairs = zip(contender, baseline, strict=True)
    diffs = np.array(
        [c - b for c, b in pairs if c is not None and b is not None and math.isfinite(c - b)], float
    )
    if diffs.size == 0:
        return None
    low, high = _bootstrap(diffs, resamples, confidence, seed)
    return PairedDifference(float(diffs.mean()), low, high, int(diffs.size), confidence, higher_is_better)


def mean_interval(
    values: Sequence[float | None], *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of ``values`` (None and non-finite
    values dropped; None when none is left), deterministic for a ``seed``: how far one
    system's mean could move with other questions of the same kind."""
    kept = np.array([v for v in values if v is not None and math.isfinite(v)], float)
    return None if kept.size == 0 else _bootstrap(kept, resamples, confidence, seed)


def _bootstrap(values: np.ndarray, resamples: int, confidence: float, seed: int) -> tuple[float, float]:
    """[low, high] of the means of ``resamples`` resamples of ``values`` (a point when they
    are all equal)."""
    mean = float(values.mean())
    if not np.ptp(values) > 0:
        return mean, mean
    rng = np.random.default_rng(seed)
    block = max(1, _BOOTSTRAP_BLOCK // values.size)
    sizes = [min(block, resamples - start) for start in range(0, resamples, block)]
    draws = (rng.integers(0, values.size, size=(size, values.size)) for size in sizes)
    means = np.concatenate([values[draw].mean(axis=1) for draw in draws])
    tail = (1 - confidence) / 2
    low, high = (float(x) for x in np.quantile(means, [tail, 1 - tail]))
    return low, high


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation, as numpy's default;
    None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q must be between 0 and 100, got {q}")
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))

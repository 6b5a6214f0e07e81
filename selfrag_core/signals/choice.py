"""Which candidate answers the question: the model's answer or a quote from the sources.

With a small model the best supported source sentence is often a better answer than the
generation. :func:`choice_features` describes one candidate for the fitted ``choice``
check (:mod:`selfrag_core.signals.fitted`): the support check's score and probability,
the answering check's, whether it is a quote, its length and how many words it adds to
the question's. The check gives the probability that the candidate holds the gold
answer; the candidate with the higher one is chosen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from selfrag_core.signals.fitted import shipped
from selfrag_core.signals.text import content, stem, tokens
from selfrag_core.verify import verify_answer

CHOICE_FEATURES = ("score", "probability", "informativeness", "quote", "length", "added")


def choice_features(
    answer: str, question: str, passages: Sequence[str], *, quote: bool, verifier: Any = None
) -> dict[str, float]:
    """The choice features of ``answer`` (``quote``: whether it is a source's sentence)."""
    verdict = verify_answer(answer, passages, verifier, question)
    words = tokens(answer)
    asked = {stem(t) for t in content(tokens(question))}
    return {
        "score": verdict.score or 0.0,
        "probability": verdict.probability or 0.0,
        "informativeness": 0.0 if verdict.informativeness is None else verdict.informativeness,
        "quote": float(quote),
        "length": math.log1p(len(words)),
        "added": math.log1p(len({stem(t) for t in content(words)} - asked)),
    }


def quote_chosen(
    answer: str, quote: str, question: str, passages: Sequence[str]
) -> tuple[float, float] | None:
    """The fitted choice check's probabilities of the model's ``answer`` and of ``quote``
    (a source sentence) when the quote is the better answer to ``question``, else None
    (and when the checks file has no choice check)."""
    checks = shipped()
    if not checks.has("choice"):
        return None
    check = checks.pick("choice", semantic=False)
    model = check.probability(choice_features(answer, question, passages, quote=False))
    quoted = check.probability(choice_features(quote, question, passages, quote=True))
    return (model, quoted) if quoted > model else None

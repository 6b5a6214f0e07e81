"""Drafts from different documents in one round, the best kept by the verifier.

A small model answers worse from several passages than from the one that holds the
answer: the other passages distract it. So, beside the answer over all the retrieved
documents, one draft is written over each of the first few documents alone, all in the
same parallel round (no dependent round is added), and the verifier
(:func:`~selfrag_core.verify.verify_answer`, against every retrieved document, weighed by
how far the passage it is read from speaks to the question) scores each. The answer over
all documents is kept unless a draft beats it by :data:`DRAFT_MARGIN`; an unusable draft
(``grounding.degenerate_reason``) is never kept. A question of several parts
(:func:`~selfrag_core.questions.is_multi_part`) gets no drafts: one document rarely holds
every part, and SelfIRAG completes the parts an answer leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from selfrag_core.engine import Generate, Note, Parallel, Plan
from selfrag_core.grounding import degenerate_reason
from selfrag_core.prompts import detect_language
from selfrag_core.questions import is_multi_part
from selfrag_core.strategies.base import answer_text, context_text, format_context
from selfrag_core.types import RetrievedDoc
from selfrag_core.verify import verify_answer

if TYPE_CHECKING:
    from selfrag_core.strategies.base import Strategy

#: how far (verifier score) a draft over one document must beat the answer over all of them
DRAFT_MARGIN = 0.1


@dataclass(frozen=True)
class Draft:
    """One candidate answer: over ``documents`` (all retrieved, or one), its verifier
    ``score`` (None: nothing to check, as "Yes.") and why it is unusable, if it is."""

    answer: str
    documents: tuple[int, ...]  # positions in the retrieved documents
    score: float | None
    unusable: str | None

    def rank(self) -> float:
        return -1.0 if self.unusable else (self.score or 0.0)


def drafted_answer(
    strategy: Strategy[Any],
    query: str,
    docs: list[RetrievedDoc],
    drafts: int,
    retries: int,
    *,
    first: str | None = None,
    max_chars: int | None = None,
) -> Plan[str]:
    """The answer over all ``docs`` (the ``grounded_answer`` prompt) and, in the same
    parallel round, a draft over each of the first ``drafts`` documents alone; the best
    by the verifier, the one over all unless a draft beats it by :data:`DRAFT_MARGIN`.
    A ``draft_chosen`` note records every draft's score when a draft wins. Raises the
    first call's error when every call failed.

    ``first``: the answer over all ``docs`` already written (the reply to that prompt):
    only the drafts are written, and none when no draft could beat it (its score is
    within :data:`DRAFT_MARGIN` of 1): the same choice at the drafts' calls alone.
    ``max_chars``: each prompt's documents within that many characters (PlainRAG's
    ``max_context_chars``), so the answer over all is PlainRAG's own prompt. The verifier
    is ``strategy``'s (:attr:`~selfrag_core.strategies.base.Strategy.verifier`)."""
    subsets = [tuple(range(len(docs)))]
    if len(docs) > 1 and not is_multi_part(query):  # one document rarely holds every part
        subsets += [(i,) for i in range(min(drafts, len(docs)))]
    texts = [d.text for d in docs]
    context = context_text(docs)
    verifier = strategy.verifier

    def draft(subset: tuple[int, ...], reply: str) -> Draft:
        answer = answer_text(reply)
        unusable = degenerate_reason(answer, query, context)
        score = None if unusable else verify_answer(answer, texts, verifier, query).score
        return Draft(answer, subset, score, unusable)

    candidates: list[Draft] = []
    if first is not None:
        candidates.append(draft(subsets[0], first))
        if len(subsets) == 1 or candidates[0].rank() >= 1.0 - DRAFT_MARGIN:
            return candidates[0].answer
        subsets = subsets[1:]
    lang = detect_language(query)
    prompts = [
        strategy.prompts.render(
            "grounded_answer",
            lang,
            context=format_context([docs[i] for i in s], max_chars=max_chars),
            question=query,
        )
        for s in subsets
    ]
    replies = yield Parallel(tuple(Generate(strategy.llm, p, "answer", retries) for p in prompts))
    for subset, reply in zip(subsets, replies, strict=True):
        if not isinstance(reply, BaseException):
            candidates.append(draft(subset, reply.text))
    if not candidates:
        raise next(r for r in replies if isinstance(r, BaseException))
    everything = tuple(range(len(docs)))
    best = _best(candidates, everything)
    if best.documents != everything:
        yield _chosen(best, candidates)
    return best.answer


def _best(candidates: list[Draft], everything: tuple[int, ...]) -> Draft:
    """The first of ``candidates`` unless a later one ranks higher, by :data:`DRAFT_MARGIN`
    over the answer over ``everything`` (all the documents), by any amount over a draft."""
    best = candidates[0]
    for other in candidates[1:]:
        margin = DRAFT_MARGIN if best.documents == everything else 0.0
        if other.rank() > best.rank() + margin:
            best = other
    return best


def _chosen(best: Draft, candidates: list[Draft]) -> Note:
    """The ``draft_chosen`` note: the documents of the ``best`` draft, every draft's score."""
    detail = {
        "documents": [i + 1 for i in best.documents],
        "drafts": [
            {"documents": [i + 1 for i in d.documents], "score": d.score, "unusable": d.unusable}
            for d in candidates
        ],
    }
    return Note("draft_chosen", None, detail, kind="progress")

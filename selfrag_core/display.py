"""What the CLI shows a reader of a result: the quality line of each strategy, each
source's score with its kind, and the part of a source that matched the question.

Scores of different kinds are never shown bare: a backend's similarity, a distance, a
score of unknown scale and HyDE's fused rank (reciprocal-rank fusion: a sum of
1 / (60 + rank) over the rankings, a few hundredths, not a similarity) each carry their
name (see ``docs/concepts/score-kinds.md``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from selfrag_core.grounding import content_stems
from selfrag_core.types import ScoreKind

#: the names the CLI gives the strategies, by class (a SelfHealingRAG attempt names its
#: strategy by class); any other class is a backend searched directly: a plain retrieval
STRATEGY_NAMES = {
    "PlainRAG": "plain",
    "SelfIRAG": "self",
    "HyDERAG": "hyde",
    "RecursiveRAG": "recursive",
    "SelfHealingRAG": "healing",
    "AdaptiveRAG": "adaptive",
}
_WORD = re.compile(r"\w+")


def one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut at a word's end (with "…") when longer than ``limit``."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:  # a word longer than half the limit is cut inside
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def attempt_name(strategy: str) -> str:
    """A SelfHealingRAG attempt's strategy as the CLI names it: ``hyde`` for ``HyDERAG``,
    ``plain retrieval`` for a backend searched directly (the embedded ``RAG``, say)."""
    return STRATEGY_NAMES.get(strategy, "plain retrieval")


def step_text(step: Any) -> str:
    """A query's step (:class:`~selfrag_core.strategies.base.Step`) as one line, its
    attempts and verdicts naming the strategy as the summary line does: ``attempt 1:
    plain retrieval``, ``verdict on hyde: 0.83 passes the threshold 0.75`` (not the class
    names ``RAG`` and ``HyDERAG``)."""
    strategy = step.detail.get("strategy")
    if step.kind in ("attempt", "verdict") and isinstance(strategy, str):
        step = dataclasses.replace(step, detail={**step.detail, "strategy": attempt_name(strategy)})
    return str(step.text)


def score_label(doc: Any) -> str:
    """A source's score with its kind: ``similarity 0.812``, ``distance 0.120 (lower is
    closer)``, ``score 3.2 (scale unknown)``, ``fused rank 0.033, similarity 0.812`` for a
    document of a fused ranking (HyDE's: the backend's own score beside it); "" for none."""
    metadata = getattr(doc, "metadata", None) or {}
    if "retrieval_score_kind" in metadata:  # a fused ranking's document (hyde.reciprocal_rank_fusion)
        own = _kind_score(metadata.get("retrieval_score"), metadata.get("retrieval_score_kind"))
        fused = "" if doc.score is None else f"fused rank {doc.score:.3f}"
        return f"{fused}, {own}" if fused and own else fused or own
    return _kind_score(doc.score, doc.score_kind)


def _kind_score(score: Any, kind: Any) -> str:
    if not isinstance(score, (int, float)) or isinstance(score, bool):
        return ""
    kind = getattr(kind, "value", kind)
    if kind == ScoreKind.SIMILARITY.value:
        return f"similarity {score:.3f}"
    if kind == ScoreKind.DISTANCE.value:
        return f"distance {score:.3f} (lower is closer)"
    return f"score {score:.3g} (scale unknown)"


def snippet(text: str, question: str, width: int = 100) -> str:
    """About ``width`` characters of ``text`` around the part that holds most of the
    question's content words (its start when none is there), on one line, "…" where cut."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    wanted = content_stems(question)
    words = [(m.start(), m.end(), content_stems(m.group())) for m in _WORD.finditer(flat)]
    hits = [(start, stems & wanted) for start, end, stems in words if stems & wanted]
    if not hits:
        return one_line(flat, width)
    best, best_count = 0, 0
    for i, (start, _) in enumerate(hits):  # the window opening at each hit: the most distinct words
        found: set[str] = set()
        for other, stems in hits[i:]:
            if other - start > width - 20:
                break
            found |= stems
        if len(found) > best_count:
            best, best_count = start, len(found)
    begin = max(0, best - 20)
    if begin:  # from a word's start
        space = flat.rfind(" ", 0, begin)
        begin = space + 1 if space >= 0 else 0
    body = one_line(flat[begin:], width)
    return body if begin == 0 else "…" + body


def recursive_reason(reason: str) -> str:
    """RecursiveRAG's ``reason`` for answering directly, in words: what decided it and what
    it means, e.g. "decomposition is off for this model (max_depth 0)" for
    ``decomposition is off: answered``."""
    if reason.startswith("a comparison"):
        found = "; no documents found" if reason.endswith("no documents") else ""
        return f"a comparison: each alternative searched, then answered from their passages{found}"
    why, _, outcome = reason.partition(": ")
    depth = re.fullmatch(r"max_depth (\d+) reached", why)
    if why == "decomposition is off":
        why = "decomposition is off for this model (max_depth 0)"
    elif depth:
        why = f"the deepest level of sub-questions (max_depth {depth.group(1)}) was reached"
    elif why == "one question":
        why = "one question, nothing to split (this model's preset splits only by rule, no LLM decomposition)"
    elif why == "simple query":
        why = "the question looked simple (fewer than two complexity keywords), so it was not decomposed"
    elif why.startswith("junk decomposition"):
        why = f"the model's sub-questions were unusable ({why.partition(': ')[2]})"
    elif why == "decomposition failed":
        why = "the decomposition call failed"
    elif not why:
        why = "not decomposed"
    tail = {"leaf strategy": "; answered by the leaf strategy", "no documents": "; no documents found"}
    return why + tail.get(outcome, "")


def describe(result: Any) -> str:
    """The strategy-specific quality line: confidence, scores per attempt or what was done."""
    if hasattr(result, "confidence"):
        known = getattr(result, "known_confidence", result.confidence)
        if known is None:  # the judge's reply was unreadable, carried no information or was not asked for
            best = result.history[result.best_iteration - 1] if result.history else None
            why = (best.evaluation.ignored if best else None) or "the judge's reply could not be read"
            return f"confidence unknown ({why}) after {result.iterations} iteration(s)"
        return f"confidence {known:.2f} after {result.iterations} iteration(s)"
    if hasattr(result, "scores"):
        return healing_line(result)
    if hasattr(result, "sub_questions"):
        if result.decomposed:
            return f"decomposed into {len(result.sub_questions)} sub-question(s)"
        return f"answered directly: {recursive_reason(result.reason or '')}"
    if hasattr(result, "hypothetical_docs"):
        n_docs = len(result.hypothetical_docs)
        return (
            f"{n_docs} hypothetical document(s), {result.num_retrieved} passage(s) retrieved "
            "(sources ranked by fused rank)"
        )
    return adaptive_line(result)


#: AdaptiveRAG's stages in words
_STAGES = {"before_answer": "before answering", "after_answer": "after the first answer"}


def adaptive_line(result: Any) -> str:
    """AdaptiveRAG's line: the router's decisions (the trace's ``route`` notes), each with
    its stage, choice and reason, e.g. ``routed before answering: plain (answer plainly
    first); after the first answer: healing (the first answer covers 43% of the
    question)``; "" for a result without any."""
    events = getattr(getattr(result, "trace", None), "events", None) or []
    routes = [e.detail for e in events if e.kind == "decision" and e.name == "route"]
    parts = [
        f"{_STAGES.get(str(d.get('stage')), str(d.get('stage')))}: {d.get('choice')} ({d.get('reason')})"
        for d in routes
    ]
    return f"routed {'; '.join(parts)}" if parts else ""


def healing_line(report: Any) -> str:
    """SelfHealingRAG's line: each attempt's faithfulness score by strategy, the threshold,
    and whose answer is shown, e.g. ``faithfulness per attempt: plain retrieval 0.60,
    hyde 0.50; none reached the threshold 0.75: the best attempt's answer (plain retrieval)``."""
    details = list(getattr(report, "attempt_details", []) or [])
    if details:
        parts = [
            f"{attempt_name(a.strategy)} failed" if a.error else f"{attempt_name(a.strategy)} {a.score:.2f}"
            for a in details
        ]
    else:
        parts = [f"attempt {i} {s:.2f}" for i, s in enumerate(report.scores, 1)]
    scores = ", ".join(parts) or "no attempt"
    used = attempt_name(report.strategy) if report.strategy else None
    if report.success:
        verdict = f"{used} reached the threshold {report.threshold:.2f}"
    elif used:
        verdict = f"none reached the threshold {report.threshold:.2f}: the best attempt's answer ({used})"
    else:
        verdict = f"none reached the threshold {report.threshold:.2f} and none answered"
    return f"faithfulness per attempt: {scores}; {verdict}"

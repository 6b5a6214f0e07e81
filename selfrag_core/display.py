"""What the CLI shows a reader of a result beside its ``summary()`` line: each source's
score with its kind, the part of a source that matched the question, and each step of a
query as it happens.

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
from selfrag_core.types import ScoreKind, attempt_name

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


def step_text(step: Any) -> str:
    """A query's step (:class:`~selfrag_core.runner.Step`) as one line, its
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

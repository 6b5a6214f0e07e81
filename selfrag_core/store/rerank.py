"""Rerankers: reorder a candidate pool of hits and keep ``top_k``.

* ``noop``: keep the retrieval order.
* ``diversity``: maximal marginal relevance (MMR): each pick maximises
  ``lambda * relevance - (1 - lambda) * max similarity to the hits already picked``.
* a cross-encoder (or any scorer) the user brings: an object with
  ``score(query, texts) -> list[float]``, or ``predict(pairs)`` (sentence-transformers
  ``CrossEncoder``), or a callable ``f(query, texts) -> list[float]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import numpy as np

from selfrag_core.errors import ConfigurationError
from selfrag_core.types import RetrievedDoc

H = TypeVar("H", bound=RetrievedDoc)


class Reranker(Protocol):
    def rerank(self, query: str, hits: list[H], top_k: int, vectors: np.ndarray) -> list[H]:
        """``vectors``: one unit-length row per hit (for similarity between hits)."""
        ...


class NoopReranker:
    name = "noop"

    def rerank(self, query: str, hits: list[H], top_k: int, vectors: np.ndarray) -> list[H]:
        return hits[:top_k]


class MMRReranker:
    """Maximal marginal relevance over the hits' vectors (relevance: score / best score)."""

    name = "diversity"

    def __init__(self, lambda_: float = 0.5) -> None:
        if not 0.0 <= lambda_ <= 1.0:
            raise ConfigurationError(f"lambda_ must be in [0, 1], got {lambda_}")
        self.lambda_ = lambda_

    def rerank(self, query: str, hits: list[H], top_k: int, vectors: np.ndarray) -> list[H]:
        if len(hits) <= 1:
            return hits[:top_k]
        rel = np.clip(np.array([h.similarity or 0.0 for h in hits], dtype=np.float64), 0.0, None)
        rel = rel / rel.max() if rel.max() > 0 else np.ones_like(rel)
        sim = vectors @ vectors.T
        chosen: list[int] = []
        left = list(range(len(hits)))
        while left and len(chosen) < top_k:
            redundancy = sim[np.ix_(left, chosen)].max(axis=1) if chosen else np.zeros(len(left))
            gain = self.lambda_ * rel[left] - (1.0 - self.lambda_) * redundancy
            pick = left[int(np.argmax(gain))]
            chosen.append(pick)
            left.remove(pick)
        return [hits[i] for i in chosen]


class CrossEncoderReranker:
    """Rescore hits with a scorer of (query, text) pairs; the hit's score becomes its score."""

    name = "cross_encoder"

    def __init__(self, scorer: Any) -> None:
        if not (hasattr(scorer, "score") or hasattr(scorer, "predict") or callable(scorer)):
            raise ConfigurationError(
                "a cross-encoder reranker needs score(query, texts), predict(pairs) or a callable"
            )
        self.scorer = scorer

    def _scores(self, query: str, texts: list[str]) -> Sequence[Any]:
        if hasattr(self.scorer, "score"):
            return list(self.scorer.score(query, texts))
        if hasattr(self.scorer, "predict"):
            return list(self.scorer.predict([(query, t) for t in texts]))
        return list(self.scorer(query, texts))

    def rerank(self, query: str, hits: list[H], top_k: int, vectors: np.ndarray) -> list[H]:
        if not hits:
            return []
        scores = self._scores(query, [h.text for h in hits])
        if len(scores) != len(hits):
            raise ValueError(f"the cross-encoder returned {len(scores)} scores for {len(hits)} texts")
        rescored = [replace(h, score=float(s)) for h, s in zip(hits, scores, strict=True)]
        rescored.sort(key=lambda h: -(h.score or 0.0))
        return rescored[:top_k]


def make_reranker(spec: Any) -> Reranker | None:
    """``None``, ``"noop"``, ``"diversity"``, a reranker object, or a cross-encoder scorer."""
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec == "noop":
            return NoopReranker()
        if spec in ("diversity", "mmr"):
            return MMRReranker()
        if spec == "cross_encoder":
            raise ConfigurationError(
                "reranker='cross_encoder' needs the model itself: pass reranker=<object with "
                "score(query, texts)> or a sentence-transformers CrossEncoder"
            )
        raise ConfigurationError(f"unknown reranker {spec!r}; use 'noop', 'diversity' or a scorer object")
    if hasattr(spec, "rerank"):
        reranker: Reranker = spec
        return reranker
    return CrossEncoderReranker(spec)

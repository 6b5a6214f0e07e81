"""Search over an :class:`~selfrag_core.store.index.Index`: lexical, dense or hybrid
scores, metadata filters, query expansion and reranking.

Scoring (all scores are similarities, higher is better):

* lexical only (no embedder, or ``bm25_alpha=0``): the BM25 score from ``bm25s``;
  chunks sharing no term with the query are not returned;
* dense only (``bm25_alpha=1``): cosine similarity of unit vectors;
* hybrid: ``alpha * dense' + (1 - alpha) * bm25'`` where ``'`` is min-max
  normalisation over the searchable chunks (a convex combination of normalised
  scores; Bruch et al., 2023, found it at least as good as rank fusion), plus
  ``names / max(names)`` when the query holds an identifier that chunks' file names
  hold (``names``: that part of the BM25 score, see :mod:`~selfrag_core.store.lexical`):
  a document the question names ("What does PEP 572 introduce?") ranks before those
  that mention it, which a dense score, blind to numbers, prefers when they repeat it;
* with a ``query_expander``: the rankings of the original and expanded queries are
  fused with reciprocal rank fusion (score ``sum 1 / (60 + rank)``).

``bm25_alpha`` is the weight of the dense component, as in the reference API;
``None`` (the default) means 0.5 with an embedder and lexical-only without one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selfrag_core.store.dense import HashingEmbeddings, as_matrix
from selfrag_core.store.index import Index
from selfrag_core.store.rerank import Reranker
from selfrag_core.types import RetrievedDoc, ScoreKind
from selfrag_core.validation import check_int, validate_query

_RRF_K = 60
#: the vectors MMR compares when the index has none (no embedder)
_MMR_EMBEDDER = HashingEmbeddings(512)

#: ranked chunks, best first, as columns: their positions in the index, scores, lexical
#: scores and dense scores
Ranked = tuple[list[int], list[float], list[float | None], list[float | None]]


@dataclass
class SearchHit(RetrievedDoc):
    """A retrieved chunk: a ``RetrievedDoc`` plus its source and the component scores."""

    source: str = ""
    lexical_score: float | None = None
    dense_score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.update(source=self.source, lexical_score=self.lexical_score, dense_score=self.dense_score)
        return out


def query_list(queries: Sequence[str]) -> Sequence[str]:
    if isinstance(queries, str) or not isinstance(queries, Sequence):
        raise TypeError(
            f"search_many takes a list of queries, got {type(queries).__name__}; use search() for one"
        )
    return queries


def search_many(
    index: Index,
    queries: Sequence[str],
    top_k: int,
    *,
    alpha: float,
    reranker: Reranker | None,
    expander: Callable[[str], list[str]] | None,
    metadata_filter: Any,
    filters: Mapping[str, Any],
) -> list[list[SearchHit]]:
    """The best ``top_k`` chunks for each of ``queries`` (same filters), in one pass: one
    embedder call for all the query vectors where the embedder has ``embed_queries``,
    one matrix product for their dense scores. ``alpha``: the weight of the dense scores."""
    queries = [validate_query(q) for q in query_list(queries)]
    check_int("top_k", top_k, 1)
    groups = [_expanded(q, expander) for q in queries]  # each query with its expansions
    qvecs = _query_vectors(index, [q for group in groups for q in group], alpha) if queries else None
    pool = max(4 * top_k, 20) if reranker is not None else top_k
    found: list[tuple[list[SearchHit], np.ndarray | None]] = []
    with index.lock:
        if not index.chunks:
            return [[] for _ in queries]
        mask = _mask(index, metadata_filter, filters)
        dense, known = index.dense_scores(qvecs) if qvecs is not None else (None, None)
        column = 0
        for group in groups:
            rankings = []
            for q in group:
                rankings.append(_ranking(index, q, column, alpha, qvecs, dense, known, mask, pool))
                column += 1
            ranked = rankings[0] if len(rankings) == 1 else _fuse(rankings, pool)
            hits = _hits(index, ranked)
            found.append((hits, _hit_vectors(index, ranked[0]) if reranker is not None else None))
    results = []
    for query, (hits, vectors) in zip(queries, found, strict=True):
        if reranker is not None and vectors is not None:
            hits = reranker.rerank(query, hits, top_k, vectors)
        results.append(hits[:top_k])
    return results


def _ranking(
    index: Index,
    q: str,
    column: int,
    alpha: float,
    qvecs: np.ndarray | None,
    dense: np.ndarray | None,
    known: np.ndarray | None,
    mask: np.ndarray | None,
    pool: int,
) -> Ranked:
    """The ``pool`` best chunks for one query (under the index's lock): its BM25 scores
    (unless ``alpha`` is 1) with its dense scores, ``dense``'s ``column``; with an
    approximate index (``known``: the scores it found), made exact wherever they can rank."""
    lex = index.lexical_scores(q) if alpha < 1 else None
    scores = among = named = None
    if dense is not None:
        assert qvecs is not None
        scores = dense[:, column]
        if known is not None:  # approximate: make exact whatever can rank
            among = _exact_where_needed(index, scores, known[:, column], qvecs[column], lex, mask, pool)
        named = index.name_scores(q) if lex is not None else None
    return _rank(alpha, lex, scores, mask, pool, among, named)


def _expanded(query: str, expander: Callable[[str], list[str]] | None) -> list[str]:
    queries = [query]
    if expander is not None:
        extra = expander(query)
        if isinstance(extra, str) or not isinstance(extra, Iterable):
            raise TypeError("query_expander must return a list of strings")
        for q in extra:
            if isinstance(q, str) and q.strip() and q.strip() not in queries:
                queries.append(q.strip())
    return queries


def _query_vectors(index: Index, queries: list[str], alpha: float) -> np.ndarray | None:
    """One unit row per query: from one ``embed_queries`` call where the embedder has
    it (the built-in ones), else ``embed_query`` per query (a LangChain embedder's
    query vectors may differ from its document vectors, so never ``embed_documents``)."""
    embedder = index.embedder
    if embedder is None or alpha == 0:
        return None
    many = getattr(embedder, "embed_queries", None)
    if callable(many):
        raw = many(queries)
    elif len(queries) == 1:  # its one row, without stacking a list
        raw = np.asarray(embedder.embed_query(queries[0]))[None]
    else:
        raw = [np.asarray(embedder.embed_query(q)) for q in queries]
    vecs = as_matrix(raw, len(queries))
    if index.dim is not None and vecs.shape[1] != index.dim:
        index.check_dim(vecs.shape[1])
    return vecs


def _matches(value: Any, condition: Any) -> bool:
    if callable(condition):
        return bool(condition(value))
    if isinstance(condition, (list, tuple, set, frozenset)):
        return value in condition
    return bool(value == condition)


def _mask(index: Index, metadata_filter: Any, filters: Mapping[str, Any]) -> np.ndarray | None:
    """Which chunks the filters keep (None: all)."""
    if metadata_filter is None and not filters:
        return None
    conditions = dict(filters)
    predicate: Callable[[dict[str, Any]], Any] | None = None
    if isinstance(metadata_filter, Mapping):
        conditions.update(metadata_filter)
    elif callable(metadata_filter):
        predicate = metadata_filter
    elif metadata_filter is not None:
        raise TypeError("metadata_filter must be a dict or a callable f(metadata) -> bool")
    if not conditions and predicate is None:
        return None

    def keep(meta: dict[str, Any]) -> bool:
        if not all(k in meta and _matches(meta[k], v) for k, v in conditions.items()):
            return False
        return predicate is None or bool(predicate(dict(meta)))

    return np.fromiter((keep(m) for m in index.chunks.metadata()), dtype=bool, count=len(index.chunks))


#: with an approximate dense index, the best chunks by BM25 whose dense scores are made exact
_LEXICAL_CANDIDATES = 1_000


def _exact_where_needed(
    index: Index,
    dense: np.ndarray,
    known: np.ndarray,
    qvec: np.ndarray,
    lex: np.ndarray | None,
    valid: np.ndarray | None,
    pool: int,
) -> np.ndarray:
    """Exact dense scores, in place, for the chunks that can rank besides the approximate
    index's candidates: the best by BM25 (hybrid search), and every chunk a filter keeps
    when fewer than ``pool`` of the candidates pass it. Returns the positions of all these
    chunks (ascending): no other chunk can rank above them."""
    wanted = [np.flatnonzero(known)]
    if lex is not None:
        if valid is not None:
            lex = np.where(valid, lex, 0)
        hits = np.flatnonzero(lex > 0)
        if len(hits) > _LEXICAL_CANDIDATES:
            hits = hits[np.argpartition(-lex[hits], _LEXICAL_CANDIDATES - 1)[:_LEXICAL_CANDIDATES]]
        wanted.append(hits)
    if valid is not None and int(np.count_nonzero(valid & known)) < pool:
        wanted.append(np.flatnonzero(valid))
    among = np.unique(np.concatenate(wanted))
    unknown = among[~known[among]]
    dense[unknown] = index.vectors(unknown) @ qvec
    return among


def _minmax(scores: np.ndarray, valid: np.ndarray | None, at: np.ndarray) -> np.ndarray:
    """The scores at the positions ``at``, scaled to [0, 1] over the ``valid`` positions
    (all when None)."""
    kept = scores if valid is None else scores[valid]
    picked = scores[at]
    if kept.size == 0:
        return np.zeros_like(picked)
    low, high = float(kept.min()), float(kept.max())
    if high <= low:  # one value for all: keep only "has some signal"
        return np.asarray(picked > 0, dtype=scores.dtype)
    scaled: np.ndarray = (picked - low) / (high - low)
    return scaled


def _rank(
    alpha: float,
    lex: np.ndarray | None,
    dense: np.ndarray | None,
    valid: np.ndarray | None,
    pool: int,
    among: np.ndarray | None = None,
    named: np.ndarray | None = None,
) -> Ranked:
    """The top ``pool`` chunks for one query, given its BM25 and dense scores, among the
    ``valid`` positions (all when None); only the positions ``among`` are scored when the
    caller knows no other can rank (an approximate dense search), the scales still set by
    every valid chunk. ``named``: the part of the BM25 scores the file names give, added
    to a hybrid score divided by its maximum."""
    first = lex if dense is None else dense
    assert first is not None
    one = (lex is None or dense is None) and valid is None and among is None  # one score, every chunk
    if one:
        candidates = _best(first, pool)
        if dense is None:  # lexical: chunks sharing no term with the query are not returned
            candidates = candidates[first[candidates] > 0]
        score = first[candidates]
    else:
        if lex is not None and dense is None:
            valid = lex > 0 if valid is None else valid & (lex > 0)
        if among is None:
            candidates = np.arange(len(first)) if valid is None else np.flatnonzero(valid)
        else:
            candidates = among if valid is None else among[valid[among]]
        if lex is not None and dense is not None:
            score = alpha * _minmax(dense, valid, candidates) + (1 - alpha) * _minmax(lex, valid, candidates)
            if named is not None:
                score = score + _scaled(named, valid, candidates)
        else:
            score = first[candidates]
        part = _best(score, pool)
        candidates, score = candidates[part], score[part]
    values = score.tolist()
    nothing: list[float | None] = [None] * len(values)
    return (
        candidates.tolist(),
        values,
        nothing if lex is None else values if one else lex[candidates].tolist(),
        nothing if dense is None else values if one else dense[candidates].tolist(),
    )


def _scaled(scores: np.ndarray, valid: np.ndarray | None, at: np.ndarray) -> np.ndarray:
    """The scores at the positions ``at`` divided by the largest over the ``valid`` ones
    (all when None); zeros when none is above 0."""
    kept = scores if valid is None else scores[valid]
    high = float(kept.max()) if kept.size else 0.0
    picked = scores[at]
    return picked / high if high > 0 else np.zeros_like(picked)


#: the shortest blocks of scores _best bounds the ranking ones by
_BLOCK = 64
#: _best sorts at most this many times ``k`` scores whole; more are cut to the ``k`` best first
_SORTED = 8


def _best(score: np.ndarray, k: int) -> np.ndarray:
    """The positions of the ``k`` best scores (all when fewer), best first; of equal scores,
    the first position first (a stable sort's order). A long array is cut in ``4 k``
    blocks first: at least ``k`` scores reach the ``k``-th best of the blocks' maxima, so
    only the ones at or above it compete (a few times ``k`` of them, unless many are
    equal). Of many, the ``k`` best (of equal ones at the cut, the first) are found by a
    partition and only they sorted."""
    among = None
    block = len(score) // (4 * k)
    if block >= _BLOCK:
        blocks = len(score) // block
        maxima = np.maximum.reduceat(score, np.arange(0, blocks * block, block))  # the last to the end
        maxima.sort()
        among = (score >= maxima[blocks - k]).nonzero()[0]
        score = score[among]
    if len(score) > _SORTED * k:
        kth = np.partition(score, len(score) - k)[len(score) - k]
        picked: np.ndarray = (score >= kth).nonzero()[0]
        if len(picked) > k:  # scores equal to the k-th: the first of them
            ties = (score[picked] == kth).nonzero()[0]
            picked = np.delete(picked, ties[k - (len(picked) - len(ties)) :])
        among = picked if among is None else among[picked]
        score = score[picked]
    order: np.ndarray = (-score).argsort(kind="stable")[:k]
    return order if among is None else among[order]


def _fuse(rankings: list[Ranked], pool: int) -> Ranked:
    """Reciprocal rank fusion of the rankings of a query and its expansions."""
    fused: dict[int, list[Any]] = {}
    for positions, _, lexical, dense in rankings:
        for rank, (p, lx, dn) in enumerate(zip(positions, lexical, dense, strict=True)):
            entry = fused.setdefault(p, [p, 0.0, lx, dn])
            entry[1] += 1.0 / (_RRF_K + rank + 1)
    ordered = sorted(fused.values(), key=lambda e: -e[1])[:pool]
    return [e[0] for e in ordered], [e[1] for e in ordered], [e[2] for e in ordered], [e[3] for e in ordered]


def _hits(index: Index, ranked: Ranked) -> list[SearchHit]:
    """The ranked chunks as hits (each with its own copy of the chunk's metadata)."""
    positions, scores, lexical, dense = ranked
    similarity = ScoreKind.SIMILARITY
    return [
        SearchHit(
            c.text, s, dict(c.metadata), c.id, similarity, source=c.source, lexical_score=lx, dense_score=dn
        )
        for c, s, lx, dn in zip(index.chunks.at(positions), scores, lexical, dense, strict=True)
    ]


def _hit_vectors(index: Index, positions: list[int]) -> np.ndarray:
    """The vectors a reranker compares hits by (MMR): the index's, else hashed ones."""
    if index.embedder is not None and index.chunks:
        return index.vectors(np.asarray(positions, dtype=np.int64)) if positions else np.zeros((0, 1))
    return _MMR_EMBEDDER.embed_documents([index.chunks[p].text for p in positions])

"""One matrix product instead of LlamaIndex's per-vector loop, for ``SimpleVectorStore``.

``SimpleVectorStore.query`` (LlamaIndex's default in-memory store) scores each stored
vector in a Python loop (``get_top_k_embeddings``): about 3 ms for 200 vectors of 256
dimensions, and linear in the store's size. :class:`MatrixScan` stands in for the
store inside the retrievers that :class:`~selfrag_llamaindex.LlamaIndexBackend` makes
(never in the caller's objects) and answers the queries the loop would answer, the same
way, from a float64 matrix of the stored vectors:

* the same cosine similarity, ``dot(q, e) / (norm(q) * norm(e))``, with each norm
  computed as LlamaIndex computes it (the dot products may differ in the last bit);
* the same top-k set: the ``k`` largest ``(similarity, node id)`` pairs, highest first
  (LlamaIndex leaves exact ties in heap order; here they come by node id, descending).

``node_ids`` (an index's retrievers pass all of the index's ids) limit the rows scored.
Anything else goes to the store itself, unchanged: query modes other than the default,
metadata filters, ``doc_ids``, store-specific keyword arguments, an empty store,
vectors of different lengths, zero or non-finite vectors. The matrix is built on
the first query and again whenever the store's vectors change (checked per query by
comparing the stored lists, which costs a pass over references, not over floats).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)


class _Matrix(NamedTuple):
    ids: list[str]
    vectors: list[Any]  # the store's own lists, to tell when they change
    matrix: Any  # float64 (n, d), or None when the loop must answer
    norms: Any


class MatrixScan:
    """Proxy for a ``SimpleVectorStore`` whose default-mode queries are one matrix product."""

    def __init__(self, store: SimpleVectorStore) -> None:
        self._store = store
        self._cached: _Matrix | None = None
        self._last_rows: tuple[_Matrix, list[str], Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        found = None if kwargs else self._scan(query)
        return found if found is not None else self._store.query(query, **kwargs)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        found = None if kwargs else self._scan(query)
        return found if found is not None else await self._store.aquery(query, **kwargs)

    def _scan(self, query: VectorStoreQuery) -> VectorStoreQueryResult | None:
        if (
            query.mode != VectorStoreQueryMode.DEFAULT
            or query.filters is not None
            or query.doc_ids is not None
            or query.query_embedding is None
            or (query.similarity_top_k or 0) < 0
        ):
            return None
        cached = self._matrix()
        if cached.matrix is None or len(query.query_embedding) != cached.matrix.shape[1]:
            return None
        q = np.array(query.query_embedding, dtype=np.float64)
        q_norm = np.linalg.norm(q)
        if not (np.isfinite(q_norm) and q_norm > 0):  # (an inf or nan anywhere makes the norm one)
            return None
        ids, matrix, norms = cached.ids, cached.matrix, cached.norms
        if query.node_ids is not None:  # (an index's retrievers pass all of its node ids)
            rows = self._rows(cached, query.node_ids)
            if rows is not None:
                ids, matrix, norms = [ids[i] for i in rows], matrix[rows], norms[rows]
        sims = (matrix @ q) / (q_norm * norms)
        top = _top_k(sims, ids, query.similarity_top_k)
        return VectorStoreQueryResult(similarities=[float(sims[i]) for i in top], ids=[ids[i] for i in top])

    def _rows(self, cached: _Matrix, node_ids: list[str]) -> Any:
        """The rows of ``node_ids`` in store order, or None for all of them (kept for
        the next query with the same ids)."""
        last = self._last_rows
        if last is not None and last[0] is cached and last[1] == node_ids:
            return last[2]
        wanted = set(node_ids)
        rows = [i for i, node_id in enumerate(cached.ids) if node_id in wanted]
        found = None if len(rows) == len(cached.ids) else np.array(rows, dtype=np.intp)
        self._last_rows = (cached, list(node_ids), found)
        return found

    def _matrix(self) -> _Matrix:
        embeddings = self._store.data.embedding_dict
        ids, vectors = list(embeddings), list(embeddings.values())
        cached = self._cached
        if cached is None or cached.vectors != vectors or cached.ids != ids:
            cached = self._cached = _build(ids, vectors)
        return cached


def _build(ids: list[str], vectors: list[Any]) -> _Matrix:
    matrix = norms = None
    if vectors:
        try:
            candidate = np.array(vectors, dtype=np.float64)
        except (TypeError, ValueError):  # vectors of different lengths, or not numbers
            candidate = None
        if candidate is not None and candidate.ndim == 2 and np.isfinite(candidate).all():
            row_norms = np.array([np.linalg.norm(row) for row in candidate])  # as LlamaIndex's cosine does
            if (row_norms > 0).all():
                matrix, norms = candidate, row_norms
    return _Matrix(ids, vectors, matrix, norms)


def _top_k(sims: Any, ids: list[str], k: int | None) -> list[int]:
    """Indices of the ``k`` largest ``(similarity, id)`` pairs, highest first (all of
    them when ``k`` is None or 0, as in LlamaIndex)."""
    n = len(ids)
    if not k or k >= n:
        k, candidates = n, list(range(n))
    else:
        kth = np.partition(sims, n - k)[n - k]
        candidates = np.flatnonzero(sims >= kth).tolist()  # with every tie of the k-th score
    pairs = zip(sims[candidates].tolist(), [ids[i] for i in candidates], candidates, strict=True)
    ranked = sorted(pairs, reverse=True)
    return [i for _, _, i in ranked[:k]]


def scanning(retriever: Any, scans: dict[int, MatrixScan]) -> Any:
    """``retriever`` with its ``SimpleVectorStore`` behind the store's :class:`MatrixScan`
    in ``scans`` (made on first use). It changes ``retriever`` itself: only call it on a
    retriever the backend made or copied."""
    store = getattr(retriever, "_vector_store", None)
    if type(store) is SimpleVectorStore:
        scan = scans.get(id(store))
        if scan is None or scan._store is not store:
            scan = scans[id(store)] = MatrixScan(store)
        retriever._vector_store = scan
    return retriever

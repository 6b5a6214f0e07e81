"""An approximate nearest-neighbour index over the store's unit vectors (faiss, the ``ann`` extra).

Above :data:`ANN_THRESHOLD` chunks the exact scan of the vector matrix costs more than a
hybrid query can spend, so the store asks this index for :data:`RERANK` candidates and
re-ranks them by their exact dot product (:meth:`ApproximateIndex.search_exact` does
both). Below it the exact scan is fast enough and exact, and stays.

The index is faiss's product quantisation with 4-bit codes scanned in SIMD registers
("fast scan", ``PQ128x4fs`` for dim 256: a 4-bit code per pair of dimensions), scanned
whole for every query. Its recall, speed and size, and why not an IVF or a graph index
(``benchmarks/bench_ann.py``), are in ``docs/benchmarks.md``.

Built deterministically: the quantiser is trained on a seeded sample, single-threaded,
and adding does not depend on the thread count. Persisted as faiss's own serialisation in
a uint8 array (:meth:`ApproximateIndex.to_array`), which the store writes as a ``.npy``
and reads back with ``allow_pickle=False``; never pickled.

``import selfrag_core.store.ann`` works without faiss; building or reading an index
without it raises :class:`~selfrag_core.errors.MissingDependencyError` naming the extra.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from selfrag_core.errors import ConfigurationError, MissingDependencyError

__all__ = ["ANN_THRESHOLD", "RERANK", "ApproximateIndex", "available"]

#: chunks above which the store searches the approximate index instead of scanning every vector
ANN_THRESHOLD = 100_000
#: candidates taken from the codes' scores and re-ranked exactly (at least ``k``)
RERANK = 1_000
#: below this many vectors there is too little to train a quantiser: the index is an exact flat one
_MIN_TRAIN = 1_024
#: vectors the quantiser is trained on (a seeded sample)
_TRAIN_SAMPLE = 16_384
_ADD_BATCH = 65_536


def available() -> bool:
    """Whether faiss (``pip install 'selfrag[ann]'``) is installed."""
    return importlib.util.find_spec("faiss") is not None


def _faiss() -> Any:
    try:
        import faiss  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as e:
        raise MissingDependencyError(
            "the approximate vector index needs faiss: pip install 'selfrag[ann]' (or pip install faiss-cpu)"
        ) from e
    return faiss


def _subquantizers(dim: int) -> int:
    """Sub-vectors of the product quantiser: two dimensions each, rounded to a multiple of 4
    (fast scan packs codes in groups), at least 4; 128 for dim 256."""
    m = max(4, (dim // 2 + 3) // 4 * 4)
    while dim % m and m > 4:
        m -= 4
    return m if dim % m == 0 else 1


def _as_matrix(vectors: np.ndarray, dim: int | None = None) -> np.ndarray:
    arr = np.ascontiguousarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or (dim is not None and arr.shape[1] != dim):
        want = f"(n, {dim})" if dim is not None else "(n, dim)"
        raise ConfigurationError(f"expected a {want} matrix of vectors, got shape {np.shape(vectors)}")
    return arr


class ApproximateIndex:
    """Candidates for the nearest unit vectors by inner product; positions are row numbers.

    Make one with :meth:`build` (or :meth:`from_array`); :meth:`add` appends rows, which
    get the next positions. :meth:`search` returns approximate candidates; the caller
    re-ranks them exactly, or calls :meth:`search_exact` with the vector matrix.
    """

    def __init__(self, index: Any) -> None:
        self._index = index

    @classmethod
    def build(cls, vectors: np.ndarray, *, seed: int = 0) -> ApproximateIndex:
        """Train the quantiser on a seeded sample of ``vectors`` (N, dim) and add them all."""
        faiss = _faiss()
        arr = _as_matrix(vectors)
        n, dim = arr.shape
        m = _subquantizers(dim)
        if n < _MIN_TRAIN or m == 1:
            index = faiss.IndexFlatIP(dim)
        else:
            index = faiss.IndexPQFastScan(dim, m, 4, faiss.METRIC_INNER_PRODUCT)
            index.pq.cp.seed = seed
            rng = np.random.default_rng(seed)
            take = np.sort(rng.choice(n, min(n, _TRAIN_SAMPLE), replace=False))
            # one thread: the quantiser's thousands of small k-means steps stall for whole time
            # slices on a busy machine when a parallel step waits for a descheduled thread
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)
            try:
                index.train(np.ascontiguousarray(arr[take]))
            finally:
                faiss.omp_set_num_threads(threads)
        out = cls(index)
        out.add(arr)
        return out

    def add(self, vectors: np.ndarray) -> None:
        """Append ``vectors`` (n, dim): they get positions ``len(self)`` to ``len(self) + n - 1``."""
        arr = _as_matrix(vectors, self.dim)
        for start in range(0, len(arr), _ADD_BATCH):
            self._index.add(arr[start : start + _ADD_BATCH])

    def search(self, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best positions (q, k) int64 by the codes' approximate scores (q, k) float32,
        best first; -1 (score -inf) pads rows when the index holds fewer than ``k``."""
        q = _as_matrix(np.atleast_2d(qvecs), self.dim)
        if k <= 0 or len(self) == 0:
            return np.full((len(q), max(k, 0)), -1, np.int64), np.full(
                (len(q), max(k, 0)), -np.inf, np.float32
            )
        scores, ids = self._index.search(q, k)
        scores = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
        return ids.astype(np.int64), scores

    def search_exact(
        self, qvecs: np.ndarray, k: int, vectors: np.ndarray, *, candidates: int = RERANK
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best of ``max(candidates, k)`` candidates by their exact dot product with
        the rows of ``vectors`` (the matrix the index was built from): positions (q, k) int64
        and scores (q, k) float32, best first, ties by position; -1 / -inf pad."""
        q = _as_matrix(np.atleast_2d(qvecs), self.dim)
        ids, _ = self.search(q, max(candidates, k))
        out_ids = np.full((len(q), k), -1, np.int64)
        out_scores = np.full((len(q), k), -np.inf, np.float32)
        for row, (cand, qv) in enumerate(zip(ids, q, strict=True)):
            cand = np.sort(cand[cand >= 0])  # ascending positions: sequential reads, ties by position
            exact = np.asarray(vectors[cand], dtype=np.float32) @ qv
            best = np.argsort(-exact, kind="stable")[:k]
            out_ids[row, : len(best)] = cand[best]
            out_scores[row, : len(best)] = exact[best]
        return out_ids, out_scores

    def to_array(self) -> np.ndarray:
        """The index as faiss serialises it, a uint8 array (save it with ``np.save``)."""
        return np.asarray(_faiss().serialize_index(self._index), dtype=np.uint8)

    @classmethod
    def from_array(cls, arr: np.ndarray) -> ApproximateIndex:
        """The index :meth:`to_array` gave (a memory-mapped ``np.load`` works: it is read once)."""
        faiss = _faiss()
        data = np.ascontiguousarray(arr, dtype=np.uint8)
        if data.ndim != 1:
            raise ConfigurationError(f"an approximate index is a 1-d uint8 array, got shape {data.shape}")
        return cls(faiss.deserialize_index(data))

    @property
    def dim(self) -> int:
        return int(self._index.d)

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def __repr__(self) -> str:
        return f"ApproximateIndex({type(self._index).__name__}, {len(self)} vectors of dim {self.dim})"

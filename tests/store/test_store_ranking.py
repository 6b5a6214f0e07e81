"""The search path's kernels: top-k selection, dense scores, mapped postings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from selfrag_core.store import RAG
from selfrag_core.store.dense import dot_scores
from selfrag_core.store.search import _top


def stable_top(score: np.ndarray, k: int) -> np.ndarray:
    """The reference: the first k of a stable sort by descending score, ascending."""
    return np.sort(np.argsort(-score, kind="stable")[:k])


@pytest.mark.parametrize("size", [1, 9, 10, 11, 700, 5_183, 60_000, 300_000])
@pytest.mark.parametrize("k", [1, 10, 40])
@pytest.mark.parametrize("kind", ["distinct", "ties", "zeros", "sparse"])
def test_top_picks_what_a_full_stable_sort_picks(size: int, k: int, kind: str) -> None:
    rng = np.random.default_rng(size * 100 + k)
    score = {
        "distinct": rng.standard_normal(size),
        "ties": rng.integers(0, 4, size),  # many equal scores at the cut: the first positions win
        "zeros": np.zeros(size),
        "sparse": np.where(rng.random(size) < 0.002, rng.random(size), 0.0),
    }[kind].astype(np.float32)
    assert np.array_equal(_top(score, k), stable_top(score, k))


def test_dot_scores_are_the_dot_products_one_column_a_query() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((257, 16)).astype(np.float32)
    queries = rng.standard_normal((3, 16)).astype(np.float32)
    scores = dot_scores(matrix, queries)
    assert scores.shape == (257, 3) and scores.dtype == np.float32
    np.testing.assert_allclose(
        scores, matrix.astype(np.float64) @ queries.T.astype(np.float64), rtol=1e-5, atol=1e-5
    )


def test_lexical_search_returns_only_chunks_sharing_a_term_even_below_top_k() -> None:
    rag = RAG(chunk_size=20_000, chunk_overlap=0)
    rag.index_many(
        [{"text": f"filler words number {i}", "source": f"f{i}"} for i in range(3_000)]
        + [{"text": "the rare walrus sleeps", "source": "w1"}, {"text": "a walrus swims", "source": "w2"}]
    )
    hits = rag.search("walrus", top_k=10)
    assert sorted(h.source for h in hits) == ["w1", "w2"] and all(h.score > 0 for h in hits)


def test_opened_postings_are_plain_arrays_over_the_mapping(tmp_path: Path) -> None:
    rag = RAG()
    rag.index_many([{"text": f"castle garden river {i}", "source": f"s{i}"} for i in range(50)])
    rag.save(tmp_path)
    loaded = RAG.load(tmp_path)
    postings = loaded._index._lexical.segments[0][1]
    for array in (postings.tf, postings.indices, postings.indptr, postings.lengths):
        # np.memmap's slicing runs Python code at every query: a plain view, still mapped
        assert type(array) is np.ndarray and isinstance(array.base, np.memmap)
    assert [h.source for h in loaded.search("castle 7")] == [h.source for h in rag.search("castle 7")]

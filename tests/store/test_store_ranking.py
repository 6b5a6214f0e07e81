"""The search path's kernels: top-k selection, dense scores, query vectors, mapped
postings; and whole searches against a plain reference (every score, full sorts)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from selfrag_core.store import RAG, HashingEmbeddings
from selfrag_core.store.dense import as_matrix, dot_scores
from selfrag_core.store.search import _best


@pytest.mark.parametrize("size", [1, 9, 10, 11, 80, 81, 700, 5_183, 60_000, 300_000])
@pytest.mark.parametrize("k", [1, 10, 40])
@pytest.mark.parametrize("kind", ["distinct", "ties", "zeros", "sparse"])
def test_best_is_the_first_k_of_a_full_stable_sort(size: int, k: int, kind: str) -> None:
    rng = np.random.default_rng(size * 100 + k)
    score = {
        "distinct": rng.standard_normal(size),
        "ties": rng.integers(0, 4, size),  # many equal scores at the cut: the first positions win
        "zeros": np.zeros(size),
        "sparse": np.where(rng.random(size) < 0.002, rng.random(size), 0.0),
    }[kind].astype(np.float32)
    assert np.array_equal(_best(score, k), np.argsort(-score, kind="stable")[:k])


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """The reference normalisation: each row over its np.linalg.norm (zero rows kept)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0.0, 1.0, norms)


def test_query_vectors_are_normalised_to_the_bits_of_linalg_norm() -> None:
    rng = np.random.default_rng(11)
    rows = rng.standard_normal((50, 384)).astype(np.float32)
    rows[3] = 0.0  # kept as it is
    rows[4] = 1e-30  # its squares underflow to a zero norm: kept as well
    rows[5] *= 1e20  # its squares overflow: an infinite norm, as linalg.norm has it
    with np.errstate(over="ignore"):
        for one in (rows[0], rows[3], rows[5], rows[7] * 3):
            assert np.array_equal(as_matrix(one, 1), unit_rows(one[None]))
        assert np.array_equal(as_matrix(rows, 50), unit_rows(rows))
    assert np.array_equal(as_matrix(rows[6:9].tolist(), 3), unit_rows(rows[6:9]))
    for bad in (np.nan, np.inf):
        broken = rows[:2].copy()
        broken[1, 7] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            as_matrix(broken, 2)
        with pytest.raises(ValueError, match="NaN or infinite"):
            as_matrix(broken[1], 1)


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


WORDS = [
    f"{a}{b}"
    for a in ("gran", "tel", "mor", "vix", "pal", "dun", "sor")
    for b in ("a", "o", "is", "um", "et")
]


def ranking_corpus() -> list[dict[str, Any]]:
    """3,000 short documents (enough for the top k's blocks) of a 35-word vocabulary,
    seeded; every 50th repeats the one before it, so equal scores meet at the cuts."""
    rng = random.Random(7)
    docs: list[dict[str, Any]] = []
    for i in range(3_000):
        text = docs[-1]["text"] if i % 50 == 49 else " ".join(rng.choices(WORDS, k=rng.randint(3, 15)))
        docs.append({"text": text, "source": f"d{i}", "group": i % 3})
    return docs


def reference(rag: RAG, query: str, top_k: int, alpha: float, kept: np.ndarray) -> list[tuple[Any, ...]]:
    """A search as the scoring rules say it, plainly: every chunk scored, the ``kept``
    ones (a filter's) sorted whole (stably: of equal scores, the first chunk first)."""
    index = rag._index
    valid = kept.copy()
    lex = index.lexical_scores(query) if alpha < 1 else None
    dense = None
    if alpha > 0:
        qvec = unit_rows(np.asarray(index.embedder.embed_queries([query]), np.float32))
        dense = dot_scores(index.vectors(), qvec)[:, 0]
    if dense is None:
        assert lex is not None
        valid &= lex > 0
        score = lex
    elif lex is None:
        score = dense
    else:

        def scaled(s: np.ndarray) -> np.ndarray:
            low, high = float(s[valid].min()), float(s[valid].max())
            assert high > low
            out: np.ndarray = (s - low) / (high - low)
            return out

        score = alpha * scaled(dense) + (1 - alpha) * scaled(lex)
    kept = np.flatnonzero(valid)
    order = kept[np.argsort(-score[kept], kind="stable")][:top_k]
    return [
        (
            index.chunks[p].id,
            float(score[p]),
            None if lex is None else float(lex[p]),
            None if dense is None else float(dense[p]),
        )
        for p in order
    ]


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0], ids=["lexical", "hybrid", "dense"])
def test_searches_rank_and_score_as_the_plain_reference(alpha: float, tmp_path: Path) -> None:
    embedder = None if alpha == 0 else HashingEmbeddings(64)
    rag = RAG(embedder, bm25_alpha=None if alpha == 0 else alpha, chunk_size=20_000, chunk_overlap=0)
    rag.index_many(ranking_corpus())
    rag.save(tmp_path / "index")
    opened = RAG.load(tmp_path / "index", embed=embedder)  # its chunks read from the saved columns
    opened.index_many([{"text": "granis telum morum", "source": "late"}])  # and one added after
    rng = random.Random(3)
    queries = [" ".join(rng.sample(WORDS, rng.randint(1, 4))) for _ in range(25)] + ["granis", "telum"]
    compared = 0
    for searched in (rag, opened):
        metadata = [c.metadata for c in searched._index.chunks]
        for options in ({}, {"group": 1}):
            kept = np.array([all(m.get(k) == v for k, v in options.items()) for m in metadata])
            for q in queries:
                want = reference(searched, q, 40, alpha, kept)  # the smaller top k: its first ones
                for top_k in (1, 3, 10, 40):
                    hits = searched.search(q, top_k, **options)
                    found = [(h.id, h.score, h.lexical_score, h.dense_score) for h in hits]
                    assert found == want[:top_k], (q, top_k, options)
                    assert all(h.source == h.metadata["source"] == h.id.split("#")[0] for h in hits)
                    compared += len(found)
    assert compared > 3_000

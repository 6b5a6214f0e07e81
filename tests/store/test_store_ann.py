"""The approximate vector index (selfrag_core.store.ann): recall against the exact scan,
appended positions, the persisted form, determinism, and the error without faiss."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np
import pytest

from selfrag_core.errors import MissingDependencyError
from selfrag_core.store import HashingEmbeddings, ann

pytest.importorskip("faiss")

WORDS = [f"w{i}" for i in range(2_000)]


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def hashing_corpus(docs: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashing embeddings of random 30-word texts and 3-word queries over a Zipf vocabulary."""
    rng = np.random.default_rng(3)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    draw = lambda n: rng.choice(len(WORDS), size=n, p=weights / weights.sum())  # noqa: E731
    emb = HashingEmbeddings()
    texts = [" ".join(WORDS[w] for w in draw(30)) for _ in range(docs)]
    asks = [" ".join(WORDS[w] for w in draw(3)) for _ in range(queries)]
    return emb.embed_documents(texts), np.stack([emb.embed_query(q) for q in asks])


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(
        np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found.tolist(), exact.tolist(), strict=True)])
    )


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray]:
    return hashing_corpus(4_000, 100)


@pytest.fixture(scope="module")
def index(corpus: tuple[np.ndarray, np.ndarray]) -> ann.ApproximateIndex:
    return ann.ApproximateIndex.build(corpus[0], seed=0)


def test_recall_at_10_against_the_exact_scan_on_hashing_vectors(
    corpus: tuple[np.ndarray, np.ndarray], index: ann.ApproximateIndex
) -> None:
    vectors, queries = corpus
    ids, scores = index.search_exact(queries, 10, vectors)
    assert recall(ids, exact_top(vectors, queries, 10)) >= 0.95
    # the scores are the exact dot products, best first
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ vectors.T, ids, 1), rtol=1e-5, atol=1e-6)
    assert (np.diff(scores, axis=1) <= 0).all()


def test_recall_on_random_unit_vectors() -> None:
    rng = np.random.default_rng(5)
    vectors, queries = unit(rng.standard_normal((3_000, 64))), unit(rng.standard_normal((50, 64)))
    index = ann.ApproximateIndex.build(vectors)
    assert len(index) == 3_000 and index.dim == 64
    assert recall(index.search_exact(queries, 10, vectors)[0], exact_top(vectors, queries, 10)) >= 0.95


def test_search_gives_approximate_candidates_best_first(
    corpus: tuple[np.ndarray, np.ndarray], index: ann.ApproximateIndex
) -> None:
    ids, scores = index.search(corpus[1][:5], 50)
    assert ids.shape == scores.shape == (5, 50) and ids.dtype == np.int64 and scores.dtype == np.float32
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    assert ((ids >= 0) & (ids < len(index))).all()
    one_ids, _ = index.search(corpus[1][0], 50)  # one query as a 1-d vector
    np.testing.assert_array_equal(one_ids, ids[:1])


def test_add_extends_the_positions(corpus: tuple[np.ndarray, np.ndarray]) -> None:
    vectors, queries = corpus
    index = ann.ApproximateIndex.build(vectors[:3_000])
    index.add(vectors[3_000:])
    assert len(index) == len(vectors)
    ids, _ = index.search_exact(queries, 10, vectors)
    assert ids.max() >= 3_000  # the appended rows are found at their positions
    assert recall(ids, exact_top(vectors, queries, 10)) >= 0.95
    # each appended vector is its own best match
    own, _ = index.search_exact(vectors[3_990:], 1, vectors)
    np.testing.assert_array_equal(own[:, 0], np.arange(3_990, 4_000))


def test_fewer_vectors_than_k_pad_with_minus_one() -> None:
    vectors = unit(np.random.default_rng(1).standard_normal((5, 16)))
    index = ann.ApproximateIndex.build(vectors)  # too few to train: an exact flat index
    ids, scores = index.search_exact(vectors[:2], 8, vectors)
    assert (ids[:, 5:] == -1).all() and np.isneginf(scores[:, 5:]).all()
    np.testing.assert_array_equal(ids[:, 0], [0, 1])
    ids, _ = index.search(vectors[:1], 0)
    assert ids.shape == (1, 0)


def test_the_persisted_array_round_trips_through_npy(
    tmp_path: Any, corpus: tuple[np.ndarray, np.ndarray], index: ann.ApproximateIndex
) -> None:
    vectors, queries = corpus
    arr = index.to_array()
    assert arr.dtype == np.uint8 and arr.ndim == 1
    np.save(tmp_path / "ann.npy", arr)
    opened = ann.ApproximateIndex.from_array(np.load(tmp_path / "ann.npy", mmap_mode="r", allow_pickle=False))
    assert len(opened) == len(index)
    for a, b in zip(opened.search(queries, 50), index.search(queries, 50), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        opened.search_exact(queries, 10, vectors)[0], index.search_exact(queries, 10, vectors)[0]
    )


def test_the_build_is_deterministic_given_the_seed_whatever_the_threads(
    corpus: tuple[np.ndarray, np.ndarray], index: ann.ApproximateIndex
) -> None:
    import faiss  # type: ignore[import-untyped,import-not-found,unused-ignore]

    threads = faiss.omp_get_max_threads()
    try:
        faiss.omp_set_num_threads(1 if threads > 1 else 2)
        again = ann.ApproximateIndex.build(corpus[0], seed=0)
    finally:
        faiss.omp_set_num_threads(threads)
    np.testing.assert_array_equal(again.to_array(), index.to_array())
    assert not np.array_equal(ann.ApproximateIndex.build(corpus[0], seed=1).to_array(), index.to_array())


def test_a_vector_of_the_wrong_dimension_is_refused(index: ann.ApproximateIndex) -> None:
    with pytest.raises(ValueError, match="matrix of vectors"):
        index.add(np.zeros((2, 8), np.float32))


def test_without_faiss_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_faiss(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "faiss" or name.startswith("faiss."):
            raise ImportError("No module named 'faiss'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_faiss)
    monkeypatch.delitem(__import__("sys").modules, "faiss", raising=False)
    with pytest.raises(MissingDependencyError, match=r"pip install 'selfrag\[ann\]'"):
        ann.ApproximateIndex.build(np.eye(4, dtype=np.float32))
    with pytest.raises(ImportError):  # also an ImportError, for callers that catch that
        ann.ApproximateIndex.from_array(np.zeros(8, np.uint8))
    monkeypatch.setattr(ann.importlib.util, "find_spec", lambda name: None)
    assert not ann.available()

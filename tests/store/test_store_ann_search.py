"""The store's dense search through the approximate index, above its threshold (lowered
here): results agree with the exact scan, the index is saved and read back instead of
rebuilt, and deleted chunks, filters and chunks added since are searched correctly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from selfrag_core.store import RAG, ann

pytest.importorskip("faiss")

WORDS = [f"w{i}" for i in range(1_500)]
QUERIES = [f"{WORDS[i]} {WORDS[i * 7 + 3]} {WORDS[i * 13 + 1]}" for i in range(1, 40)]


def docs(n: int, offset: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(offset)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    picks = rng.choice(len(WORDS), size=(n, 25), p=weights / weights.sum())
    return [
        {"text": " ".join(WORDS[w] for w in row), "source": f"d{offset + i}", "part": i % 50}
        for i, row in enumerate(picks.tolist())
    ]


def build(alpha: float, **kwargs: Any) -> RAG:
    rag = RAG("hashing", bm25_alpha=alpha, **kwargs)
    rag.index_many(docs(3_000))
    return rag


def ids(rag: RAG, query: str, **kwargs: Any) -> list[str]:
    return [h.id for h in rag.search(query, top_k=10, **kwargs)]


@pytest.fixture
def threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ann, "ANN_THRESHOLD", 2_000)


def overlap(a: list[list[str]], b: list[list[str]]) -> float:
    return float(np.mean([len(set(x) & set(y)) / max(len(y), 1) for x, y in zip(a, b, strict=True)]))


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_results_agree_with_the_exact_scan(alpha: float, threshold: None) -> None:
    approximate = build(alpha)
    found = [ids(approximate, q) for q in QUERIES]
    assert approximate._index._anns.get("tail") is not None  # it was used
    ann.ANN_THRESHOLD = 10**9  # the same index, scanned
    approximate._index._anns.clear()
    exact = [ids(approximate, q) for q in QUERIES]
    assert overlap(found, exact) >= 0.95


def test_the_index_is_saved_and_read_back_not_rebuilt(
    tmp_path: Path, threshold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rag = build(0.5)
    expected = [ids(rag, q) for q in QUERIES]
    rag.save(tmp_path)
    assert "ann.npy" in json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))["files"]

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the approximate index was rebuilt")

    monkeypatch.setattr(ann.ApproximateIndex, "build", forbidden)
    loaded = RAG.load(tmp_path)
    assert [ids(loaded, q) for q in QUERIES] == expected
    assert loaded._index._anns.get("base") is not None


def test_deleted_added_and_filtered_chunks(tmp_path: Path, threshold: None) -> None:
    rag = build(1.0)
    rag.save(tmp_path)
    loaded = RAG.load(tmp_path)
    top = ids(loaded, QUERIES[0])
    gone = top[0].split("#")[0]
    loaded.delete(gone)
    assert all(not h.startswith(gone + "#") for q in QUERIES for h in ids(loaded, q))
    loaded.index(QUERIES[0], source="new")  # the tail is scanned exactly
    assert ids(loaded, QUERIES[0])[0] == "new#0"
    narrow = ids(loaded, QUERIES[1], part=7)  # a filter few of the candidates pass: scanned
    assert len(narrow) == 10 and all(loaded.search(QUERIES[1], top_k=10, part=7))
    ann.ANN_THRESHOLD = 10**9
    loaded._index._anns.clear()
    assert ids(loaded, QUERIES[1], part=7) == narrow


def test_without_faiss_the_vectors_are_scanned(
    threshold: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ann, "available", lambda: False)
    rag = build(1.0)
    assert ids(rag, QUERIES[0])
    assert rag._index._anns == {"tail": None} and "selfrag[ann]" in caplog.text


def test_ranking_only_the_candidates_loses_no_chunk(threshold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # with an approximate index only its candidates and the best BM25 chunks are scored:
    # every other chunk has the lowest dense score and a lower BM25 score, so cannot rank
    from selfrag_core.store import search

    rag = build(0.5)
    pruned = [[(h.id, h.score) for h in rag.search(q, top_k=10)] for q in QUERIES]
    whole = search._rank
    monkeypatch.setattr(search, "_rank", lambda *args: whole(*args[:5]))  # every position scored
    assert [[(h.id, h.score) for h in rag.search(q, top_k=10)] for q in QUERIES] == pruned


def test_a_reload_of_a_delta_keeps_the_base_approximate_index(tmp_path: Path, threshold: None) -> None:
    writer = build(1.0, path=tmp_path)
    writer.save()
    reader = RAG("hashing", bm25_alpha=1.0, path=tmp_path)
    ids(reader, QUERIES[0])
    base = reader._index._anns.get("base")
    assert base is not None
    writer.index(QUERIES[2], source="new")
    writer.save()  # a delta
    assert reader.refresh()
    assert reader._index._anns.get("base") is base  # not read again
    assert ids(reader, QUERIES[2])[0] == "new#0"

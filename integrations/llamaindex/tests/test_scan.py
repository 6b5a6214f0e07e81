"""The vectorized SimpleVectorStore scan gives LlamaIndex's own results, and steps aside
for every query it does not cover."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.retrievers import VectorIndexRetriever
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from selfrag_llamaindex import _scan, as_backend
from selfrag_llamaindex._scan import MatrixScan

from .li_fakes import HashEmbedding, hash_vector

pytestmark = pytest.mark.integration

COLOURS = ["red", "green", "blue", "amber", "violet"]
ANIMALS = ["fox", "heron", "otter", "lynx", "newt", "ibis"]
PLACES = ["river", "forest", "harbour", "desert"]
QUERIES = [
    "Where does the red fox live?",
    "blue otter harbour",
    "violet ibis near the desert river",
    "forest",
    "Which animal is amber?",
    "nothing in common with the corpus",
]


@pytest.fixture
def zoo() -> VectorStoreIndex:
    """120 short texts sharing words, so many similarities tie exactly."""
    nodes = [
        TextNode(text=f"The {c} {a} lives by the {p}.", id_=f"{c}-{a}-{p}", metadata={"place": p})
        for c, a, p in itertools.product(COLOURS, ANIMALS, PLACES)
    ]
    return VectorStoreIndex(nodes, embed_model=HashEmbedding())


def _same_results(fast: list, slow: list) -> None:
    """The same nodes with the same scores (to the last bits of a dot product); where
    scores tie at the cut-off, either of the tied nodes may be in."""
    assert len(fast) == len(slow)
    assert [n.score for n in fast] == sorted((n.score for n in fast), reverse=True)
    assert [n.score for n in fast] == pytest.approx([n.score for n in slow], rel=1e-12, abs=1e-12)
    a, b = {n.node.node_id: n.score for n in fast}, {n.node.node_id: n.score for n in slow}
    for node_id in a.keys() & b.keys():
        assert a[node_id] == pytest.approx(b[node_id], rel=1e-12, abs=1e-12)
    cut = min(b.values(), default=0.0)
    assert all(a.get(i, b.get(i)) == pytest.approx(cut, abs=1e-12) for i in a.keys() ^ b.keys())


@pytest.mark.parametrize("top_k", [1, 3, 10, 200])
def test_the_scan_ranks_as_llamaindex_does(zoo, top_k) -> None:
    fast, slow = as_backend(zoo), as_backend(zoo, vectorized=False)
    assert isinstance(fast.retriever_for(top_k)._vector_store, MatrixScan)
    assert type(slow.retriever_for(top_k)._vector_store) is SimpleVectorStore
    for query in QUERIES:
        _same_results(fast.retriever_for(top_k).retrieve(query), slow.retriever_for(top_k).retrieve(query))


async def test_async_retrieval_is_scanned_too(zoo) -> None:
    fast, slow = as_backend(zoo), as_backend(zoo, vectorized=False)
    for query in QUERIES:
        _same_results(await fast.retriever_for(5).aretrieve(query), slow.retriever_for(5).retrieve(query))
    docs = await fast.aretrieve(QUERIES[0], 3)
    assert docs[0].text.startswith("The red fox")


@pytest.mark.parametrize("top_k", [None, 0])
def test_no_top_k_means_every_vector_as_in_llamaindex(zoo, top_k) -> None:
    store = zoo.vector_store
    query = VectorStoreQuery(query_embedding=hash_vector(QUERIES[1]), similarity_top_k=top_k)
    found, expected = MatrixScan(store).query(query), store.query(query)
    assert len(found.ids) == len(expected.ids) == 120
    ours, theirs = (
        dict(zip(found.ids, found.similarities, strict=True)),
        dict(zip(expected.ids, expected.similarities, strict=True)),
    )
    assert ours.keys() == theirs.keys()
    assert [ours[i] for i in sorted(ours)] == pytest.approx([theirs[i] for i in sorted(ours)], abs=1e-12)
    assert found.similarities == sorted(found.similarities, reverse=True)


def test_a_retriever_limited_to_some_nodes_stays_limited(zoo) -> None:
    allowed = [f"{c}-fox-{p}" for c in COLOURS for p in PLACES]
    retriever = VectorIndexRetriever(zoo, similarity_top_k=2, node_ids=allowed)
    fast, slow = as_backend(retriever), as_backend(retriever, vectorized=False)
    for query in QUERIES:
        found = fast.retriever_for(4).retrieve(query)
        assert {n.node.node_id for n in found} <= set(allowed)
        _same_results(found, slow.retriever_for(4).retrieve(query))
    assert type(retriever._vector_store) is SimpleVectorStore  # the caller's retriever is untouched


@pytest.mark.parametrize("vectorized", [True, False])
def test_inserted_and_deleted_nodes_are_seen_by_the_next_query(zoo, vectorized) -> None:
    backend = as_backend(zoo, vectorized=vectorized)
    query = "a golden phoenix in the volcano"
    assert "phoenix" not in backend.retrieve(query, 1)[0].text
    zoo.insert_nodes([TextNode(text="The golden phoenix lives in the volcano.", id_="phoenix")])
    assert backend.retrieve(query, 1)[0].id == "phoenix"
    zoo.delete_nodes(["phoenix"])
    assert all(d.id != "phoenix" for d in backend.retrieve(query, 5))
    # a node stored again under the same id with another text: its new vector counts
    zoo.insert_nodes([TextNode(text="A golden phoenix nests in the volcano.", id_="red-fox-river")])
    assert backend.retrieve(query, 1)[0].id == "red-fox-river"


def test_what_the_scan_does_not_cover_goes_to_the_store(zoo) -> None:
    store = zoo.vector_store
    scan = MatrixScan(store)
    vector = hash_vector(QUERIES[0])
    filters = MetadataFilters(filters=[MetadataFilter(key="place", value="forest")])
    not_covered = [
        VectorStoreQuery(query_embedding=vector, similarity_top_k=3, filters=filters),
        VectorStoreQuery(query_embedding=vector, similarity_top_k=3, mode=VectorStoreQueryMode.MMR),
        VectorStoreQuery(query_embedding=vector, similarity_top_k=3, doc_ids=["x"]),
        VectorStoreQuery(query_embedding=[0.0] * len(vector), similarity_top_k=3),  # no direction
        VectorStoreQuery(query_embedding=vector[:10], similarity_top_k=3),  # another dimension
        VectorStoreQuery(query_embedding=None, similarity_top_k=3),
    ]
    for query in not_covered:
        assert scan._scan(query) is None
    assert scan._scan(VectorStoreQuery(query_embedding=vector, similarity_top_k=3)) is not None
    # through a retriever with filters: the store's own answer, filter applied
    retriever = zoo.as_retriever(similarity_top_k=3, filters=filters)
    found = as_backend(retriever).retrieve(QUERIES[0], 3)
    assert found and all(d.metadata["place"] == "forest" for d in found)


async def test_async_queries_it_does_not_cover_go_to_the_store_too(zoo) -> None:
    filters = MetadataFilters(filters=[MetadataFilter(key="place", value="desert")])
    backend = as_backend(zoo.as_retriever(similarity_top_k=3, filters=filters))
    assert isinstance(backend.retriever_for(3)._vector_store, MatrixScan)
    found = await backend.aretrieve(QUERIES[2], 3)
    assert len(found) == 3 and all(d.metadata["place"] == "desert" for d in found)


def test_an_empty_or_irregular_store_is_left_to_llamaindex() -> None:
    store = SimpleVectorStore()
    query = VectorStoreQuery(query_embedding=[1.0, 0.0], similarity_top_k=2)
    assert MatrixScan(store)._scan(query) is None and MatrixScan(store).query(query).ids == []
    store.data.embedding_dict.update({"a": [1.0, 0.0], "b": [0.0, 0.0]})  # a zero vector
    assert MatrixScan(store)._scan(query) is None


@pytest.mark.parametrize("levels", [2, 5, 1000])
def test_the_top_k_are_the_largest_score_and_id_pairs_ties_and_all(levels) -> None:
    """Against sorting every (score, id) pair: scores with few distinct values tie a lot."""
    rng = np.random.default_rng(levels)
    for n in (1, 7, 200):
        sims = rng.integers(0, levels, n).astype(np.float64) / levels
        ids = [f"node-{i:03d}" for i in rng.permutation(n)]
        expected = [i for _, _, i in sorted(zip(sims.tolist(), ids, range(n), strict=True), reverse=True)]
        for k in (None, 0, 1, 3, n - 1, n, n + 5):
            want = expected if not k or k >= n else expected[:k]
            assert _scan._top_k(sims, ids, k) == want

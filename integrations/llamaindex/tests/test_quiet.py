"""Retrieval without the instrumentation nobody receives: the same nodes as the
retriever's own ``retrieve``, and every event back as soon as anything listens."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Iterator
from typing import Any

import llama_index.core.instrumentation as instrument
import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.retrievers import VectorIndexRetriever
from llama_index.core.schema import IndexNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.kvstore import SimpleKVStore

from selfrag_llamaindex import _quiet, as_backend
from selfrag_llamaindex._usage import UsageHandler

from .li_fakes import HashEmbedding, hash_vector

pytestmark = pytest.mark.integration

QUERIES = ["What is the capital of France?", "Berlin", "rivers and mountains", "zzz unrelated"]


def _ids_and_scores(nodes: list[NodeWithScore]) -> list[tuple[str, float | None]]:
    return [(n.node.node_id, n.score) for n in nodes]


class Collect(BaseEventHandler):
    seen: list[str]

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.seen.append(event.class_name())


@pytest.fixture
def root_handler() -> Iterator[Collect]:
    handler = Collect(seen=[])
    root = instrument.get_dispatcher()
    root.add_event_handler(handler)
    yield handler
    root.event_handlers.remove(handler)


def test_nothing_observes_a_fresh_index_retriever(index) -> None:
    assert _quiet.unobserved(index.as_retriever(similarity_top_k=3)) == _quiet.DEEP


@pytest.mark.parametrize("vectorized", [True, False])
def test_the_same_nodes_and_scores_as_the_retrievers_own(index, vectorized) -> None:
    quiet = as_backend(index, vectorized=vectorized)
    loud = as_backend(index, vectorized=vectorized, instrument="always")
    for query in QUERIES:
        retriever = loud.retriever_for(4)
        own = _ids_and_scores(retriever.retrieve(query))
        for depth in (_quiet.DEEP, _quiet.OUTER):
            assert _ids_and_scores(_quiet.retrieve(retriever, query, depth)) == own
            assert _ids_and_scores(asyncio.run(_quiet.aretrieve(retriever, query, depth))) == own
        assert quiet.retrieve(query, 4) == loud.retrieve(query, 4)
        assert asyncio.run(quiet.aretrieve(query, 4)) == asyncio.run(loud.aretrieve(query, 4))


def test_the_backend_takes_the_quiet_path_only_when_unobserved(index, monkeypatch) -> None:
    calls: list[str] = []
    quiet = _quiet.retrieve

    def counted(retriever: Any, query: str, depth: str) -> Any:
        calls.append(depth)
        return quiet(retriever, query, depth)

    monkeypatch.setattr(_quiet, "retrieve", counted)
    as_backend(index).retrieve("Paris", 2)
    assert calls == [_quiet.DEEP]
    as_backend(index, instrument="always").retrieve("Paris", 2)
    assert calls == [_quiet.DEEP]
    with pytest.raises(ValueError, match="instrument"):
        as_backend(index, instrument="sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cls", "name", "then"),
    [
        (BaseRetriever, "retrieve", None),
        (BaseRetriever, "aretrieve", None),
        (VectorIndexRetriever, "_aretrieve", _quiet.OUTER),
        (BaseEmbedding, "aget_query_embedding", _quiet.OUTER),
    ],
)
def test_a_method_patched_in_place_is_not_skipped(index, monkeypatch, cls, name, then) -> None:
    """An instrumentor may wrap LlamaIndex's methods on the class itself (no subclass):
    the quiet path must then call them, from the next retrieval on and no longer after."""
    retriever = index.as_retriever(similarity_top_k=2)
    assert _quiet.unobserved(retriever) == _quiet.DEEP
    original = inspect.getattr_static(cls, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    monkeypatch.setattr(cls, name, wrapper)
    assert _quiet.unobserved(retriever) == then
    monkeypatch.undo()
    assert _quiet.unobserved(retriever) == _quiet.DEEP


def test_only_llamaindexs_own_functions_count_as_unpatched() -> None:
    assert all(map(_quiet._llamaindex_own, _quiet._OUTER_SKIPS.values()))
    assert all(map(_quiet._llamaindex_own, _quiet._EMBED_SKIPS.values()))

    def retrieve(self: Any, query: Any) -> Any:  # a plain wrapper, as a patch installed early would be
        return []

    assert not _quiet._llamaindex_own(retrieve)
    assert not _quiet._llamaindex_own(functools.wraps(BaseRetriever.retrieve)(retrieve))


def test_an_empty_query_fails_as_the_retrievers_own_does(index) -> None:
    retriever = index.as_retriever(similarity_top_k=2)
    with pytest.raises(TypeError) as own:
        retriever.retrieve("")
    with pytest.raises(type(own.value)):
        _quiet.retrieve(retriever, "", _quiet.DEEP)
    with pytest.raises(type(own.value)):
        asyncio.run(_quiet.aretrieve(retriever, "", _quiet.DEEP))


def test_callback_events_inside_a_quiet_retrieval_stay_in_a_per_retrieval_trace() -> None:
    class Eventful(Letters):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            with self.callback_manager.event(CBEventType.EMBEDDING, payload={}):
                return super()._retrieve(query_bundle)

    retriever = Eventful()
    assert _quiet.unobserved(retriever) == _quiet.OUTER
    backend = as_backend(retriever)
    for _ in range(50):
        backend.retrieve("a query", 2)
        asyncio.run(backend.aretrieve("b query", 2))
    assert sum(map(len, retriever.callback_manager.trace_map.values())) <= 2  # not one per retrieval


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("whose", ["retriever", "embedding"])
def test_a_callback_handler_on_the_retriever_or_its_embedding_sees_their_events(whose, use_async) -> None:
    debug = LlamaDebugHandler(print_trace_on_end=False)
    nodes = [TextNode(text=f"text number {i}", id_=f"n{i}") for i in range(5)]
    index = VectorStoreIndex(nodes, embed_model=HashEmbedding())
    index._embed_model.callback_manager = CallbackManager([debug] if whose == "embedding" else [])
    manager = CallbackManager([debug] if whose == "retriever" else [])
    retriever = VectorIndexRetriever(index=index, similarity_top_k=2, callback_manager=manager)
    assert _quiet.unobserved(retriever) == (None if whose == "retriever" else _quiet.OUTER)
    backend = as_backend(retriever)
    docs = asyncio.run(backend.aretrieve("text 3", 2)) if use_async else backend.retrieve("text 3", 2)
    assert len(docs) == 2
    watched = CBEventType.RETRIEVE if whose == "retriever" else CBEventType.EMBEDDING
    assert debug.get_event_pairs(watched)


@pytest.mark.parametrize("use_async", [False, True])
def test_an_instrumentation_event_handler_sees_the_retrieval_events(index, root_handler, use_async) -> None:
    backend = as_backend(index)
    assert _quiet.unobserved(backend.retriever_for(2)) is None
    asyncio.run(backend.aretrieve("Paris", 2)) if use_async else backend.retrieve("Paris", 2)
    for name in ("RetrievalStartEvent", "EmbeddingStartEvent", "EmbeddingEndEvent", "RetrievalEndEvent"):
        assert name in root_handler.seen


def test_a_span_handler_on_the_embeddings_dispatcher_alone_sees_the_embedding_span(index) -> None:
    spans = SimpleSpanHandler()
    dispatcher = instrument.get_dispatcher(BaseEmbedding.__module__)
    dispatcher.add_span_handler(spans)
    try:
        as_backend(index).retrieve("Paris", 2)
    finally:
        dispatcher.span_handlers.remove(spans)
    assert any("get_query_embedding" in span.id_ for span in spans.completed_spans)


def test_selfrags_own_token_counter_does_not_count_as_observing(index) -> None:
    root = instrument.get_dispatcher()
    counter = UsageHandler()
    root.add_event_handler(counter)
    try:
        assert _quiet.unobserved(index.as_retriever(similarity_top_k=2)) == _quiet.DEEP
    finally:
        root.event_handlers.remove(counter)


def test_embeddings_and_retrievers_that_change_the_steps_keep_the_full_path() -> None:
    class OwnQueryEmbedding(HashEmbedding):
        def get_query_embedding(self, query: str) -> list[float]:
            return hash_vector(query.upper())

    nodes = [TextNode(text="alpha beta", id_="a")]
    own_embedding = VectorStoreIndex(nodes, embed_model=OwnQueryEmbedding())
    assert _quiet.unobserved(own_embedding.as_retriever(similarity_top_k=1)) == _quiet.OUTER

    cached = HashEmbedding(embeddings_cache=SimpleKVStore())
    index = VectorStoreIndex(nodes, embed_model=cached)
    assert index._embed_model is cached
    assert _quiet.unobserved(index.as_retriever(similarity_top_k=1)) == _quiet.OUTER

    class OwnSteps(VectorIndexRetriever):
        pass

    class OwnRetrieve(VectorIndexRetriever):
        async def aretrieve(self, str_or_query_bundle: Any) -> list[NodeWithScore]:
            return []

    index = VectorStoreIndex(nodes, embed_model=HashEmbedding())
    assert _quiet.unobserved(OwnSteps(index=index, similarity_top_k=1)) == _quiet.OUTER
    assert _quiet.unobserved(OwnRetrieve(index=index, similarity_top_k=1)) is None


def test_recursive_retrieval_of_index_nodes_is_kept() -> None:
    inner = VectorStoreIndex(
        [TextNode(text="the inner lake is deep", id_="lake"), TextNode(text="inner hills", id_="hill")],
        embed_model=HashEmbedding(),
    ).as_retriever(similarity_top_k=1)
    nodes = [
        TextNode(text="an outer road", id_="road"),
        IndexNode(text="inner lake summary", index_id="inner", id_="pointer"),
    ]
    outer = VectorStoreIndex(nodes, embed_model=HashEmbedding())
    retriever = VectorIndexRetriever(index=outer, similarity_top_k=2, object_map={"inner": inner})
    assert _quiet.unobserved(retriever) == _quiet.DEEP
    own = _ids_and_scores(retriever.retrieve(QueryBundle("inner lake")))
    assert "lake" in [node_id for node_id, _ in own]  # the IndexNode was followed
    for depth in (_quiet.DEEP, _quiet.OUTER):
        assert _ids_and_scores(_quiet.retrieve(retriever, "inner lake", depth)) == own
        assert _ids_and_scores(asyncio.run(_quiet.aretrieve(retriever, "inner lake", depth))) == own


def test_an_embedding_that_is_not_a_list_of_floats_is_aggregated_as_llamaindex_does() -> None:
    class ArrayEmbedding(HashEmbedding):
        def _get_query_embedding(self, query: str) -> Any:
            return np.asarray(hash_vector(query), dtype=np.float32)

        async def _aget_query_embedding(self, query: str) -> Any:
            return self._get_query_embedding(query)

    nodes = [TextNode(text=f"text number {i} of {n}", id_=f"{i}-{n}") for i in range(4) for n in "abc"]
    retriever = VectorStoreIndex(nodes, embed_model=ArrayEmbedding()).as_retriever(similarity_top_k=3)
    assert _quiet.unobserved(retriever) == _quiet.DEEP
    own = _ids_and_scores(retriever.retrieve("text number 2 of b"))
    assert _ids_and_scores(_quiet.retrieve(retriever, "text number 2 of b", _quiet.DEEP)) == own
    assert _ids_and_scores(asyncio.run(_quiet.aretrieve(retriever, "text number 2 of b", _quiet.DEEP))) == own


class Letters(BaseRetriever):
    """A retriever of its own: the nodes that share the query's first letter."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        first = query_bundle.query_str[:1].lower()
        texts = ["apple pie", "banana bread", "avocado toast", "blueberry jam"]
        return [NodeWithScore(node=TextNode(text=t, id_=t), score=1.0) for t in texts if t[0] == first]


def test_any_retriever_keeping_the_public_methods_skips_the_outer_instrumentation() -> None:
    retriever, backend = Letters(), as_backend(Letters())
    assert _quiet.unobserved(retriever) == _quiet.OUTER
    assert [d.id for d in backend.retrieve("a query", 5)] == ["apple pie", "avocado toast"]
    found = asyncio.run(backend.aretrieve("b query", 5))
    assert [d.id for d in found] == ["banana bread", "blueberry jam"]
    root, handler = instrument.get_dispatcher(), Collect(seen=[])
    root.add_event_handler(handler)
    try:
        assert _quiet.unobserved(retriever) is None
        backend.retrieve("a query", 5)
    finally:
        root.event_handlers.remove(handler)
    assert "RetrievalStartEvent" in handler.seen

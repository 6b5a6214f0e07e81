import asyncio
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import ImageNode, NodeWithScore, QueryBundle, TextNode

from selfrag_core import ExecutionConfig, ScoreKind
from selfrag_core.strategies import SelfIRAG
from selfrag_llamaindex import LlamaIndexLLM, SelfRAGQueryEngine, as_backend

from .li_fakes import SELF_RAG_RULES

pytestmark = pytest.mark.integration

QUESTION = "Which river flows through Paris, the capital of France?"


class ListRetriever(BaseRetriever):
    """A retriever without similarity_top_k: returns fixed nodes (or raises)."""

    def __init__(self, nodes: list[NodeWithScore] | None = None, error: Exception | None = None) -> None:
        self.nodes, self.error = nodes or [], error
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.error is not None:
            raise self.error
        return list(self.nodes)


def _nodes(scores: list[float | None]) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=f"doc {i}", id_=f"n{i}"), score=s) for i, s in enumerate(scores)]


def test_an_index_ranks_with_the_real_embedding_and_keeps_node_ids(index) -> None:
    docs = as_backend(index).retrieve(QUESTION, 3)
    assert docs[0].id == "paris" and {d.id for d in docs} <= {"paris", "berlin", "madrid", "rome", "braces"}
    assert docs[0].score > docs[1].score >= docs[2].score and docs[0].score_kind is ScoreKind.SIMILARITY


def test_top_k_is_set_on_a_copy_of_the_retriever(index) -> None:
    retriever = index.as_retriever(similarity_top_k=1)
    backend = as_backend(retriever)
    assert len(backend.retrieve(QUESTION, 3)) == 3
    assert len(backend.retrieve(QUESTION, 2)) == 2
    assert retriever.similarity_top_k == 1  # the caller's retriever is untouched


def test_a_retriever_without_similarity_top_k_is_sliced() -> None:
    docs = as_backend(ListRetriever(_nodes([0.9, 0.8, 0.7, 0.6]))).retrieve("q", 2)
    assert [d.id for d in docs] == ["n0", "n1"]


def test_score_none_everywhere_gives_unknown_scores_in_rank_order() -> None:
    docs = as_backend(ListRetriever(_nodes([None, None, None]))).retrieve("q", 5)
    assert [(d.id, d.score, d.score_kind) for d in docs] == [
        ("n0", None, ScoreKind.UNKNOWN), ("n1", None, ScoreKind.UNKNOWN), ("n2", None, ScoreKind.UNKNOWN),
    ]  # fmt: skip


async def test_async_retrieval(index) -> None:
    docs = await as_backend(index).aretrieve(QUESTION, 1)
    assert [d.id for d in docs] == ["paris"]


def test_nodes_without_text_are_skipped_and_reported(make_llm) -> None:
    paris = TextNode(text="Paris is the capital of France and sits on the river Seine.", id_="n0")
    nodes = [
        NodeWithScore(node=ImageNode(image="aGVsbG8=", id_="img"), score=0.99),
        NodeWithScore(node=paris),
    ]
    strategy = SelfIRAG(as_backend(ListRetriever(nodes)), LlamaIndexLLM(make_llm(SELF_RAG_RULES)))
    response = SelfRAGQueryEngine(strategy=strategy).query(QUESTION)
    assert [n.node_id for n in response.source_nodes] == ["n0"]
    assert response.metadata["fallbacks"] == ["nodes_without_text_skipped"]
    assert response.metadata["adapter_notes"][0]["detail"] == {"ids": ["img"]}


def test_a_retriever_that_raises_gives_the_documented_fallback(make_llm) -> None:
    backend = as_backend(ListRetriever(error=ConnectionError("vector db down")))
    strategy = SelfIRAG(backend, LlamaIndexLLM(make_llm(SELF_RAG_RULES)), execution=ExecutionConfig())
    response = SelfRAGQueryEngine(strategy=strategy).query(QUESTION)
    assert "retrieval_failed" in response.metadata["fallbacks"]
    assert response.source_nodes == []
    failed = [e for e in response.metadata["trace"]["events"] if e["name"] == "retrieval_failed"]
    assert "vector db down" in failed[0]["error"] and "RetrievalError" in failed[0]["error"]


def test_a_metadata_filter_in_the_context_is_listed_as_not_applied(make_llm, index) -> None:
    strategy = SelfIRAG(as_backend(index), LlamaIndexLLM(make_llm(SELF_RAG_RULES)))
    response = SelfRAGQueryEngine(strategy=strategy, context={"metadata_filter": {"lang": "fr"}}).query(
        QUESTION
    )
    assert response.metadata["fallbacks"] == ["retrieval_options_ignored"]
    assert SelfRAGQueryEngine(strategy=strategy).query(QUESTION).metadata["fallbacks"] == []


def test_not_a_retriever_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="BaseRetriever"):
        as_backend(object())


def test_add_document_goes_into_the_index(index) -> None:
    backend = as_backend(index)
    assert not backend.retrieve("Lisbon Tagus Portugal", 1)[0].text.startswith("Lisbon")
    backend.add_document("Lisbon is the capital of Portugal, on the Tagus.", {"lang": "en"})
    top = backend.retrieve("Lisbon Tagus Portugal", 1)[0]
    assert top.text.startswith("Lisbon") and top.metadata == {"lang": "en"}
    with pytest.raises(TypeError, match="index"):
        as_backend(index.as_retriever()).add_document("x", {})


def test_source_nodes_are_the_backends_own_nodes(make_llm, embed) -> None:
    from llama_index.core import VectorStoreIndex

    node = TextNode(
        text="Paris is the capital of France and sits on the river Seine.",
        id_="paris",
        metadata={"source": "atlas"},
        excluded_llm_metadata_keys=["source"],
    )
    index = VectorStoreIndex([node], embed_model=embed)
    strategy = SelfIRAG(as_backend(index), LlamaIndexLLM(make_llm(SELF_RAG_RULES)))
    [source] = SelfRAGQueryEngine(strategy=strategy).query(QUESTION).source_nodes
    assert source.node_id == "paris" and source.node.excluded_llm_metadata_keys == ["source"]
    assert source.score is not None


# ------------------------------------------------------------ LlamaIndex's public retrieval, as it is

QUERIES = ["What is the capital of France?", "Berlin", "rivers and mountains", "zzz unrelated"]


def _ids_and_scores(nodes: list[NodeWithScore]) -> list[tuple[str, float | None]]:
    return [(n.node.node_id, n.score) for n in nodes]


@pytest.mark.parametrize("use_async", [False, True])
def test_the_same_nodes_and_scores_as_the_index_retrievers_own(index, use_async) -> None:
    backend = as_backend(index)
    for query in QUERIES:
        own = _ids_and_scores(index.as_retriever(similarity_top_k=4).retrieve(query))
        docs = asyncio.run(backend.aretrieve(query, 4)) if use_async else backend.retrieve(query, 4)
        assert [(d.id, d.score) for d in docs] == own


def test_the_backend_calls_the_retrievers_public_methods(index, monkeypatch) -> None:
    """What an instrumentor patches on ``BaseRetriever`` (or a subclass overrides) is called."""
    calls: list[str] = []
    sync, asynchronous = BaseRetriever.retrieve, BaseRetriever.aretrieve

    def retrieve(self: BaseRetriever, query: Any) -> Any:
        calls.append("retrieve")
        return sync(self, query)

    async def aretrieve(self: BaseRetriever, query: Any) -> Any:
        calls.append("aretrieve")
        return await asynchronous(self, query)

    monkeypatch.setattr(BaseRetriever, "retrieve", retrieve)
    monkeypatch.setattr(BaseRetriever, "aretrieve", aretrieve)
    backend = as_backend(index)
    assert backend.retrieve(QUESTION, 1)[0].id == "paris"
    assert asyncio.run(backend.aretrieve(QUESTION, 1))[0].id == "paris"
    assert calls == ["retrieve", "aretrieve"]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_retrievers_metadata_filters_are_kept(embed, use_async) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

    from .li_fakes import CORPUS

    nodes = [TextNode(text=t, id_=i, metadata={"river": t.split()[-1].strip(".")}) for i, t in CORPUS]
    index = VectorStoreIndex(nodes, embed_model=embed)
    filters = MetadataFilters(filters=[MetadataFilter(key="river", value="Seine")])
    backend = as_backend(index.as_retriever(similarity_top_k=1, filters=filters))
    docs = (
        asyncio.run(backend.aretrieve("Madrid Spain", 3))
        if use_async
        else backend.retrieve("Madrid Spain", 3)
    )
    assert [d.id for d in docs] == ["paris"]  # the only node the filter lets through


def test_nodes_inserted_and_deleted_are_seen_by_the_next_query(index) -> None:
    backend = as_backend(index)
    query = "a golden phoenix in the volcano"
    assert backend.retrieve(query, 1)[0].id != "phoenix"
    index.insert_nodes([TextNode(text="The golden phoenix lives in the volcano.", id_="phoenix")])
    assert backend.retrieve(query, 1)[0].id == "phoenix"
    index.delete_nodes(["phoenix"])
    assert all(d.id != "phoenix" for d in backend.retrieve(query, 5))


@pytest.mark.parametrize("use_async", [False, True])
def test_the_retrievers_and_embeddings_callback_events_reach_their_handlers(use_async) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
    from llama_index.core.retrievers import VectorIndexRetriever

    from .li_fakes import HashEmbedding

    on_retriever, on_embedding = (LlamaDebugHandler(print_trace_on_end=False) for _ in range(2))
    embed = HashEmbedding()
    index = VectorStoreIndex(
        [TextNode(text=f"text number {i}", id_=f"n{i}") for i in range(5)], embed_model=embed
    )
    embed.callback_manager = CallbackManager([on_embedding])  # (the index gave it the default one)
    retriever = VectorIndexRetriever(
        index=index, similarity_top_k=2, callback_manager=CallbackManager([on_retriever])
    )
    backend = as_backend(retriever)
    docs = asyncio.run(backend.aretrieve("text 3", 2)) if use_async else backend.retrieve("text 3", 2)
    assert len(docs) == 2
    [(start, end)] = on_retriever.get_event_pairs(CBEventType.RETRIEVE)
    assert start.payload["query_str"] == "text 3" and len(end.payload["nodes"]) == 2
    assert on_embedding.get_event_pairs(CBEventType.EMBEDDING)


@pytest.mark.parametrize("use_async", [False, True])
def test_llamaindexs_retrieval_events_and_spans_are_emitted(index, use_async) -> None:
    import llama_index.core.instrumentation as instrument
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler

    class Collect(BaseEventHandler):
        seen: list[str]

        def handle(self, event: Any, **kwargs: Any) -> None:
            self.seen.append(event.class_name())

    root, events, spans = instrument.get_dispatcher(), Collect(seen=[]), SimpleSpanHandler()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    try:
        backend = as_backend(index)
        asyncio.run(backend.aretrieve("Paris", 2)) if use_async else backend.retrieve("Paris", 2)
    finally:
        root.event_handlers.remove(events)
        root.span_handlers.remove(spans)
    for name in ("RetrievalStartEvent", "EmbeddingStartEvent", "EmbeddingEndEvent", "RetrievalEndEvent"):
        assert name in events.seen
    a = "a" if use_async else ""
    names = {span.id_.rsplit("-", 5)[0] for span in spans.completed_spans}
    assert {f"VectorIndexRetriever.{a}retrieve", f"HashEmbedding.{a}get_query_embedding"} <= names


@pytest.mark.parametrize("use_async", [False, True])
def test_index_nodes_are_followed_as_the_retriever_does(use_async) -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.retrievers import VectorIndexRetriever
    from llama_index.core.schema import IndexNode

    from .li_fakes import HashEmbedding

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
    own = _ids_and_scores(retriever.retrieve(QueryBundle("inner lake")))
    assert "lake" in [node_id for node_id, _ in own]  # the IndexNode was followed
    backend = as_backend(retriever)
    docs = asyncio.run(backend.aretrieve("inner lake", 2)) if use_async else backend.retrieve("inner lake", 2)
    assert [(d.id, d.score) for d in docs] == own

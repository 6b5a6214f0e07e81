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

"""StrategyRetriever tells an outage from "nothing matched", as the LangChain adapter's
does: every retrieval failed raises RetrievalError, some failed marks each node (a copy,
the mark kept out of the LLM's text); SelfIRAG and HyDE, sync and async, with a backend
that raises and one that returns garbage."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from selfrag_core import RetrievalError
from selfrag_core.strategies import HyDERAG, SelfIRAG
from selfrag_llamaindex import LlamaIndexLLM, StrategyRetriever, as_backend
from selfrag_llamaindex._convert import PARTIAL_FAILURE_KEY

from .li_fakes import HYDE_RULES, SELF_RAG_RULES

pytestmark = pytest.mark.integration

FRANCE = "What is the capital of France?"
GARBAGE = [1, None, b"\xff\xfe", {"title": "no text here"}, 2.5]


class DownRetriever(BaseRetriever):
    """A real LlamaIndex retriever whose service is down."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise ConnectionError("connection refused by the vector service")


class GarbageBackend:
    def retrieve(self, query: str, top_k: int) -> list[Any]:
        return list(GARBAGE)


class FlakyRetriever(BaseRetriever):
    """An index's retriever that is down for one query only."""

    def __init__(self, inner: BaseRetriever, fails_on: str) -> None:
        self.inner, self.fails_on = inner, fails_on
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if query_bundle.query_str == self.fails_on:
            raise ConnectionError("timeout talking to the vector service")
        return self.inner.retrieve(query_bundle)


def strategy_of(name: str, backend: Any, make_llm: Any) -> Any:
    if name == "HyDERAG":
        return HyDERAG(backend, LlamaIndexLLM(make_llm(HYDE_RULES)), num_hypothetical_docs=2)
    return SelfIRAG(backend, LlamaIndexLLM(make_llm(SELF_RAG_RULES)))


async def retrieve(retriever: StrategyRetriever, use_async: bool) -> list[NodeWithScore]:
    return await retriever.aretrieve(FRANCE) if use_async else retriever.retrieve(FRANCE)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("backend", ["raises", "garbage"])
@pytest.mark.parametrize("name", ["SelfIRAG", "HyDERAG"])
async def test_every_retrieval_failed_raises(make_llm, name: str, backend: str, use_async: bool) -> None:
    source = as_backend(DownRetriever()) if backend == "raises" else GarbageBackend()
    retriever = StrategyRetriever(strategy_of(name, source, make_llm))
    with pytest.raises(RetrievalError) as caught:
        await retrieve(retriever, use_async)
    message = str(caught.value)
    assert name in message and "retrievals failed" in message and "check that the backend" in message
    assert ("ConnectionError" if backend == "raises" else "none readable") in message
    assert caught.value.query == FRANCE and caught.value.retryable


def test_llamaindex_own_query_engine_sees_the_outage(make_llm) -> None:
    retriever = StrategyRetriever(strategy_of("HyDERAG", as_backend(DownRetriever()), make_llm))
    with pytest.raises(RetrievalError):
        RetrieverQueryEngine.from_args(retriever, llm=MockLLM()).query(FRANCE)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_some_retrievals_failed_marks_copies_of_the_nodes(make_llm, index, use_async: bool) -> None:
    flaky = as_backend(FlakyRetriever(index.as_retriever(similarity_top_k=3), fails_on=FRANCE))
    nodes = await retrieve(StrategyRetriever(strategy_of("HyDERAG", flaky, make_llm), top_k=3), use_async)
    assert nodes and nodes[0].node_id == "paris"
    marks = {n.node.metadata[PARTIAL_FAILURE_KEY] for n in nodes}
    assert len(marks) == 1 and next(iter(marks)).startswith("1 of 3 retrievals failed")
    assert "timeout talking to the vector service" in next(iter(marks))
    for n in nodes:
        assert PARTIAL_FAILURE_KEY not in n.node.get_content(MetadataMode.LLM)
        assert PARTIAL_FAILURE_KEY not in n.node.get_content(MetadataMode.EMBED)
    stored = index.docstore.get_node("paris")
    assert PARTIAL_FAILURE_KEY not in stored.metadata  # the index's own node is untouched


@pytest.mark.parametrize("name", ["SelfIRAG", "HyDERAG"])
def test_no_failure_leaves_the_nodes_alone(make_llm, index, name: str) -> None:
    nodes = StrategyRetriever(strategy_of(name, as_backend(index), make_llm)).retrieve(FRANCE)
    assert nodes and not any(PARTIAL_FAILURE_KEY in n.node.metadata for n in nodes)

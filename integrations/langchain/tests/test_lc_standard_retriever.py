"""langchain-tests' standard retriever suite against StrategyRetriever (HyDE's fused
documents, and the sources of a SelfIRAG answer)."""

from __future__ import annotations

from typing import Any

from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests
from lc_fakes import keyed_model, strategies, vector_store

from selfrag_langchain import LangChainLLM, StrategyRetriever, as_backend


def _strategy(name: str) -> Any:
    return strategies(as_backend(vector_store()), LangChainLLM(keyed_model(structured=True)))[name]


class TestHyDERetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return StrategyRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"strategy": _strategy("HyDERAG")}

    @property
    def retriever_query_example(self) -> str:
        return "What is the capital of France?"


class TestSelfIRAGRetrieverStandard(TestHyDERetrieverStandard):
    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"strategy": _strategy("SelfIRAG")}

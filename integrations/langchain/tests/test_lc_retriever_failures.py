"""StrategyRetriever tells an outage from "nothing matched": every retrieval failed
raises RetrievalError (reported to on_retriever_error), some failed marks each document's
metadata; SelfIRAG and HyDE, sync and async, with a backend that raises and one that
returns garbage."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import CORPUS, keyed_model, vector_store
from pydantic import ConfigDict

from selfrag_core import HyDERAG, RetrievalError, SelfIRAG
from selfrag_langchain import LangChainLLM, SelfRAGRunnable, StrategyRetriever, as_backend
from selfrag_langchain._convert import PARTIAL_FAILURE_KEY

QUESTION = "What is the capital of France?"
GARBAGE = [1, None, b"\xff\xfe", {"title": "no text here"}, 2.5]


class DownRetriever(BaseRetriever):
    """A real LangChain retriever whose service is down."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        raise ConnectionError("connection refused by the vector service")


class GarbageBackend:
    """A backend that answers with nothing readable."""

    def retrieve(self, query: str, top_k: int) -> list[Any]:
        return list(GARBAGE)


class FlakyRetriever(BaseRetriever):
    """A real store's retriever that is down for one query only."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    store: InMemoryVectorStore
    fails_on: str

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if query == self.fails_on:
            raise ConnectionError("timeout talking to the vector service")
        return self.store.similarity_search(query, k=4)


class RetrieverErrors(BaseCallbackHandler):
    """Records what LangChain reports to on_retriever_error / on_retriever_end."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []  # of the outermost retriever run
        self.ended: list[Any] = []

    def on_retriever_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        if parent_run_id is None:  # not a backend's own retriever run inside the strategy
            self.errors.append(error)

    def on_retriever_end(
        self, documents: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        if parent_run_id is None:
            self.ended.append(documents)


BACKENDS = {"raises": lambda: as_backend(DownRetriever()), "garbage": GarbageBackend}
STRATEGIES = {
    "SelfIRAG": lambda backend, llm: SelfIRAG(backend, llm),
    "HyDERAG": lambda backend, llm: HyDERAG(backend, llm, num_hypothetical_docs=2),
}


async def invoke(retriever: StrategyRetriever, use_async: bool, handler: RetrieverErrors) -> list[Document]:
    config: Any = {"callbacks": [handler]}
    if use_async:
        return await retriever.ainvoke(QUESTION, config)
    return retriever.invoke(QUESTION, config)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("name", list(STRATEGIES))
async def test_every_retrieval_failed_raises_and_reaches_the_callbacks(
    name: str, backend: str, use_async: bool
) -> None:
    strategy = STRATEGIES[name](BACKENDS[backend](), LangChainLLM(keyed_model(structured=True)))
    handler = RetrieverErrors()
    with pytest.raises(RetrievalError) as caught:
        await invoke(StrategyRetriever(strategy=strategy), use_async, handler)
    message = str(caught.value)
    assert name in message and "retrievals failed" in message and "check that the backend" in message
    assert ("ConnectionError" if backend == "raises" else "none readable") in message
    assert caught.value.query == QUESTION and caught.value.retryable
    assert handler.errors == [caught.value] and handler.ended == []


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_some_retrievals_failed_marks_every_document(use_async: bool) -> None:
    backend = as_backend(FlakyRetriever(store=vector_store(), fails_on=QUESTION))  # the question's own search
    strategy = HyDERAG(backend, LangChainLLM(keyed_model(structured=True)), num_hypothetical_docs=2)
    handler = RetrieverErrors()
    docs = await invoke(StrategyRetriever(strategy=strategy, k=3), use_async, handler)
    assert docs and all(d.page_content in CORPUS for d in docs) and handler.errors == []
    marks = {d.metadata[PARTIAL_FAILURE_KEY] for d in docs}
    assert len(marks) == 1 and next(iter(marks)).startswith("1 of 3 retrievals failed")
    assert "ConnectionError: timeout talking to the vector service" in next(iter(marks))


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", list(STRATEGIES))
async def test_no_failure_leaves_the_metadata_alone(name: str, use_async: bool) -> None:
    strategy = STRATEGIES[name](as_backend(vector_store()), LangChainLLM(keyed_model(structured=True)))
    docs = await invoke(StrategyRetriever(strategy=strategy), use_async, RetrieverErrors())
    assert docs and not any(PARTIAL_FAILURE_KEY in d.metadata for d in docs)


def test_nothing_matched_is_an_empty_list_not_an_error() -> None:
    empty = as_backend(vector_store([]))
    strategy = HyDERAG(empty, LangChainLLM(keyed_model(structured=True)), num_hypothetical_docs=2)
    assert StrategyRetriever(strategy=strategy).invoke(QUESTION) == []


def test_the_runnable_still_answers_an_outage_with_its_trace() -> None:
    """The runnable's rule is unchanged: the fallback answer, the failures in the trace."""
    strategy = SelfIRAG(as_backend(DownRetriever()), LangChainLLM(keyed_model(structured=True)))
    out = SelfRAGRunnable(strategy=strategy).invoke(QUESTION)
    assert out["sources"] == [] and "retrieval_failed" in out["trace"]["fallbacks"]

"""The core recognises real LangChain objects in one place, ``selfrag_core.frameworks``
(issue 31), and resolves each once: a chat model, a vector store and a retriever."""

from __future__ import annotations

import asyncio

from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import CORPUS, KeyedChatModel

from selfrag_core import frameworks
from selfrag_core.llm import call_llm_detailed, resolve_llm
from selfrag_core.retrieval import _aretrieve_safe, _retrieve_safe, ignored_options, resolve_backend
from selfrag_core.types import ScoreKind


def _store() -> InMemoryVectorStore:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    store.add_texts(CORPUS)
    return store


def test_langchain_objects_are_recognised_by_the_frameworks_module() -> None:
    store, model = _store(), KeyedChatModel()
    retriever = store.as_retriever(search_kwargs={"k": 2})
    assert frameworks.is_langchain_vectorstore(store) and not frameworks.is_langchain_retriever(store)
    assert frameworks.is_langchain_retriever(retriever) and not frameworks.is_langchain_vectorstore(retriever)
    assert frameworks.is_langchain_runnable(model) and frameworks.is_langchain_runnable(RunnableLambda(str))
    assert not frameworks.is_llamaindex_llm(model) and not frameworks.is_llamaindex_retriever(retriever)
    chain = retriever | RunnableLambda(len)
    assert frameworks.is_langchain_runnable(chain) and not frameworks.is_llamaindex_query_engine(chain)


def test_a_vector_store_and_a_retriever_are_resolved_once_and_searched_as_before() -> None:
    store = _store()
    retriever = store.as_retriever(search_kwargs={"k": 2})
    assert resolve_backend(store) is resolve_backend(store)
    docs = _retrieve_safe(store, "capital of France", 3)
    # (InMemoryVectorStore has no relevance function: its raw scores, of a kind it does not say)
    assert len(docs) == 3 and {d.score_kind for d in docs} == {ScoreKind.UNKNOWN}
    again = asyncio.run(_aretrieve_safe(store, "capital of France", 3))
    assert [d.text for d in again] == [d.text for d in docs]
    found = _retrieve_safe(retriever, "capital of France", 5)
    assert len(found) == 2  # the retriever's own k
    assert len(asyncio.run(_aretrieve_safe(retriever, "capital of France", 5))) == 2
    # LangChain objects take no options
    assert ignored_options(store, {"metadata_filter": {"a": 1}}, use_async=False) == ["metadata_filter"]
    assert ignored_options(retriever, {"metadata_filter": {"a": 1}}, use_async=True) == ["metadata_filter"]


def test_a_chat_model_is_resolved_once_and_called_with_invoke_and_ainvoke() -> None:
    model = KeyedChatModel()
    client = resolve_llm(model)
    assert resolve_llm(model) is client and client.native_async and client.streams
    assert call_llm_detailed(model, "hello", retries=0).text
    assert client.source is model

"""The core recognises real LlamaIndex objects in one place, ``selfrag_core.frameworks``
(issue 31), and resolves each once: an LLM and a retriever."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from llama_index.core import VectorStoreIndex

from selfrag_core import frameworks
from selfrag_core.llm import acall_llm_detailed, call_llm_detailed, resolve_llm
from selfrag_core.retrieval import _aretrieve_safe, _retrieve_safe, ignored_options, resolve_backend
from selfrag_core.types import ScoreKind


def test_llamaindex_objects_are_recognised_by_the_frameworks_module(
    index: VectorStoreIndex, make_llm: Callable[..., Any]
) -> None:
    llm, retriever = make_llm(), index.as_retriever(similarity_top_k=2)
    assert frameworks.is_llamaindex_llm(llm) and not frameworks.is_langchain_runnable(llm)
    assert frameworks.is_llamaindex_retriever(retriever)
    assert not frameworks.is_langchain_retriever(retriever) and not frameworks.is_langchain_vectorstore(
        retriever
    )
    assert frameworks.from_package(llm, "llama_index")  # a user's CustomLLM subclass, in the tests' module


def test_a_query_engine_and_its_response_are_recognised(
    index: VectorStoreIndex, make_llm: Callable[..., Any]
) -> None:
    engine = index.as_query_engine(llm=make_llm([("France", "Paris.")]))
    response = engine.query("capital of France?")
    assert frameworks.is_llamaindex_query_engine(engine) and frameworks.is_llamaindex_response(response)
    assert not frameworks.is_llamaindex_query_engine(index) and not frameworks.is_llamaindex_response(engine)
    assert not frameworks.is_langchain_runnable(engine)


def test_a_retriever_is_resolved_once_and_read_as_before(index: VectorStoreIndex) -> None:
    retriever = index.as_retriever(similarity_top_k=2)
    assert resolve_backend(retriever) is resolve_backend(retriever)
    docs = _retrieve_safe(retriever, "capital of France", 5)
    assert len(docs) == 2 and {d.score_kind for d in docs} == {ScoreKind.SIMILARITY}
    again = asyncio.run(_aretrieve_safe(retriever, "capital of France", 5))
    assert [d.text for d in again] == [d.text for d in docs]
    assert ignored_options(retriever, {"metadata_filter": {"a": 1}}, use_async=True) == ["metadata_filter"]


def test_an_llm_is_resolved_once_and_completed_sync_and_async(make_llm: Callable[..., Any]) -> None:
    llm = make_llm([("France", "Paris.")])
    client = resolve_llm(llm)
    assert resolve_llm(llm) is client and client.native_async and client.streams
    assert call_llm_detailed(llm, "capital of France?", retries=0).text == "Paris."
    assert asyncio.run(acall_llm_detailed(llm, "capital of France?", retries=0)).text == "Paris."

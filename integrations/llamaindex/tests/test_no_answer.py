"""SelfRAGQueryEngine's Response says whether there is an answer (issue 34, finding 3):
``metadata["no_answer"]`` is None for an answer, the reason for a placeholder."""

from __future__ import annotations

import pytest
from llama_index.core.base.response.schema import Response

from selfrag_core import ExecutionConfig, PlainRAG
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER, NOT_ENOUGH_ANSWER
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_llamaindex import SelfRAGQueryEngine

pytestmark = pytest.mark.integration

PARIS = "Paris is the capital of France."
NO_WAIT = ExecutionConfig(retry_initial_wait=0.0, retry_max_wait=0.0)


async def test_response_metadata_says_why_there_is_no_answer() -> None:
    corpus = FakeRetriever([PARIS])
    answered = SelfRAGQueryEngine(strategy=PlainRAG(corpus, FakeLLM(PARIS))).query("capital of France?")
    assert isinstance(answered, Response) and answered.metadata is not None
    assert str(answered) == PARIS and answered.metadata["no_answer"] is None
    down = PlainRAG(corpus, FakeLLM([ConnectionError("LLM endpoint unreachable")]), execution=NO_WAIT)
    failed = await SelfRAGQueryEngine(strategy=down).aquery("capital of France?")
    assert str(failed) == GENERATION_FAILED_ANSWER and failed.metadata is not None
    assert failed.metadata["no_answer"] == "generation_failed"
    assert "generation_failed" in failed.metadata["fallbacks"]
    empty = SelfRAGQueryEngine(strategy=PlainRAG(FakeRetriever([]), FakeLLM("unused"))).query("capital?")
    assert str(empty) == NOT_ENOUGH_ANSWER and empty.metadata is not None
    assert empty.metadata["no_answer"] == "no_documents" and empty.source_nodes == []

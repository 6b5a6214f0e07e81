"""SelfRAGRunnable's output says whether there is an answer (issue 34, finding 3):
``no_answer`` is None for an answer, the reason for a placeholder, in invoke, batch
and the summed stream alike."""

from __future__ import annotations

from selfrag_core import ExecutionConfig, PlainRAG
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER, NOT_ENOUGH_ANSWER
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_langchain import SelfRAGRunnable

PARIS = "Paris is the capital of France."
NO_WAIT = ExecutionConfig(retry_initial_wait=0, retry_max_wait=0)


#: fails on the question about the outage, answers the others
MODEL = {"Why is the outage page down?": ConnectionError("LLM endpoint unreachable")}


def test_invoke_and_batch_tell_answers_from_placeholders() -> None:
    corpus = FakeRetriever([PARIS, "The outage page is down."])
    runnable = SelfRAGRunnable(strategy=PlainRAG(corpus, FakeLLM(MODEL, default=PARIS), execution=NO_WAIT))
    answered, failed, empty = runnable.batch(
        ["What is the capital of France?", "Why is the outage page down?", "zebra quantum lattice?"]
    )
    assert answered["answer"] == PARIS and answered["no_answer"] is None
    assert failed["answer"] == GENERATION_FAILED_ANSWER and failed["no_answer"] == "generation_failed"
    assert empty["answer"] == NOT_ENOUGH_ANSWER and empty["no_answer"] == "no_documents"
    assert "no_answer" not in failed["details"]  # lifted, as answer and trace are
    assert runnable.invoke("Why is the outage page down?")["no_answer"] == "generation_failed"


def test_the_summed_stream_has_no_answer_too() -> None:
    runnable = SelfRAGRunnable(strategy=PlainRAG(FakeRetriever([]), FakeLLM("unused")))
    chunks = list(runnable.stream("What is the capital of France?"))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total["no_answer"] == "no_documents" and total["answer"] == NOT_ENOUGH_ANSWER

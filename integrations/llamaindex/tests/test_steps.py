"""SelfRAGQueryEngine's steps: a SelfRAGStepEvent per step of a query for event handlers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import llama_index.core.instrumentation as instrument
import pytest
from llama_index.core.instrumentation.event_handlers import BaseEventHandler

from selfrag_core import SelfHealingRAGConfig, TraceEvent, step_of
from selfrag_core.strategies import HyDERAG, RecursiveRAG, SelfHealingRAG, SelfIRAG
from selfrag_llamaindex import LlamaIndexLLM, SelfRAGQueryEngine, SelfRAGStepEvent, as_backend

from .li_fakes import HEALING_RULES, HYDE_RULES, RECURSIVE_RULES, SELF_RAG_RULES

pytestmark = pytest.mark.integration

FRANCE = "What is the capital of France?"
BOTH = "Compare the capitals of France and Spain: how do they differ and why?"


class Steps(BaseEventHandler):
    seen: list[SelfRAGStepEvent]

    @classmethod
    def class_name(cls) -> str:
        return "Steps"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, SelfRAGStepEvent):
            self.seen.append(event)


@pytest.fixture
def steps() -> Iterator[Steps]:
    handler = Steps(seen=[])
    root = instrument.get_dispatcher()
    root.add_event_handler(handler)
    try:
        yield handler
    finally:
        root.event_handlers.remove(handler)


def expected(trace: dict[str, Any]) -> list[tuple[str, str]]:
    found = (step_of(TraceEvent(**e)) for e in trace["events"])
    return [(s.kind, s.name) for s in found if s is not None]


CASES = {
    "self": (SelfIRAG, SELF_RAG_RULES, FRANCE, {"retrieval", "verdict"}),
    "hyde": (HyDERAG, HYDE_RULES, FRANCE, {"hypothesis", "retrieval"}),
    "recursive": (RecursiveRAG, RECURSIVE_RULES, BOTH, {"sub_question", "retrieval"}),
}


@pytest.mark.parametrize("mode", ["query", "aquery", "stream", "astream"])
@pytest.mark.parametrize("name", list(CASES))
def test_event_handlers_hear_each_step_in_the_order_of_the_trace(
    steps: Steps, make_llm: Any, index: Any, name: str, mode: str
) -> None:
    strategy_cls, rules, question, kinds = CASES[name]
    qe = SelfRAGQueryEngine.from_llamaindex(
        strategy_cls, llm=make_llm(rules), retriever=index, streaming=mode.endswith("stream")
    )

    async def run() -> Any:
        if mode == "query":
            return qe.query(question)
        if mode == "aquery":
            return await qe.aquery(question)
        response = await qe.aquery(question)
        text = "".join([t async for t in response.async_response_gen()])
        return response, text

    if mode == "stream":  # the sync stream, outside any event loop
        response = qe.query(question)
        outcome: Any = (response, "".join(response.response_gen))
    else:
        outcome = asyncio.run(run())
    if mode.endswith("stream"):  # the text is the answer's alone: no step in it
        response, text = outcome
        assert text.strip() and "retrieved" not in text and "sub-question" not in text
    else:
        response = outcome
    trace = response.metadata["trace"]
    assert [(s.kind, s.name) for s in steps.seen] == expected(trace)
    assert kinds <= {s.kind for s in steps.seen} and all(s.text for s in steps.seen)


def test_a_healing_attempt_and_its_verdict_are_steps(steps: Steps, make_llm: Any, index: Any) -> None:
    strategy = SelfHealingRAG(
        LlamaIndexLLM(make_llm(HEALING_RULES)),
        [as_backend(index)],
        config=SelfHealingRAGConfig(confidence_threshold=0.5),
    )
    response = SelfRAGQueryEngine(strategy=strategy).query(FRANCE)
    [verdict] = [s for s in steps.seen if s.kind == "verdict"]
    assert verdict.detail["passed"] is True and verdict.detail["score"] >= verdict.detail["threshold"]
    assert steps.seen[0].kind == "attempt" and steps.seen[0].detail["status"] == "started"
    assert [(s.kind, s.name) for s in steps.seen] == expected(response.metadata["trace"])

"""Steps in the stream: every strategy's stream says what it does before the answer (its
retrievals, hypothetical passages, sub-questions, verdicts, attempts, fallbacks) as
``"step"`` events, one per trace event that is a step, in the trace's order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from selfrag_core import (
    ExecutionConfig,
    HyDERAG,
    PlainRAG,
    RecursiveRAG,
    SelfHealingRAG,
    SelfIRAG,
    Step,
    StreamEvent,
    TraceEvent,
    observe_trace,
    step_of,
)
from selfrag_core.errors import RetrievalError
from selfrag_core.testing import FakeLLM, FakeRetriever, judge_json

DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany and its largest city.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
]
SLA = "The SLA guarantees 99.9 percent uptime every month."
OFFICE = "The company office is located in Berlin near the river."


def claims(*supported: bool) -> str:
    return json.dumps({"claims": [{"claim": f"claim {i}", "supported": s} for i, s in enumerate(supported)]})


def _recursive_reply(prompt: str) -> str:
    if "SUBQUESTIONS" in prompt:
        return '{"items": ["What is the capital of France?", "What is the capital of Germany?"]}'
    if "Combine the answers" in prompt:
        return "Paris is the capital of France and Berlin is the capital of Germany."
    return "Paris is the capital of France." if "France?" in prompt else "Berlin is the capital of Germany."


def _healing_reply(prompt: str) -> str:
    if "factual claims" in prompt:  # the faithfulness judge: only the SLA supports the answer
        return claims(SLA in prompt)
    return "The SLA guarantees 99.9 percent uptime."


#: each strategy with a scripted run, its question, and the kinds of its steps in order
CASES: dict[str, tuple[Callable[[ExecutionConfig], Any], str, list[str]]] = {
    "plain": (
        lambda ex: PlainRAG(
            FakeRetriever(list(DOCS)), FakeLLM("Paris is the capital of France."), execution=ex
        ),
        "What is the capital of France?",
        ["retrieval"],
    ),
    "self": (
        lambda ex: SelfIRAG(
            FakeRetriever(list(DOCS)), FakeLLM(judge_json("Paris is the capital of France.", 9)), execution=ex
        ),
        "What is the capital of France?",
        ["retrieval", "verdict"],
    ),
    "hyde": (
        lambda ex: HyDERAG(
            FakeRetriever(list(DOCS)),
            FakeLLM({"Write a passage": DOCS[2]}, default="Plants turn light into chemical energy."),
            num_hypothetical_docs=2,
            execution=ex,
        ),
        "How do plants make energy from light?",
        ["hypothesis", "hypothesis", "retrieval", "retrieval", "retrieval"],
    ),
    "recursive": (
        lambda ex: RecursiveRAG(FakeRetriever(list(DOCS)), FakeLLM(_recursive_reply), execution=ex),
        "What are the capitals of France and of Germany, and how do their rivers compare in length?",
        ["sub_question", "sub_question", "retrieval", "retrieval", "sub_question", "sub_question"],
    ),
    "healing": (
        lambda ex: SelfHealingRAG(
            FakeLLM(_healing_reply), [FakeRetriever([OFFICE]), FakeRetriever([SLA])], execution=ex
        ),
        "What does the SLA say about uptime in the office?",
        ["attempt", "retrieval", "verdict", "attempt", "attempt", "retrieval", "verdict"],
    ),
}


async def collect(strategy: Any, question: str, mode: str) -> list[StreamEvent[Any]]:
    if mode == "sync":
        return await asyncio.to_thread(lambda: list(strategy.stream(question)))
    return [e async for e in strategy.astream(question)]


def steps_of(events: list[StreamEvent[Any]]) -> list[Step]:
    return [e.step for e in events if e.kind == "step" and e.step is not None]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", list(CASES))
async def test_each_strategy_streams_its_steps_in_the_order_of_its_trace(
    name: str, mode: str, instant: ExecutionConfig
) -> None:
    build, question, kinds = CASES[name]
    events = await collect(build(instant), question, mode)
    result = events[-1].result
    steps = steps_of(events)
    # one step per trace event that is a step, the same objects, in the trace's order
    assert [s.event for s in steps] == [e for e in result.trace.events if step_of(e) is not None]
    assert all(any(s.event is e for e in result.trace.events) for s in steps)
    if name == "recursive":  # its sub-questions run together: their steps interleave
        assert sorted(s.kind for s in steps) == sorted(kinds)
    else:
        assert [s.kind for s in steps] == kinds
    # the tokens still make up the answer; a step has no text and no result
    assert "".join(e.text for e in events[:-1]).strip() == result.answer.strip()
    assert all(e.text == "" and e.result is None for e in events if e.kind == "step")
    assert [e.kind for e in events].count("result") == 1 and events[-1].kind == "result"


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_the_steps_say_what_happened(mode: str, instant: ExecutionConfig) -> None:
    build, question, _ = CASES["recursive"]
    steps = steps_of(await collect(build(instant), question, mode))
    asked = [s for s in steps if s.kind == "sub_question"]
    assert sorted((s.detail["question"], s.detail["status"]) for s in asked) == [
        ("What is the capital of France?", "answered"),
        ("What is the capital of France?", "started"),
        ("What is the capital of Germany?", "answered"),
        ("What is the capital of Germany?", "started"),
    ]
    for sub in {s.detail["question"] for s in asked}:  # each one asked, then answered
        assert [s.detail["status"] for s in asked if s.detail["question"] == sub] == ["started", "answered"]
    france = next(s for s in asked if s.detail["status"] == "answered" and "France" in s.detail["question"])
    assert france.detail["answer"] == "Paris is the capital of France."
    assert france.text == "answered sub-question: 'What is the capital of France?'"
    retrieval = next(s for s in steps if s.kind == "retrieval")
    assert retrieval.detail["hits"] >= 1 and retrieval.text.startswith(
        f"retrieved {retrieval.detail['hits']} "
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_verdicts_and_attempts_carry_the_scores(mode: str, instant: ExecutionConfig) -> None:
    build, question, _ = CASES["healing"]
    steps = steps_of(await collect(build(instant), question, mode))
    verdicts = [s for s in steps if s.kind == "verdict"]
    assert [(v.detail["strategy"], v.detail["passed"]) for v in verdicts] == [
        ("FakeRetriever", False),
        ("FakeRetriever", True),
    ]
    assert verdicts[0].detail["score"] < verdicts[0].detail["threshold"] <= verdicts[1].detail["score"]
    assert [s.detail["status"] for s in steps if s.kind == "attempt"] == ["started", "rejected", "started"]
    rejected = next(s for s in steps if s.detail.get("status") == "rejected")
    assert rejected.error is not None and "scored" in rejected.text
    self_rag = steps_of(await collect(CASES["self"][0](instant), CASES["self"][1], mode))
    [verdict] = [s for s in self_rag if s.kind == "verdict"]
    assert verdict.detail["confidence"] == pytest.approx(0.9) and verdict.text == "verdict: confidence 0.90"


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_failures_are_steps_too(mode: str, instant: ExecutionConfig) -> None:
    down = FakeRetriever(list(DOCS), fail=RetrievalError("the index is down"))
    events = await collect(PlainRAG(down, FakeLLM("unused"), execution=instant), "Capital of France?", mode)
    steps = steps_of(events)
    assert [(s.kind, s.name) for s in steps] == [
        ("retrieval", "FakeRetriever"),
        ("fallback", "retrieval_failed"),
        ("fallback", "not_enough_information"),
    ]
    assert steps[0].error is not None and "the index is down" in steps[0].text
    assert steps[1].to_dict()["error"].startswith("RetrievalError")
    assert json.loads(json.dumps([s.to_dict() for s in steps]))[2]["text"].startswith("fallback: not_enough")


def test_a_listener_of_the_trace_still_hears_every_event_of_a_stream(instant: ExecutionConfig) -> None:
    heard: list[TraceEvent] = []
    build, question, _ = CASES["hyde"]
    with observe_trace(heard.append):
        events = list(build(instant).stream(question))
    assert heard == events[-1].result.trace.events and len(steps_of(events)) == 5


def test_consumers_that_read_tokens_and_the_result_keep_working(instant: ExecutionConfig) -> None:
    """The documented loop: tokens printed, a reset handled, the result read by its kind."""
    build, question, _ = CASES["plain"]
    printed, result = [], None
    for event in build(instant).stream(question):
        if event.kind == "token":
            printed.append(event.text)
        elif event.kind == "result":
            result = event.result
    assert result is not None and "".join(printed) == result.answer

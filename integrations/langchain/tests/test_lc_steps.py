"""SelfRAGRunnable's steps: a custom event per step of a streamed query, as it happens."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from lc_fakes import CORPUS

from selfrag_core import HyDERAG, RecursiveRAG, step_of
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_langchain import SelfRAGRunnable

QUERY = "What is the capital of France?"


def hyde() -> HyDERAG:
    llm = FakeLLM({"Write a passage": "Paris is the capital of France."}, default="Paris is the capital.")
    return HyDERAG(FakeRetriever(CORPUS), llm, num_hypothetical_docs=2)


def expected_steps(result_trace: dict[str, Any]) -> list[tuple[str, str]]:
    from selfrag_core import TraceEvent

    steps = (step_of(TraceEvent(**e)) for e in result_trace["events"])
    return [(s.kind, s.name) for s in steps if s is not None]


async def test_astream_events_yields_each_step_as_a_custom_event() -> None:
    runnable = SelfRAGRunnable(strategy=hyde())
    events = [e async for e in runnable.astream_events(QUERY, version="v2")]
    custom = [e for e in events if e["event"] == "on_custom_event"]
    assert custom and {e["name"] for e in custom} == {"selfrag_step"}
    [end] = [e for e in events if e["event"] == "on_chain_end" and e["name"] == runnable.get_name()]
    trace = end["data"]["output"]["trace"]
    assert [(e["data"]["kind"], e["data"]["name"]) for e in custom] == expected_steps(trace)
    assert [e["data"]["kind"] for e in custom][:2] == ["hypothesis", "hypothesis"]
    assert all(e["data"]["text"] for e in custom)
    # the steps come before the answer's chunks, which still add up to the answer
    kinds = [e["event"] for e in events]
    assert kinds.index("on_custom_event") < kinds.index("on_chain_stream")
    answer = "".join(e["data"]["chunk"].get("answer", "") for e in events if e["event"] == "on_chain_stream")
    assert answer == end["data"]["output"]["answer"] == "Paris is the capital."


class Steps(BaseCallbackHandler):
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], UUID]] = []

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.seen.append((name, data, run_id))


def test_stream_dispatches_the_steps_to_callback_handlers_of_its_run() -> None:
    def reply(prompt: str) -> str:
        if "SUBQUESTIONS" in prompt:
            return '{"items": ["What is the capital of France?", "What is the capital of Germany?"]}'
        return "Paris is the capital of France."

    handler = Steps()
    runnable = SelfRAGRunnable(strategy=RecursiveRAG(FakeRetriever(CORPUS), FakeLLM(reply)))
    question = "What are the capitals of France and of Germany, and how do they compare in size?"
    chunks = list(runnable.stream(question, {"callbacks": [handler]}))
    assert "answer" in chunks[0] and all("selfrag_step" not in c for c in chunks)  # the chunks as before
    kinds = [data["kind"] for _, data, _ in handler.seen]
    assert kinds.count("sub_question") == 4 and "retrieval" in kinds
    assert len({run_id for *_, run_id in handler.seen}) == 1  # all on the runnable's own run
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert [(d["kind"], d["name"]) for _, d, _ in handler.seen] == expected_steps(total["trace"])

"""Streaming the final answer: tokens as the LLM produces them, then the result."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from selfrag_core import ExecutionConfig, LLMOutput, SelfIRAG
from selfrag_core.engine import Generate, Plan, Retrieve
from selfrag_core.llm import astream_llm_detailed, stream_llm_detailed
from selfrag_core.strategies.base import Strategy
from selfrag_core.testing import FakeLLM, FakeRetriever, judge_json


class StreamingLLM(FakeLLM):
    """Streams its reply word by word (sync and async)."""

    def stream(self, prompt: str) -> Iterator[str]:
        for word in self.generate(prompt).split(" "):
            yield word + " "

    async def astream(self, prompt: str) -> AsyncIterator[str]:
        text = await self.agenerate(prompt)
        for word in text.split(" "):
            await asyncio.sleep(0)
            yield word + " "


class OneShot(Strategy[Any]):
    """A minimal strategy whose final answer is streamed."""

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Any]:
        docs = yield Retrieve(self.rag_system, query, 2)
        reply = yield Generate(self.llm, f"{query} {len(docs)}", "answer", stream=True)

        class Result:
            answer = reply.text
            trace = None

        return Result()


def test_stream_llm_sync_and_async() -> None:
    got: list[str] = []
    reply = stream_llm_detailed(StreamingLLM("a b c"), "p", got.append, sleep=lambda _: None)
    assert got == ["a ", "b ", "c "] and reply.text == "a b c "
    got.clear()
    reply = asyncio.run(astream_llm_detailed(StreamingLLM("x y"), "p", got.append))
    assert got == ["x ", "y "] and reply.text == "x y "


class CountingStream(FakeLLM):
    """Streams ``LLMOutput`` pieces; the last, empty one carries the call's token counts."""

    def stream(self, prompt: str) -> Iterator[LLMOutput]:
        yield LLMOutput("a ")
        yield LLMOutput("b", output_tokens=1)  # a running total, superseded below
        yield LLMOutput("", input_tokens=12, output_tokens=2)

    async def astream(self, prompt: str) -> AsyncIterator[LLMOutput]:
        for piece in self.stream(prompt):
            yield piece


def test_streamed_pieces_may_report_token_counts_the_last_reported_wins() -> None:
    got: list[str] = []
    reply = stream_llm_detailed(CountingStream(), "p", got.append, sleep=lambda _: None)
    assert got == ["a ", "b"] and reply.text == "a b"  # the empty piece sends no text
    assert (reply.input_tokens, reply.output_tokens) == (12, 2)
    got.clear()
    reply = asyncio.run(astream_llm_detailed(CountingStream(), "p", got.append))
    assert got == ["a ", "b"] and (reply.input_tokens, reply.output_tokens) == (12, 2)


def test_non_streaming_llm_sends_whole_reply() -> None:
    got: list[str] = []
    stream_llm_detailed(FakeLLM("whole"), "p", got.append, sleep=lambda _: None)
    assert got == ["whole"]


def test_strategy_stream_yields_tokens_then_result() -> None:
    strategy = OneShot(FakeRetriever(["doc"]), StreamingLLM("one two three"))
    events = list(strategy.stream("doc question"))
    assert [e.kind for e in events] == ["token", "token", "token", "result"]
    assert "".join(e.text for e in events[:-1]) == events[-1].result.answer


async def test_strategy_astream_yields_tokens_then_result() -> None:
    strategy = OneShot(FakeRetriever(["doc"]), StreamingLLM("one two"))
    events = [e async for e in strategy.astream("doc question")]
    assert [e.kind for e in events] == ["token", "token", "result"]


async def test_selfrag_stream_sends_the_chosen_answer_once() -> None:
    rag = SelfIRAG(FakeRetriever(["Paris is the capital of France."]), FakeLLM(judge_json("Paris is.", 9)))
    events = [e async for e in rag.astream("What is the capital of France?")]
    assert [e.kind for e in events] == ["token", "result"] and events[0].text == "Paris is."
    sync_events = list(rag.stream("What is the capital of France?"))
    assert sync_events[-1].result is not None and sync_events[-1].result.answer == "Paris is."


def test_stream_bad_input_raises_before_running() -> None:
    with pytest.raises(TypeError):
        OneShot(FakeRetriever([]), FakeLLM()).stream(None)  # type: ignore[arg-type]


async def test_consumer_leaving_cancels_the_query() -> None:
    llm = StreamingLLM("a b c d e f", latency=0.05)
    strategy = OneShot(FakeRetriever(["doc"]), llm, execution=ExecutionConfig())
    stream = strategy.astream("doc q")
    first = await stream.__anext__()
    assert first.kind == "token"
    await stream.aclose()  # no hang, no error


def test_only_the_final_answer_of_a_composition_streams() -> None:
    from selfrag_core import RecursiveRAG

    def reply(prompt: str) -> str:
        if "SUBQUESTIONS" in prompt:
            return '{"items": ["What are the causes of the flood?", "What are the effects of the flood?"]}'
        if "Combine the answers" in prompt:
            return "merged final answer"
        return "sub answer text"

    backend = FakeRetriever(["The flood had causes and effects on the town."])
    rag = RecursiveRAG(backend, StreamingLLM(reply))
    events = list(rag.stream("What are the causes and effects of the flood, and how did the town respond?"))
    tokens = "".join(e.text for e in events if e.kind == "token")
    assert tokens == "merged final answer "  # the sub-answers' tokens never reach the stream
    assert events[-1].result is not None and events[-1].result.decomposed

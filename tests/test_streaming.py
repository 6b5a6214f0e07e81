"""Streaming the final answer: tokens as the LLM produces them, then the result."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from selfrag_core import ExecutionConfig, LLMOutput, SelfIRAG
from selfrag_core.engine import Generate, Plan, Retrieve
from selfrag_core.llm import acall_llm_detailed, call_llm_detailed
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
    reply = call_llm_detailed(StreamingLLM("a b c"), "p", sink=got.append, sleep=lambda _: None)
    assert got == ["a ", "b ", "c "] and reply.text == "a b c "
    got.clear()
    reply = asyncio.run(acall_llm_detailed(StreamingLLM("x y"), "p", sink=got.append))
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
    reply = call_llm_detailed(CountingStream(), "p", sink=got.append, sleep=lambda _: None)
    assert got == ["a ", "b"] and reply.text == "a b"  # the empty piece sends no text
    assert (reply.input_tokens, reply.output_tokens) == (12, 2)
    got.clear()
    reply = asyncio.run(acall_llm_detailed(CountingStream(), "p", sink=got.append))
    assert got == ["a ", "b"] and (reply.input_tokens, reply.output_tokens) == (12, 2)


def test_non_streaming_llm_sends_whole_reply() -> None:
    got: list[str] = []
    call_llm_detailed(FakeLLM("whole"), "p", sink=got.append, sleep=lambda _: None)
    assert got == ["whole"]


def test_strategy_stream_yields_tokens_then_result() -> None:
    strategy = OneShot(FakeRetriever(["doc"]), StreamingLLM("one two three"))
    events = list(strategy.stream("doc question"))
    assert [e.kind for e in events] == ["step", "token", "token", "token", "result"]  # the retrieval first
    assert "".join(e.text for e in events[:-1]) == events[-1].result.answer  # a step has no text


async def test_strategy_astream_yields_tokens_then_result() -> None:
    strategy = OneShot(FakeRetriever(["doc"]), StreamingLLM("one two"))
    events = [e async for e in strategy.astream("doc question")]
    assert [e.kind for e in events] == ["step", "token", "token", "result"]


async def test_selfrag_stream_sends_the_chosen_answer_once() -> None:
    rag = SelfIRAG(FakeRetriever(["Paris is the capital of France."]), FakeLLM(judge_json("Paris is.", 9)))
    events = [e async for e in rag.astream("What is the capital of France?")]
    answer = [e for e in events if e.kind != "step"]
    assert [e.kind for e in answer] == ["token", "result"] and answer[0].text == "Paris is."
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
    assert first.kind == "step" and (await stream.__anext__()).kind == "token"
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


class BreakingStream:
    """Streams the replies of ``attempts`` in turn, word by word; an attempt given with
    ``break_after=n`` raises after its first n words (a connection lost mid-stream)."""

    def __init__(self, *attempts: tuple[str, int | None]) -> None:
        self.attempts = list(attempts)
        self.calls = 0

    def _words(self) -> Iterator[str]:
        text, break_after = self.attempts[min(self.calls, len(self.attempts) - 1)]
        self.calls += 1
        for i, word in enumerate(text.split(" ")):
            if break_after is not None and i == break_after:
                raise ConnectionError("stream lost")
            yield word + " "

    def generate(self, prompt: str) -> str:
        return "".join(self._words())

    def stream(self, prompt: str) -> Iterator[str]:
        yield from self._words()

    async def astream(self, prompt: str) -> AsyncIterator[str]:
        for word in self._words():
            await asyncio.sleep(0)
            yield word


def _no_wait(_: float) -> None:
    return None


async def _no_wait_async(_: float) -> None:
    return None


def test_a_retried_stream_does_not_send_again_what_it_repeats() -> None:
    answer = "Paris is the capital of France."
    got: list[str] = []
    reply = call_llm_detailed(
        BreakingStream((answer, 2), (answer, None)), "p", sink=got.append, sleep=_no_wait
    )
    assert "".join(got) == answer + " " and reply.text == answer + " " and reply.attempts == 2
    got.clear()
    llm = BreakingStream((answer, 3), (answer, None))
    reply = asyncio.run(acall_llm_detailed(llm, "p", sink=got.append, sleep=_no_wait_async))
    assert "".join(got) == answer + " " and reply.attempts == 2


def test_a_retry_that_says_something_else_is_not_forwarded() -> None:
    got: list[str] = []
    llm = BreakingStream(("Paris is the capital.", 2), ("The capital is Paris.", None))
    reply = call_llm_detailed(llm, "p", sink=got.append, sleep=_no_wait)
    assert got == ["Paris ", "is "] and reply.text == "The capital is Paris. "


@pytest.mark.parametrize("use_async", [False, True])
def test_a_stream_whose_text_is_not_the_answer_resets_then_sends_it(use_async: bool) -> None:
    llm = BreakingStream(("Paris is the capital.", 2), ("The capital is Paris.", None))
    strategy = OneShot(FakeRetriever(["doc"]), llm, execution=ExecutionConfig(retry_initial_wait=0.001))

    async def collect() -> list[Any]:
        return [e async for e in strategy.astream("q")]

    events = asyncio.run(collect()) if use_async else list(strategy.stream("q"))
    kinds = [e.kind for e in events]
    assert kinds == ["step", "token", "token", "reset", "token", "result"]
    after_reset = "".join(e.text for e in events[kinds.index("reset") + 1 :] if e.kind == "token")
    assert after_reset == events[-1].result.answer == "The capital is Paris. "


class Fallback(Strategy[Any]):
    """Streams its answer; when every attempt fails, answers with a fixed text instead."""

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Any]:
        try:
            text = (yield Generate(self.llm, query, "answer", retries=1, stream=True)).text
        except Exception:
            text = "No answer could be generated."

        class Result:
            answer = text
            trace = None

        return Result()


def test_a_fallback_answer_after_partial_tokens_comes_after_a_reset() -> None:
    llm = BreakingStream(("Paris is the capital.", 2))  # every attempt breaks
    events = list(
        Fallback(FakeRetriever([]), llm, execution=ExecutionConfig(retry_initial_wait=0.001)).stream("q")
    )
    assert [e.kind for e in events] == ["token", "token", "reset", "token", "result"]
    assert events[3].text == events[-1].result.answer == "No answer could be generated."


def test_whitespace_streamed_before_a_fallback_needs_no_reset() -> None:
    events = list(
        Fallback(
            FakeRetriever([]), StreamingLLM("   "), execution=ExecutionConfig(retry_initial_wait=0.001)
        ).stream("q")
    )
    assert [e.kind for e in events][-2:] == ["token", "result"] and "reset" not in [e.kind for e in events]
    assert events[-2].text == "No answer could be generated."


class SlowFirstAttempt:
    """The first stream sends a word every 0.1 s (and times out); the retry is instant and
    ends differently."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompt: str) -> str:
        return "unused"

    def stream(self, prompt: str) -> Iterator[str]:
        self.calls += 1
        first = self.calls == 1
        for word in ["The ", "answer ", "is ", "A." if first else "B."]:
            if first:
                time.sleep(0.1)
            yield word


def test_a_timed_out_attempt_sends_nothing_once_it_timed_out() -> None:
    """Its thread runs on, but from the timeout its words are dropped; the retry goes on
    from what was sent (no reset, no word of the abandoned attempt after it)."""

    class OneCall(Strategy[Any]):
        def _plan(self, query: str, context: dict[str, Any]) -> Plan[Any]:
            reply = yield Generate(self.llm, query, "answer", retries=1, stream=True)

            class Result:
                answer = reply.text
                trace = None

            return Result()

    execution = ExecutionConfig(llm_timeout=0.25, retry_initial_wait=0.3)
    events = list(OneCall(FakeRetriever([]), SlowFirstAttempt(), execution=execution).stream("q"))
    assert [e.text for e in events if e.kind == "token"] == ["The ", "answer ", "is ", "B."]
    assert events[-1].result.answer == "The answer is B."
    time.sleep(0.3)  # the abandoned thread finishes; nothing more arrives anywhere

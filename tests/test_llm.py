"""_call_llm: every accepted LLM shape, retries, exhaustion, timeouts, usage."""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from selfrag_core import ConfigurationError, LLMCallError, LLMOutput, LLMTimeoutError, _acall_llm, _call_llm
from selfrag_core.llm import acall_llm_detailed, call_llm_detailed, to_reply
from selfrag_core.testing import FakeLLM, SyncOnlyFakeLLM

NO_SLEEP = {"sleep": lambda _: None}


class Runnable:  # stands in for langchain_core.runnables.Runnable (matched by class name)
    pass


class FakeChatModel(Runnable):
    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.seen: list[Any] = []

    def invoke(self, prompt: Any) -> Any:
        self.seen.append(prompt)
        return self.reply

    async def ainvoke(self, prompt: Any) -> Any:
        self.seen.append(("async", prompt))
        return self.reply


class FakeCompletionLLM:
    def complete(self, prompt: str) -> Any:
        return SimpleNamespace(
            text=f"completed: {prompt}", raw={"usage": {"prompt_tokens": 3, "completion_tokens": 2}}
        )

    async def acomplete(self, prompt: str) -> Any:
        return SimpleNamespace(text=f"acompleted: {prompt}", raw=None)


FakeCompletionLLM.__module__ = "llama_index.core.llms.fake"


def test_generate_object() -> None:
    assert _call_llm(FakeLLM("hello"), "p") == "hello"


async def test_async_generate_is_awaited_natively() -> None:
    llm = FakeLLM("hi")
    assert await _acall_llm(llm, "p") == "hi"
    assert llm.calls[0].is_async


async def test_sync_only_llm_from_async_code_runs_in_a_thread() -> None:
    llm = SyncOnlyFakeLLM("hi")
    assert await _acall_llm(llm, "p") == "hi"
    assert not llm.calls[0].is_async


def test_langchain_like_message_with_content_blocks() -> None:
    message = SimpleNamespace(
        content=[
            {"type": "text", "text": "Hello "},
            {"type": "image", "url": "x"},
            {"type": "text", "text": "world"},
        ],
        usage_metadata={"input_tokens": 11, "output_tokens": 4},
    )
    reply = call_llm_detailed(FakeChatModel(message), "p", **NO_SLEEP)
    assert reply.text == "Hello world"
    assert (reply.input_tokens, reply.output_tokens) == (11, 4)


async def test_langchain_like_async() -> None:
    model = FakeChatModel(SimpleNamespace(content="async hello", usage_metadata=None))
    assert await _acall_llm(model, "p") == "async hello"
    assert model.seen == [("async", "p")]


def test_llamaindex_like_complete_and_usage() -> None:
    reply = call_llm_detailed(FakeCompletionLLM(), "q", **NO_SLEEP)
    assert reply.text == "completed: q"
    assert (reply.input_tokens, reply.output_tokens) == (3, 2)


async def test_llamaindex_like_acomplete() -> None:
    assert await _acall_llm(FakeCompletionLLM(), "q") == "acompleted: q"


def test_plain_and_async_callables() -> None:
    assert _call_llm(lambda p: p.upper(), "abc") == "ABC"

    async def acall(p: str) -> str:
        return p[::-1]

    assert _call_llm(acall, "abc") == "cba"  # async-only LLM from sync code


async def test_async_only_callable_from_sync_code_inside_running_loop() -> None:
    async def acall(p: str) -> str:
        await asyncio.sleep(0)
        return "ok"

    assert _call_llm(acall, "abc") == "ok"  # no 'event loop is already running'


def test_llm_output_tokens() -> None:
    reply = call_llm_detailed(lambda p: LLMOutput("t", 5, 6), "p", **NO_SLEEP)
    assert (reply.text, reply.input_tokens, reply.output_tokens) == ("t", 5, 6)


def test_retries_then_success() -> None:
    llm = FakeLLM("fine", fail_on=[1, 2])
    waits: list[float] = []
    reply = call_llm_detailed(llm, "p", retries=2, sleep=waits.append)
    assert reply.text == "fine" and reply.attempts == 3 and llm.n_calls == 3
    assert waits == [0.5, 1.0]  # exponential back-off from initial_wait, injected sleep


async def test_async_retries_wait_as_the_sync_ones() -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    llm = FakeLLM("fine", fail_on=[1, 2, 3])
    reply = await acall_llm_detailed(llm, "p", retries=3, sleep=record, initial_wait=0.25, max_wait=0.6)
    assert reply.text == "fine" and reply.attempts == 4 and llm.n_calls == 4
    assert waits == [0.25, 0.5, 0.6]  # doubling, capped at max_wait
    with pytest.raises(ValueError, match="retries"):  # checked before any attempt
        await acall_llm_detailed(FakeLLM("fine"), "p", retries=-1)


def test_exhaustion_raises_llm_call_error_with_cause() -> None:
    llm = FakeLLM("never", fail_on=[1, 2, 3, 4])
    with pytest.raises(LLMCallError) as info:
        _call_llm(llm, "p", retries=3, **NO_SLEEP)
    assert llm.n_calls == 4 and info.value.attempts == 4
    assert "simulated LLM outage" in str(info.value)
    assert isinstance(info.value.__cause__, ConnectionError)


async def test_async_exhaustion() -> None:
    async def no_sleep(_: float) -> None:
        return None

    llm = FakeLLM("never", fail_on=[1, 2])
    with pytest.raises(LLMCallError):
        await _acall_llm(llm, "p", retries=1, sleep=no_sleep)
    assert llm.n_calls == 2


def test_empty_reply_is_a_failed_attempt() -> None:
    llm = FakeLLM(["", "  ", "finally"])
    assert _call_llm(llm, "p", retries=2, **NO_SLEEP) == "finally"
    with pytest.raises(LLMCallError, match="empty"):
        _call_llm(FakeLLM(""), "p", retries=1, **NO_SLEEP)


def test_sync_timeout_counts_as_failed_attempt() -> None:
    llm = FakeLLM("slow", latency=0.5)
    start = time.perf_counter()
    with pytest.raises(LLMTimeoutError):
        _call_llm(llm, "p", retries=1, timeout=0.05, **NO_SLEEP)
    assert time.perf_counter() - start < 0.45  # two abandoned attempts, not one full call
    assert llm.n_calls == 2


async def test_async_timeout() -> None:
    async def no_sleep(_: float) -> None:
        return None

    llm = FakeLLM("slow", latency=1.0)
    with pytest.raises(LLMTimeoutError):
        await _acall_llm(llm, "p", retries=0, timeout=0.05, sleep=no_sleep)


async def test_within_limits_time_without_a_task_of_its_own() -> None:
    from selfrag_core.llm import within

    async def which_task() -> asyncio.Task[Any] | None:
        await asyncio.sleep(0)
        return asyncio.current_task()

    task = await within(which_task(), 5.0)
    assert await within(which_task(), None) is asyncio.current_task()
    if sys.version_info >= (3, 11):  # asyncio.timeout: no task per LLM call, as wait_for made
        assert task is asyncio.current_task()
    with pytest.raises(asyncio.TimeoutError):
        await within(asyncio.sleep(1.0), 0.02)


def test_not_an_llm() -> None:
    with pytest.raises(ConfigurationError, match="not an LLM"):
        _call_llm(object(), "p", **NO_SLEEP)


def test_to_reply_variants() -> None:
    assert to_reply({"content": "x"}).text == "x"
    assert to_reply(SimpleNamespace(text="t", content=None)).text == "t"

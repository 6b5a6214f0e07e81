"""The fault matrix of issue 16, classes 1 (time is bounded), 3 (the trace is exact) and
7 (misconfiguration is an error): every strategy, sync and async.

Each hang is a wait on an event that the test sets when it ends, so no thread of a
failed test outlives it by more than that."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fault_helpers import MODES, STRATEGIES, ask, build

from selfrag_core import (
    ConfigurationError,
    ExecutionConfig,
    SelfHealingRAG,
)
from selfrag_core.testing import FakeLLM, FakeRetriever, SyncOnlyFakeLLM

DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany and its largest city.",
    "Tides are caused by the gravity of the Moon and affect coastal ecosystems.",
]

FALLBACK_ANSWERS = {
    "error in generating answer",
    "There is insufficient information.",
    "There is not enough information.",
    "The context does not contain the answer.",
}


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set when the test ends: every hung call returns then."""
    event = threading.Event()
    yield event
    event.set()


class HangingBackend:
    """A sync backend whose retrieve never returns (until the test ends)."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def retrieve(self, query: str, top_k: int = 5) -> list[tuple[str, float]]:
        self.release.wait(60)
        return [(DOCS[0], 1.0)]


class AsyncHangingBackend:
    async def aretrieve(self, query: str, top_k: int = 5) -> list[tuple[str, float]]:
        await asyncio.sleep(60)
        return [(DOCS[0], 1.0)]

    def retrieve(self, query: str, top_k: int = 5) -> list[tuple[str, float]]:
        time.sleep(2.5)
        return [(DOCS[0], 1.0)]


class HangingLLM:
    """A sync-only LLM whose generate never returns (until the test ends)."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.calls = 0

    def generate(self, prompt: str) -> str:
        self.calls += 1
        self.release.wait(60)
        return "too late"


# ------------------------------------------------------------ 1. time is bounded


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("kind", ["sync-backend", "async-backend"])
async def test_a_hung_retrieval_is_bounded_by_query_timeout(
    name: str, mode: str, kind: str, release: threading.Event
) -> None:
    backend = HangingBackend(release) if kind == "sync-backend" else AsyncHangingBackend()
    llm = FakeLLM("Paris.")
    strategy = build(name, backend, llm, ExecutionConfig(query_timeout=0.5))
    start = time.perf_counter()
    result = await ask(strategy, mode)
    assert time.perf_counter() - start < 2.0  # the retrieval would take 2.5 s, or forever
    failed = [e for e in result.trace.events if e.kind == "retrieval" and e.error]
    assert failed and "Timeout" in (failed[0].error or "")
    assert result.trace.wall_s is not None and result.trace.wall_s < 2.0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
async def test_a_hung_retrieval_is_bounded_by_retrieval_timeout(
    name: str, mode: str, release: threading.Event
) -> None:
    strategy = build(name, HangingBackend(release), FakeLLM("Paris."), ExecutionConfig(retrieval_timeout=0.2))
    start = time.perf_counter()
    result = await ask(strategy, mode)
    assert time.perf_counter() - start < 2.0
    errors = [e.error or "" for e in result.trace.events if e.kind == "retrieval"]
    assert errors and all("RetrievalTimeoutError" in e for e in errors)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
async def test_retry_back_off_never_sleeps_past_the_deadline(name: str, mode: str) -> None:
    naps: list[tuple[float, float]] = []

    def sleep(seconds: float) -> None:
        naps.append((time.perf_counter(), seconds))
        time.sleep(seconds)

    async def async_sleep(seconds: float) -> None:
        naps.append((time.perf_counter(), seconds))
        await asyncio.sleep(seconds)

    execution = ExecutionConfig(
        query_timeout=0.6, retry_initial_wait=0.2, sleep=sleep, async_sleep=async_sleep
    )
    llm = FakeLLM("x", fail_on=range(1, 100))
    result = await ask(build(name, FakeRetriever(list(DOCS)), llm, execution, retries=5), mode)
    assert result.answer in FALLBACK_ANSWERS or result.answer == ""
    deadline = result.trace.started_at + 0.6
    assert all(at + seconds <= deadline for at, seconds in naps), naps
    assert result.trace.wall_s is not None and result.trace.wall_s < 1.2
    assert any("QueryTimeoutError" in (e.error or "") for e in result.trace.events)


EXIT_SCRIPT = """
import asyncio, sys, threading
from selfrag_core import ExecutionConfig, HyDERAG, RecursiveRAG, SelfHealingRAG, SelfIRAG, StrategyError
from selfrag_core.testing import FakeRetriever

class Hangs:
    def generate(self, prompt):
        threading.Event().wait()

name, mode = sys.argv[1], sys.argv[2]
backend, llm = FakeRetriever(["Paris is the capital of France."]), Hangs()
execution = ExecutionConfig(llm_timeout=0.2)
strategy = {
    "self": lambda: SelfIRAG(backend, llm, execution=execution),
    "hyde": lambda: HyDERAG(backend, llm, llm_retries=0, execution=execution),
    "recursive": lambda: RecursiveRAG(backend, llm, execution=execution),
    "healing": lambda: SelfHealingRAG(llm, [backend], execution=execution),
}[name]()
run = (strategy.ask_sync if name == "healing" else strategy.query) if mode == "sync" else None
if run is None:
    run = lambda q: asyncio.run(strategy.ask(q) if name == "healing" else strategy.aquery(q))
try:
    print("answer:", getattr(run("Where is Paris?"), "answer", "?"), flush=True)
except StrategyError as e:
    print("answer: StrategyError", flush=True)
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
def test_an_abandoned_llm_call_never_keeps_the_interpreter_from_exiting(name: str, mode: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(EXIT_SCRIPT), name, mode],
        capture_output=True,
        text=True,
        timeout=60,  # before the fix: never exits
    )
    assert done.returncode == 0, done.stderr
    assert "answer:" in done.stdout


@pytest.mark.parametrize("name", STRATEGIES)
async def test_hung_sync_llms_never_starve_other_async_queries(name: str, release: threading.Event) -> None:
    """Each hung query abandons a few threads; the loop's default executor (6 threads on
    two cores) would be full, and the healthy query would time out."""
    execution = ExecutionConfig(llm_timeout=0.2, query_timeout=5)
    hung = [
        build(name, FakeRetriever(list(DOCS)), HangingLLM(release), execution, retries=0) for _ in range(4)
    ]
    await asyncio.gather(*(ask(s, "async") for s in hung))
    healthy_llm = SyncOnlyFakeLLM("Paris is the capital of France.")
    healthy = build(name, FakeRetriever(list(DOCS)), healthy_llm, ExecutionConfig(llm_timeout=2))
    result = await ask(healthy, "async")
    llm_errors = [e.error for e in result.trace.events if e.kind == "llm" and e.error]
    assert not llm_errors
    assert healthy_llm.n_calls >= 1


# ------------------------------------------------------------ 3. the trace is exact


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
async def test_trace_counts_what_the_llm_received_under_a_budget(name: str, mode: str) -> None:
    llm = FakeLLM("Paris is the capital of France.")
    strategy = build(name, FakeRetriever(list(DOCS)), llm, ExecutionConfig(max_llm_calls=2))
    result = await ask(strategy, mode, "What causes tides and how do they affect coastal ecosystems?")
    assert llm.n_calls <= 2
    assert result.trace.llm_calls == llm.n_calls
    refused = [e for e in result.trace.events if e.kind == "llm" and "BudgetExceeded" in (e.error or "")]
    assert all(e.attempts == 0 for e in refused)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
async def test_a_call_cut_off_by_the_budget_mid_retry_keeps_its_attempts(
    name: str, mode: str, instant: ExecutionConfig
) -> None:
    llm = FakeLLM("x", fail_on=range(1, 100))
    execution = ExecutionConfig(max_llm_calls=2, sleep=instant.sleep, async_sleep=instant.async_sleep)
    result = await ask(build(name, FakeRetriever(list(DOCS)), llm, execution, retries=3), mode)
    assert llm.n_calls == 2
    assert result.trace.llm_calls == 2
    cut = [
        e
        for e in result.trace.events
        if e.kind == "llm" and e.attempts and "BudgetExceeded" in (e.error or "")
    ]
    # HyDE's passages share the two calls (in any order); elsewhere the first call makes both
    assert sum(e.attempts for e in cut) == 2 and (name == "hyde" or len(cut) == 1)


# ------------------------------------------------------------ 7. misconfiguration


class TypeErrorBackend:
    """Like a vector store whose embeddings object cannot embed queries."""

    def retrieve(self, query: str, top_k: int = 5) -> Any:
        raise TypeError("embed_query() missing 1 required positional argument: 'text'")


class StatusError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class AuthenticationError(Exception):
    """Named as the OpenAI client names it, without importing it."""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
async def test_a_backend_programming_error_raises_configuration_error(name: str, mode: str) -> None:
    llm = FakeLLM("Paris.")
    strategy = build(name, TypeErrorBackend(), llm, ExecutionConfig())
    with pytest.raises(ConfigurationError, match=r"backend TypeErrorBackend raised TypeError") as caught:
        await ask(strategy, mode)
    assert caught.value.component == "backend"
    assert llm.n_calls <= (3 if name == "hyde" else 0)  # HyDE writes its passages before searching


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize(
    "error",
    [TypeError("generate() takes 1 positional argument"), StatusError(401), AuthenticationError("bad key")],
)
async def test_an_llm_configuration_error_raises_without_retries(
    name: str, mode: str, error: Exception
) -> None:
    llm = FakeLLM([error])
    strategy = build(name, FakeRetriever(list(DOCS)), llm, ExecutionConfig())
    with pytest.raises(ConfigurationError, match="LLM FakeLLM raised") as caught:
        await ask(strategy, mode)
    assert caught.value.component == "LLM"
    assert llm.n_calls <= (3 if name == "hyde" else 1)  # never retried (HyDE's passages run together)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
async def test_transient_faults_still_get_the_fallback(
    name: str, mode: str, instant: ExecutionConfig
) -> None:
    llm = FakeLLM([StatusError(503), StatusError(429), ConnectionError("reset")], cycle=True)
    result = await ask(build(name, FakeRetriever(list(DOCS)), llm, instant), mode)
    assert result.answer in FALLBACK_ANSWERS or result.answer == ""
    assert llm.n_calls > 1  # retried


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
async def test_misconfiguration_fallback_option(name: str, mode: str) -> None:
    strategy = build(
        name, TypeErrorBackend(), FakeLLM("Paris."), ExecutionConfig(misconfiguration="fallback")
    )
    result = await ask(strategy, mode)
    assert any("ConfigurationError" in (e.error or "") for e in result.trace.events)


def test_fault_classification() -> None:
    from selfrag_core.errors import misconfiguration_hint

    assert misconfiguration_hint(TypeError("x")) is not None
    assert misconfiguration_hint(AttributeError("x")) is not None
    assert misconfiguration_hint(ModuleNotFoundError("x")) == "install the missing package"
    assert "model name" in (misconfiguration_hint(StatusError(404)) or "")
    assert "API key" in (misconfiguration_hint(StatusError(403)) or "")
    assert misconfiguration_hint(Exception("The api_key client option must be set")) is not None
    for transient in (
        TimeoutError(),
        ConnectionResetError(),
        StatusError(429),
        StatusError(503),
        ValueError("x"),
    ):
        assert misconfiguration_hint(transient) is None
    with pytest.raises(ConfigurationError, match="misconfiguration"):
        ExecutionConfig(misconfiguration="ignore")


# ------------------------------------------------ 5. callers never see each other's data


def _topic(i: int) -> str:
    return f"zq{i:03d}"


def _asked(prompt: str) -> set[str]:
    return {word for word in prompt.replace("?", " ").split() if word.startswith("zq") and len(word) == 5}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", STRATEGIES)
async def test_concurrent_callers_of_one_object_never_see_each_others_questions(name: str, mode: str) -> None:
    docs = [f"Topic {_topic(i)} is about subject number {i} and its history." for i in range(16)]

    def reply(prompt: str) -> str:  # names the topic of the question it was asked
        question = prompt.rsplit("Question:", 1)[-1].strip().split("\n")[0]
        return "It is about " + " ".join(sorted(_asked(question))) + "."

    llm = FakeLLM(reply, latency=0.005)
    strategy = build(name, FakeRetriever(docs), llm, ExecutionConfig(max_concurrency=8))
    questions = [f"What is {_topic(i)} about, and how did its history start?" for i in range(16)]

    async def staggered(i: int) -> None:  # later callers start while earlier ones finish
        await asyncio.sleep(0.01 * i)
        await ask(strategy, mode, questions[i])

    if mode == "sync":
        threads = [threading.Thread(target=asyncio.run, args=(staggered(i),)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    else:
        await asyncio.gather(*(staggered(i) for i in range(16)))
    assert llm.n_calls >= 16
    for prompt in llm.prompts:
        assert "Conversation so far" not in prompt
        if "Question:" in prompt:  # what follows the question names its topic only
            assert len(_asked(prompt.rsplit("Question:", 1)[-1])) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_conversation_memory_belongs_to_the_conversation(mode: str) -> None:
    from selfrag_core import ConversationMemory

    llm = FakeLLM("Paris is the capital of France.")
    healer = SelfHealingRAG(llm, [FakeRetriever(list(DOCS))], max_retries=0)
    alice, bob = ConversationMemory(), ConversationMemory()
    call = healer.ask_sync if mode == "sync" else None

    async def say(question: str, memory: ConversationMemory) -> None:
        if call is not None:
            call(question, memory=memory)
        else:
            await healer.ask(question, memory=memory)

    await say("What is the secret project code name of Alice?", alice)
    await say("What is the capital of France?", bob)
    await say("And its population?", bob)
    follow_up = [p for p in llm.prompts if "And its population?" in p and "Conversation so far" in p]
    assert follow_up and "What is the capital of France?" in follow_up[0]
    assert not any("secret project" in p for p in llm.prompts if "And its population?" in p)
    assert [q for q, _ in alice.turns] == ["What is the secret project code name of Alice?"]
    assert len(bob) == 2 and healer.memory is None

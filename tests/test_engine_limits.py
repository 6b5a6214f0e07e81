"""Which limit a call's time is charged to: waiting for a turn (a component that serves one
call at a time, a thread) counts against the query's deadline only, never against the
component's own timeout; and every timeout names the limit that fired and its knob."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from selfrag_core import ExecutionConfig, LLMCallError, QueryTimeoutError, RetrievalTimeoutError
from selfrag_core.engine import Generate, Plan, Retrieve, Run, run_async, run_sync
from selfrag_core.errors import LLMTimeoutError
from selfrag_core.testing import FakeLLM
from selfrag_core.workers import Limit, taking, to_thread

DOC = "Paris is the capital of France."


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> Any:
    def run(plan: Plan[Any], config: ExecutionConfig) -> tuple[Any, Run]:
        state = Run(config)
        if request.param == "sync":
            return run_sync(plan, state), state
        return asyncio.run(run_async(plan, state)), state

    return run


class OneAtATime:
    """A sync backend and LLM that serves one call at a time behind a lock, taken as the
    local model takes its own (``workers.taking``); ``calls`` counts the calls that ran."""

    def __init__(self, latency: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.latency = latency
        self.calls = 0

    def _serve(self, text: str) -> str:
        with taking(self.lock):
            self.calls += 1
            time.sleep(self.latency)
            return text

    def retrieve(self, query: str, top_k: int = 5) -> list[str]:
        return [self._serve(DOC)]

    def generate(self, prompt: str) -> str:
        return self._serve("an answer")

    async def agenerate(self, prompt: str) -> str:  # as LocalLLM: on the library's threads
        return await to_thread(self.generate, prompt)


def hold(lock: threading.Lock, seconds: float) -> None:
    """Take ``lock`` now and give it back after ``seconds`` (another caller's long turn)."""
    lock.acquire()
    threading.Timer(seconds, lock.release).start()


def retrieve(backend: Any) -> Plan[Any]:
    try:
        docs = yield Retrieve(backend, "capital of France", 1)
    except Exception as e:
        return e
    return [d.text for d in docs]


def generate(llm: Any, retries: int = 0) -> Plan[Any]:
    try:
        reply = yield Generate(llm, "say something", "answer", retries=retries)
    except Exception as e:
        return e
    return reply.text


def test_waiting_for_a_turn_is_not_charged_to_retrieval_timeout(driver: Any) -> None:
    backend = OneAtATime()
    hold(backend.lock, 0.4)  # the backend answers at once, once its turn comes
    found, run = driver(retrieve(backend), ExecutionConfig(retrieval_timeout=0.1, query_timeout=5))
    assert found == [DOC]
    assert [e.error for e in run.trace.events] == [None]


def test_waiting_for_a_turn_is_not_charged_to_llm_timeout(driver: Any) -> None:
    llm = OneAtATime()
    hold(llm.lock, 0.4)
    text, run = driver(generate(llm), ExecutionConfig(llm_timeout=0.1, query_timeout=5))
    assert text == "an answer"
    assert [(e.attempts, e.error) for e in run.trace.events] == [(1, None)]


def test_the_wait_is_bounded_by_the_deadline_and_an_abandoned_call_never_runs(driver: Any) -> None:
    backend = OneAtATime()
    hold(backend.lock, 0.6)
    start = time.perf_counter()
    error, _ = driver(retrieve(backend), ExecutionConfig(retrieval_timeout=0.1, query_timeout=0.3))
    assert time.perf_counter() - start < 0.55
    assert isinstance(error, QueryTimeoutError)
    assert "query_timeout=0.3s during a retrieval" in str(error)
    assert "of it waiting for its turn" in str(error) and "retrieval_timeout" not in str(error)
    time.sleep(0.5)  # the lock is free again: the abandoned call did not take its turn
    assert backend.calls == 0


def test_the_own_timeout_counts_from_the_turn(driver: Any) -> None:
    llm = OneAtATime(latency=0.5)
    hold(llm.lock, 0.2)
    start = time.perf_counter()
    error, _ = driver(generate(llm), ExecutionConfig(llm_timeout=0.15, query_timeout=5))
    assert isinstance(error, LLMCallError)
    assert "took longer than its llm_timeout=0.15s; raise ExecutionConfig.llm_timeout" in str(error)
    assert 0.3 <= time.perf_counter() - start < 0.5  # 0.2 s wait + 0.15 s of its own


def test_a_call_cut_off_by_the_deadline_names_the_deadline_and_its_knob(driver: Any) -> None:
    knobs = {"query_timeout": "--timeout", "llm_timeout": "--llm-timeout"}
    config = ExecutionConfig(llm_timeout=10, query_timeout=0.2, knobs=knobs)
    error, run = driver(generate(FakeLLM("slow", latency=1.0), retries=2), config)
    assert isinstance(error, QueryTimeoutError)
    # on a busy machine the call may have waited for its turn first: "(0.01s of it waiting ...)"
    assert "query exceeded query_timeout=0.2s during an LLM call" in str(error)
    assert "; raise --timeout" in str(error) and "llm_timeout" not in str(error)
    assert run.trace.events[0].attempts == 1  # not retried: the deadline has passed


@pytest.mark.parametrize(
    ("slow", "config", "error", "message"),
    [
        ("llm", {"llm_timeout": 0.1}, LLMTimeoutError, "llm_timeout=0.1s; raise --llm-timeout"),
        ("retrieval", {"retrieval_timeout": 0.1}, RetrievalTimeoutError, "retrieval_timeout=0.1s; raise "),
    ],
)
def test_a_components_own_timeout_names_its_limit_and_knob(
    driver: Any, slow: str, config: dict[str, Any], error: type[Exception], message: str
) -> None:
    component = OneAtATime(latency=0.5)
    knobs = {"llm_timeout": "--llm-timeout"}
    execution = ExecutionConfig(**config, query_timeout=5, knobs=knobs)
    plan = generate(component) if slow == "llm" else retrieve(component)
    found, _ = driver(plan, execution)
    cause = found.__cause__ if isinstance(found, LLMCallError) and slow == "llm" else found
    assert isinstance(cause, error) or isinstance(found, error), found
    assert message in str(found)
    if slow == "retrieval":  # no flag for it: the library's name
        assert "raise ExecutionConfig.retrieval_timeout" in str(found)


def test_knobs_must_name_fields() -> None:
    with pytest.raises(ValueError, match="knobs names no field query_timout"):
        ExecutionConfig(knobs={"query_timout": "--timeout"})


def test_a_limit_ends_at_its_own_timeout_from_its_start_and_never_past_the_deadline() -> None:
    limit = Limit(1.0, deadline=time.perf_counter() + 5.0, waiting=True)
    assert limit.by_deadline() and 4.9 < (limit.left() or 0) <= 5.0  # waiting: the deadline only
    limit.start()
    assert not limit.by_deadline() and 0.9 < (limit.left() or 0) <= 1.0
    unbounded_wait = Limit(1.0, waiting=True)  # no deadline: the wait is bounded by the timeout
    assert 0.9 < (unbounded_wait.left() or 0) <= 1.0
    short = Limit(10.0, deadline=time.perf_counter() + 0.5)
    assert short.by_deadline() and (short.left() or 0) <= 0.5

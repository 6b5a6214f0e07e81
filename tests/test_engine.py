"""The shared engine: one plan, two drivers, concurrency under a limit, budget."""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any

import pytest

from selfrag_core import BudgetExceededError, ExecutionConfig, LLMCallError, RetrievalError
from selfrag_core.engine import Generate, Note, Parallel, Plan, Retrieve, Run, run_async, run_sync
from selfrag_core.testing import FakeLLM, FakeRetriever

TAG: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="none")


def fan_out(llm: Any, n: int) -> Plan[list[Any]]:
    replies = yield Parallel(tuple(Generate(llm, f"prompt {i}", "p") for i in range(n)))
    return [r if isinstance(r, Exception) else r.text for r in replies]


def nested(llm: Any, backend: Any) -> Plan[dict[str, Any]]:
    def branch(i: int) -> Plan[str]:
        docs = yield Retrieve(backend, f"q{i}", 2)
        reply = yield Generate(llm, f"answer {i} with {len(docs)} docs", "leaf")
        return reply.text

    leaves = yield Parallel(tuple(branch(i) for i in range(3)))
    final = yield Generate(llm, "merge", "merge")
    return {"leaves": leaves, "final": final.text}


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> Any:
    def run(plan: Plan[Any], config: ExecutionConfig | None = None) -> tuple[Any, Run]:
        state = Run(config or ExecutionConfig())
        if request.param == "sync":
            return run_sync(plan, state), state
        return asyncio.run(run_async(plan, state)), state

    return run


def test_parallel_generates_run_together(driver: Any) -> None:
    llm = FakeLLM("ok", latency=0.2)
    start = time.perf_counter()
    out, run = driver(fan_out(llm, 4))
    elapsed = time.perf_counter() - start
    assert out == ["ok"] * 4 and llm.rounds() == 1
    assert elapsed < 0.6  # sequential: 0.8 s
    assert run.trace.llm_calls == 4


def test_concurrency_limit_is_respected(driver: Any) -> None:
    llm = FakeLLM("ok", latency=0.15)
    driver(fan_out(llm, 4), ExecutionConfig(max_concurrency=2))
    events = sorted([(c.start, 1) for c in llm.calls] + [(c.end, -1) for c in llm.calls])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2


def test_nested_plans_share_limit_and_trace(driver: Any) -> None:
    llm = FakeLLM(lambda p: p.upper(), latency=0.1)
    backend = FakeRetriever(["q0 doc", "q1 doc", "q2 doc"])
    out, run = driver(nested(llm, backend))
    assert out["leaves"] == [f"ANSWER {i} WITH 1 DOCS" for i in range(3)] and out["final"] == "MERGE"
    assert llm.rounds() == 2 and run.trace.retrievals == 3 and run.trace.llm_calls == 4


def test_failures_are_thrown_into_the_plan(driver: Any) -> None:
    def plan() -> Plan[list[str]]:
        seen = []
        try:
            yield Retrieve(FakeRetriever(fail=ConnectionError("down")), "q", 3)
        except RetrievalError as e:
            seen.append(type(e).__name__)
            yield Note("retrieval_failed", str(e))
        try:
            yield Generate(FakeLLM("x", fail_on=[1]), "p", "p", retries=0)
        except LLMCallError as e:
            seen.append(type(e).__name__)
        results = yield Parallel(
            (Generate(FakeLLM("x", fail_on=[1]), "p", "p", retries=0), Generate(FakeLLM("y"), "p"))
        )
        seen.extend(type(r).__name__ if isinstance(r, Exception) else r.text for r in results)
        return seen

    out, run = driver(plan())
    assert out == ["RetrievalError", "LLMCallError", "LLMCallError", "y"]
    assert [e.name for e in run.trace.fallbacks] == ["retrieval_failed"]
    assert len(run.trace.errors) == 4  # the failed retrieval, two failed calls, the note


def test_budget_is_shared_across_parallel_tasks(driver: Any) -> None:
    llm = FakeLLM("ok")
    out, _ = driver(fan_out(llm, 5), ExecutionConfig(max_llm_calls=3))
    assert out.count("ok") == 3 and llm.n_calls == 3


def test_budget_error_is_typed() -> None:
    def plan() -> Plan[str]:
        yield Generate(FakeLLM("a"), "p")
        try:
            yield Generate(FakeLLM("b"), "p")
        except BudgetExceededError as e:
            return f"budget {e.limit}"
        return "no"

    assert run_sync(plan(), Run(ExecutionConfig(max_llm_calls=1))) == "budget 1"


def test_context_variables_reach_parallel_tasks(driver: Any) -> None:
    seen: list[str] = []

    def llm(prompt: str) -> str:
        seen.append(TAG.get())
        return "ok"

    TAG.set("query-7")
    driver(fan_out(llm, 3))
    assert seen == ["query-7"] * 3


def test_not_an_effect() -> None:
    def plan() -> Plan[None]:
        yield "generate please"  # type: ignore[misc]

    with pytest.raises(TypeError, match="not an effect"):
        run_sync(plan(), Run(ExecutionConfig()))

"""The shared engine: one plan, two drivers, concurrency under a limit, budget."""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any

import pytest

from selfrag_core import BudgetExceededError, ExecutionConfig, LLMCallError, RetrievalError
from selfrag_core.engine import (
    Generate,
    Note,
    Parallel,
    Plan,
    Retrieve,
    RetrieveMany,
    Run,
    run_async,
    run_sync,
)
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


class BatchRetriever(FakeRetriever):
    """FakeRetriever that also answers several queries per call (sync, async or both)."""

    def __init__(self, documents: list[str], *, sync: bool = True, asynchronous: bool = True) -> None:
        super().__init__(documents)
        self.batches: list[list[str]] = []
        if sync:
            self.retrieve_many = self._many
        if asynchronous:
            self.aretrieve_many = self._amany

    def _many(self, queries: list[str], top_k: int = 5) -> list[list[Any]]:
        self.batches.append(list(queries))
        return [[(d.text, d.score) for d in self._search(q, top_k)] for q in queries]  # any result shape

    async def _amany(self, queries: list[str], top_k: int = 5) -> list[list[Any]]:
        await asyncio.sleep(0)
        return self._many(queries, top_k)


DOCS = ["Paris is in France.", "The Seine flows through Paris.", "Berlin is in Germany."]
QUERIES = ("Paris France", "Seine river", "Germany")


def search_all(backend: Any) -> Plan[list[Any]]:
    found = yield RetrieveMany(backend, QUERIES, 2)
    return found


@pytest.mark.parametrize("kind", ["sync", "async", "both"])
def test_retrieve_many_is_one_backend_call_with_the_same_results_and_trace(driver: Any, kind: str) -> None:
    backend = BatchRetriever(DOCS, sync=kind != "async", asynchronous=kind != "sync")
    found, run = driver(search_all(backend))
    one_by_one, plain_run = driver(search_all(FakeRetriever(DOCS)))
    assert backend.batches == [list(QUERIES)]
    assert [[d.text for d in docs] for docs in found] == [[d.text for d in docs] for docs in one_by_one]
    assert [d.score for d in found[0]] == [d.score for d in one_by_one[0]]
    events = [(e.kind, e.detail["query"], e.detail["hits"]) for e in run.trace.events]
    # (one by one, the retrievals run on threads: their events come in any order)
    assert sorted(events) == sorted(
        (e.kind, e.detail["query"], e.detail["hits"]) for e in plain_run.trace.events
    )
    assert len(events) == 3


def test_retrieve_many_gives_each_query_the_failure(driver: Any) -> None:
    backend = BatchRetriever(DOCS)
    backend.fail = ConnectionError("index offline")
    found, run = driver(search_all(backend))
    assert len(found) == 3 and all(isinstance(f, RetrievalError) for f in found)
    assert "index offline" in str(found[0]) and "and 2 more" in str(found[0])
    assert [e.error is not None for e in run.trace.events] == [True, True, True]


def test_retrieve_many_that_returns_too_few_lists_is_a_retrieval_error(driver: Any) -> None:
    backend = BatchRetriever(DOCS, asynchronous=False)
    backend.retrieve_many = lambda queries, top_k=5: [[]]  # one list for three queries
    found, _ = driver(search_all(backend))
    assert all(isinstance(f, RetrievalError) and "one per query" in str(f) for f in found)


def test_retrieve_many_without_a_batch_api_runs_the_queries_together(driver: Any) -> None:
    backend = FakeRetriever(DOCS, latency=0.1)
    start = time.perf_counter()
    found, run = driver(search_all(backend))
    assert time.perf_counter() - start < 0.25  # together, not 3 x 0.1 s
    assert sorted(backend.queries) == sorted(QUERIES) and len(run.trace.events) == 3
    assert [d.text for d in found[1]] == ["The Seine flows through Paris."]


def test_a_quiet_generate_keeps_every_field_but_stream() -> None:
    import dataclasses

    from selfrag_core.engine import Generate

    # a distinct value in every field: a field that quiet() forgot would get its default
    values = {f.name: object() for f in dataclasses.fields(Generate) if f.name != "stream"}
    call = Generate(**values, stream=True)
    assert call.quiet() == dataclasses.replace(call, stream=False)

"""The admission arithmetic (``serve.admission``), on an injected clock."""

from __future__ import annotations

import pytest

from selfrag_core.serve import ServeSettings
from selfrag_core.serve.admission import Admission


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def serve_one_at_a_time(admission: Admission, clock: Clock, n: int, seconds: float, timeout: float) -> None:
    """``n`` queries answered one after another, ``seconds`` each (a model serving one call at a time)."""
    for _ in range(n):
        assert admission.admit(timeout) is None
        clock.now += seconds
        admission.release(timeout)


def test_before_any_measurement_up_to_max_concurrent_are_admitted() -> None:
    admission = Admission(3, retry_after_s=2, clock=Clock())
    assert [admission.admit(60.0) for _ in range(3)] == [None, None, None]
    refusal = admission.admit(60.0)
    assert refusal is not None and refusal.retry_after_s == 2
    assert "3 queries already" in refusal.message


def test_the_service_time_is_busy_seconds_per_finished_query() -> None:
    clock = Clock()
    admission = Admission(256, clock=clock)
    assert admission.service_s() is None
    serve_one_at_a_time(admission, clock, 5, 2.0, 60.0)
    clock.now += 100.0  # idle time is not service time
    assert admission.service_s() == pytest.approx(2.0)
    # four queries in flight together, ending after 8 s: still 2 s of service each
    for _ in range(4):
        admission.admit(60.0)
    clock.now += 8.0
    for _ in range(4):
        admission.release(60.0)
    assert admission.service_s() == pytest.approx(2.0, rel=0.05)


def test_only_what_can_finish_within_the_timeout_is_admitted() -> None:
    clock = Clock()
    admission = Admission(256, retry_after_s=1, clock=clock)
    serve_one_at_a_time(admission, clock, 3, 7.0, 60.0)
    assert admission.capacity(60.0) == 7  # 7 x 7 s fit in 0.9 x 60 s (HEADROOM), 8 do not
    assert [admission.admit(60.0) for _ in range(7)] == [None] * 7
    refusal = admission.admit(60.0)
    assert refusal is not None
    assert refusal.retry_after_s == 7  # one query's service time until a place frees
    assert "within 60s at about 7s each" in refusal.message
    assert admission.active == 7
    admission.release(60.0)
    assert admission.admit(60.0) is None


def test_a_shorter_timeout_in_flight_or_asked_lowers_the_capacity() -> None:
    clock = Clock()
    admission = Admission(256, clock=clock)
    serve_one_at_a_time(admission, clock, 3, 1.0, 60.0)
    assert admission.capacity(60.0) == 54 and admission.capacity(5.0) == 4  # 0.9 x the timeout
    assert admission.admit(3.5) is None  # while it is in flight, every newcomer must fit in 3.5 s
    assert admission.capacity(60.0) == 3
    assert admission.capacity(None) == 3


def test_at_least_one_query_is_admitted_and_never_more_than_the_limit() -> None:
    clock = Clock()
    admission = Admission(4, clock=clock)
    serve_one_at_a_time(admission, clock, 2, 90.0, 60.0)
    assert admission.capacity(60.0) == 1  # slower than the timeout: one at a time, still measured
    fast = Admission(4, clock=clock)
    serve_one_at_a_time(fast, clock, 2, 0.01, 60.0)
    assert fast.capacity(60.0) == 4


def test_off_it_admits_up_to_the_limit_whatever_the_service_time() -> None:
    clock = Clock()
    admission = Admission(10, measured=False, clock=clock)
    serve_one_at_a_time(admission, clock, 3, 30.0, 60.0)
    assert admission.capacity(60.0) == 10


def test_old_measurements_fade() -> None:
    clock = Clock()
    admission = Admission(256, memory_s=60.0, clock=clock)
    serve_one_at_a_time(admission, clock, 5, 10.0, 60.0)
    clock.now += 600.0
    serve_one_at_a_time(admission, clock, 5, 1.0, 60.0)
    assert admission.service_s() == pytest.approx(1.0, rel=0.05)


def test_the_setting_is_checked_and_on_by_default() -> None:
    assert ServeSettings().admission_control is True
    with pytest.raises(ValueError, match="admission_control must be True or False"):
        ServeSettings(admission_control="no")  # type: ignore[arg-type]


def test_a_served_querys_timeout_names_the_servers_or_the_requests_knob() -> None:
    from serve_helpers import ScriptedLLM, make_rag

    from selfrag_core import SelfIRAG
    from selfrag_core.serve.execution import Outcome, prepare
    from selfrag_core.serve.models import QueryRequest
    from selfrag_core.types import Trace

    strategy, settings = SelfIRAG(make_rag(), ScriptedLLM()), ServeSettings(query_timeout=60)
    _, execution = prepare(strategy, QueryRequest(question="q"), settings)
    assert execution.knobs["query_timeout"] == "the server's --timeout (ServeSettings.query_timeout)"
    _, execution = prepare(strategy, QueryRequest(question="q", timeout=5), settings)
    assert (
        execution.query_timeout == 5
        and execution.knobs["query_timeout"] == "the request's timeout (up to 60s)"
    )
    message = Outcome(None, Trace(), "query_timeout").message(execution)
    assert (
        message
        == "the query ran past its 5.0s timeout; retry later or raise the request's timeout (up to 60s)"
    )


def test_a_query_cut_off_by_its_timeout_is_not_a_finished_one() -> None:
    """Counted as finished, the queries abandoned at their timeout made the service time
    fall as the overload grew (20 queries on a 8 s model, 30 s each: 30 s / 20 = 1.5 s)."""
    clock = Clock()
    admission = Admission(256, clock=clock)
    serve_one_at_a_time(admission, clock, 2, 8.0, 30.0)
    for _ in range(20):
        admission.admit(None)  # (no timeout, so that all 20 are admitted)
    clock.now += 30.0
    for _ in range(3):
        admission.release(None)
    for _ in range(17):
        admission.release(None, finished=False)
    per = admission.service_s()
    assert per is not None and per > 8.0  # 46 busy seconds for 5 answered queries, not 46 / 22
    assert admission.capacity(30.0) == 2


def test_before_any_measurement_only_what_runs_at_once_is_admitted() -> None:
    clock = Clock()
    admission = Admission(256, concurrency=1, retry_after_s=1, clock=clock)
    assert admission.admit(30.0) is None
    refusal = admission.admit(30.0)
    assert refusal is not None and refusal.retry_after_s == 1
    assert "not measured yet" in refusal.message
    clock.now += 8.0
    admission.release(30.0)
    assert admission.capacity(30.0) == 3  # measured: 8 s each, 3 fit in 0.9 x 30 s: one runs, two wait
    assert Admission(256, concurrency=4).capacity(30.0) == 4
    assert Admission(8, concurrency=100).concurrency == 8


def test_queries_beyond_the_concurrency_wait_their_turn_in_order() -> None:
    import asyncio

    admission = Admission(256, concurrency=1)
    order: list[int] = []

    async def one(i: int) -> None:
        await admission.turn()
        try:
            order.append(i)
            await asyncio.sleep(0.01)
        finally:
            admission.done_running()

    async def main() -> None:
        tasks = [asyncio.create_task(one(i)) for i in range(4)]
        await asyncio.sleep(0)
        assert (admission.running, admission.waiting) == (1, 3)
        tasks[2].cancel()  # its client went away while it waited: it leaves the line
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert order == [0, 1, 3]
    assert (admission.running, admission.waiting) == (0, 0)


def test_the_llms_declared_concurrency() -> None:
    from selfrag_core.local.llm import LocalLLM
    from selfrag_core.serve.admission import declared_concurrency

    class Declares:
        concurrency = 2

    assert LocalLLM.concurrency == 1  # one call at a time (its lock)
    assert declared_concurrency(Declares()) == 2
    assert declared_concurrency(object()) is None
    with pytest.raises(ValueError, match="query_concurrency"):
        ServeSettings(query_concurrency=0)


def test_a_query_that_did_not_wait_runs_whatever_the_service_time() -> None:
    """Only a wait in line can leave a query too little of its timeout: one admitted
    straight to its turn runs even when the measured service time exceeds its timeout
    (say, the mean of slower strategies), or nothing would ever finish to lower it."""
    from serve_helpers import ScriptedLLM, make_rag, serving

    from selfrag_core.strategies import PlainRAG

    rag, llm = make_rag(), ScriptedLLM()
    llm.concurrency = 1  # type: ignore[attr-defined]
    with serving(rag, llm, {"plain": PlainRAG(rag, llm)}, query_timeout=3.0) as server:
        admission = server.state.admission
        admission._busy, admission._done = 100.0, 1.0  # 100 s a query, past the 3 s timeout
        with server.client() as client:
            assert client.get("/query/plain", params={"q": "Capital of France?"}).status_code == 200
        per = admission.service_s()
        assert per is not None and per < 100.0  # the answered query lowered it

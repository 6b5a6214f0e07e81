"""Under load, queueing is not a fault (issue #30, class 8): a served model that answers one
call at a time in a fixed time, and four times as many concurrent queries as it can finish
within the deadline. Every query is answered within the deadline or refused at once with
503 and Retry-After; no 504, and no retrieval timed out while it waited behind the model."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import Any

import httpx
import pytest
from serve_helpers import ANSWER, JUDGE, make_rag, serving

from selfrag_core.presets import default_strategies
from selfrag_core.workers import taking, to_thread

pytestmark = pytest.mark.slow

CALL_S = 0.2  # the model's time per call
DEADLINE_S = 3.0  # the server's --timeout
QUESTION = "What is the capital of France?"


class OneModel:
    """One model answering one call at a time in ``CALL_S`` seconds, locked as the local
    model is (its wait taken with ``workers.taking``, its async calls on the library's threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0

    def _call(self, reply: str) -> str:
        with taking(self.lock):
            self.calls += 1
            time.sleep(CALL_S)
            return reply

    def generate(self, prompt: str) -> str:
        return self._call(ANSWER)

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> str:
        return self._call(JUDGE)

    async def agenerate(self, prompt: str) -> str:
        return await to_thread(self.generate, prompt)

    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> str:
        return await to_thread(self.generate_structured, prompt, schema)


async def ask(client: httpx.AsyncClient, i: int) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    response = await client.get("/query/self", params={"q": f"{QUESTION} ({i})"})
    return response, time.perf_counter() - start


def test_four_times_the_capacity_is_answered_in_time_or_refused_at_once() -> None:
    rag, llm = make_rag(), OneModel()
    strategy = default_strategies(rag, llm)["self"]
    # a retrieval timeout far below the deadline: a retrieval that waited behind the model
    # would fail with it (the embedded index answers in a millisecond)
    strategy.execution = dataclasses.replace(strategy.execution, retrieval_timeout=0.5)
    with serving(rag, llm, {"self": strategy}, query_timeout=DEADLINE_S) as server:

        async def load() -> tuple[float, list[tuple[httpx.Response, float]]]:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                for i in range(3):  # the service time is measured on the first queries
                    assert (await ask(client, i))[0].status_code == 200
                per_query = server.state.admission.service_s()
                assert per_query is not None
                fits = int(DEADLINE_S / per_query)
                return per_query, await asyncio.gather(*(ask(client, i) for i in range(4 * fits)))

        per_query, results = asyncio.run(load())

    answered = [(r, s) for r, s in results if r.status_code == 200]
    refused = [(r, s) for r, s in results if r.status_code == 503]
    assert len(answered) + len(refused) == len(results), [r.status_code for r, _ in results]
    assert CALL_S * 0.9 < per_query < CALL_S * 3  # at least one model call per query
    assert len(answered) >= 0.5 * DEADLINE_S / per_query  # the model was kept busy
    assert all(seconds < DEADLINE_S for _, seconds in answered)
    for response, seconds in refused:
        assert seconds < DEADLINE_S / 3  # at once, not after waiting out the deadline
        assert int(response.headers["Retry-After"]) >= 1
        assert response.json()["error"]["type"] == "overloaded"
    for response, _ in answered:
        events = response.json()["trace"]["events"]
        assert not [e for e in events if e.get("error")], events  # no timeout, no fallback

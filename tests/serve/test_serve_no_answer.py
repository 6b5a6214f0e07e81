"""No answer is machine-readable over HTTP (issue 34, finding 3): ``no_answer`` in the
/query body, 502 with the result when the LLM failed, a 200 that says why for no
documents; the OpenAI-compatible route says the same in OpenAI's shapes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import instant  # noqa: E402

from selfrag_core import PlainRAG  # noqa: E402
from selfrag_core.serve import ServeSettings, create_app  # noqa: E402
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER, NOT_ENOUGH_ANSWER  # noqa: E402
from selfrag_core.testing import FakeLLM, FakeRetriever  # noqa: E402

QUESTION = "What is the capital of France?"
PARIS = "Paris is the capital of France."


@asynccontextmanager
async def _client() -> AsyncIterator[Any]:
    corpus = FakeRetriever([PARIS])
    down = FakeLLM([ConnectionError("LLM endpoint unreachable")])
    strategies = {
        "ok": PlainRAG(corpus, FakeLLM(PARIS)),
        "down": PlainRAG(corpus, down, execution=instant()),
        "empty": PlainRAG(FakeRetriever([]), FakeLLM("unused")),
    }
    app = create_app(rag=corpus, llm=FakeLLM(PARIS), strategies=strategies, settings=ServeSettings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://selfrag", timeout=20) as c:
        yield c


async def test_query_says_whether_and_why_there_is_no_answer() -> None:
    async with _client() as c:
        ok = await c.post("/query/ok", json={"question": QUESTION})
        down = await c.post("/query/down", json={"question": QUESTION})
        empty = await c.post("/query/empty", json={"question": QUESTION})
    assert ok.status_code == 200 and ok.json()["no_answer"] is None and ok.json()["answer"] == PARIS
    # the LLM failed: an upstream error, not an answer; the whole result comes with it
    assert down.status_code == 502
    body = down.json()
    assert body["error"]["type"] == "no_answer" and body["no_answer"] == "generation_failed"
    assert "the LLM failed" in body["error"]["message"]
    assert body["result"]["answer"] == GENERATION_FAILED_ANSWER
    assert body["result"]["no_answer"] == "generation_failed"
    assert any("ConnectionError" in (e.get("error") or "") for e in body["trace"]["events"])
    # nothing to answer from: the service worked, the answer says so and no_answer why
    assert empty.status_code == 200
    assert empty.json()["answer"] == NOT_ENOUGH_ANSWER and empty.json()["no_answer"] == "no_documents"


async def test_a_streamed_query_without_an_answer_ends_in_an_error_event() -> None:
    async with _client() as c:
        response = await c.post("/query/down", json={"question": QUESTION, "stream": True})
    assert response.status_code == 200  # the headers went before the answer was known
    events = [block for block in response.text.split("\n\n") if block.startswith("event:")]
    last = events[-1].split("\n")
    assert last[0] == "event: error"
    data = json.loads(last[1].removeprefix("data: "))
    assert data["no_answer"] == "generation_failed" and data["result"]["answer"] == GENERATION_FAILED_ANSWER


async def test_the_openai_route_signals_no_answer_in_its_shapes() -> None:
    def ask(model: str) -> dict[str, Any]:
        return {"model": model, "messages": [{"role": "user", "content": QUESTION}]}

    async with _client() as c:
        ok = await c.post("/v1/chat/completions", json=ask("selfrag-ok"))
        down = await c.post("/v1/chat/completions", json=ask("selfrag-down"))
        empty = await c.post("/v1/chat/completions", json=ask("selfrag-empty"))
    assert ok.status_code == 200 and ok.json()["selfrag"]["no_answer"] is None
    assert down.status_code == 502
    error = down.json()["error"]
    assert error["code"] == "no_answer" and error["type"] == "server_error"
    assert down.json()["no_answer"] == "generation_failed"
    assert empty.status_code == 200
    completion = empty.json()
    assert completion["choices"][0]["message"]["content"] == NOT_ENOUGH_ANSWER
    assert completion["selfrag"]["no_answer"] == "no_documents"

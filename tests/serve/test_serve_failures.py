"""Failures inside a query: a hanging backend, an LLM that is down, a bug; the server
answers with the error shape (never a stack trace) and keeps serving."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_helpers import ScriptedLLM, Server, instant, serving, sse_events

from selfrag_core import SelfIRAG, Strategy
from selfrag_core.serve import create_app
from selfrag_core.strategies import SelfHealingRAG
from selfrag_core.testing import FakeLLM, FakeRetriever

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"


class Broken(Strategy[Any]):
    """A strategy with a bug: its plan raises something no fallback expects."""

    def __init__(self) -> None:
        super().__init__(FakeRetriever([]), ScriptedLLM())

    def _plan(self, query: str, context: dict[str, Any]) -> Iterator[Any]:
        raise RuntimeError("secret internal detail")
        yield  # pragma: no cover


def test_only_a_strategy_is_served() -> None:
    class Lookalike:  # a plan and nothing else of a Strategy
        def plan(self, query: str, context: Any = None) -> Iterator[Any]:
            yield from ()

    rag, llm = FakeRetriever([]), ScriptedLLM()
    with pytest.raises(TypeError, match=r"strategies\['mine'\] is a Lookalike, not a Strategy: serve"):
        create_app(rag=rag, llm=llm, strategies={"mine": Lookalike()})  # type: ignore[dict-item]


@pytest.fixture(scope="module")
def failing() -> Iterator[Server]:
    hanging = FakeRetriever(["Paris is the capital of France."], latency=30)
    down = FakeLLM([ConnectionError("LLM endpoint unreachable")])
    strategies = {
        "hanging": SelfIRAG(hanging, ScriptedLLM()),
        "down": SelfHealingRAG(
            down, [FakeRetriever(["Paris is the capital of France."])], execution=instant()
        ),
        "broken": Broken(),
    }
    with serving(hanging, None, strategies, timeout_grace=0.2) as server:
        yield server


def test_a_hanging_backend_is_cut_off_at_timeout_plus_grace(failing: Server) -> None:
    with failing.client() as c:
        start = time.perf_counter()
        response = c.post("/query/hanging", json={"question": QUESTION, "timeout": 0.3})
        assert time.perf_counter() - start < 3
        assert response.status_code == 504
        body = response.json()
        # the engine itself stops the hung retrieval at the deadline, so the partial result comes too
        assert body["error"]["type"] == "query_timeout" and "trace" in body
        assert c.get("/stats").json()["queries"]["active"] == 0


def test_every_attempt_failing_is_502_with_the_trace(failing: Server) -> None:
    with failing.client() as c:
        response = c.get("/query/down", params={"q": QUESTION})
        assert response.status_code == 502
        body = response.json()
        assert (
            body["error"]["type"] == "upstream_error" and "every attempt failed" in body["error"]["message"]
        )
        assert any("ConnectionError" in (e.get("error") or "") for e in body["trace"]["events"])


def test_a_bug_is_500_without_details_and_the_server_keeps_serving(failing: Server) -> None:
    with failing.client() as c:
        response = c.get("/query/broken", params={"q": QUESTION})
        assert response.status_code == 500
        assert response.json() == {
            "error": {
                "type": "internal_error",
                "message": "internal error; the server log has the details",
                "status": 500,
            }
        }
        with c.stream("GET", "/query/broken", params={"q": QUESTION, "stream": "true"}) as streamed:
            events = list(sse_events(streamed.iter_lines))
        assert events[-1][0] == "error" and events[-1][1]["error"]["status"] == 500
        assert "secret" not in response.text and all("secret" not in str(d) for _, d in events)
        assert c.get("/healthz").status_code == 200
        assert c.get("/stats").json()["queries"]["active"] == 0


def test_metadata_filter_reaches_the_backend(client: httpx.Client) -> None:
    docs = [
        {"text": "Lyon is a large city in France.", "source": "lyon", "metadata": {"lang": "fr"}},
        {"text": "Munich is a large city in Germany.", "source": "munich", "metadata": {"lang": "de"}},
    ]
    assert client.post("/documents", json={"documents": docs}).status_code == 200
    try:
        body = client.post(
            "/query/self", json={"question": "Which large city?", "metadata_filter": {"lang": "de"}}
        ).json()
        assert body["sources"] and {s["metadata"]["source"] for s in body["sources"]} == {"munich"}
    finally:
        for doc in docs:
            client.delete(f"/documents/{doc['source']}")

"""Server-sent events: progress, tokens where the LLM streams, the result; disconnects."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from serve_helpers import ANSWER, Echo, ScriptedLLM, Server, instant, make_rag, serving, sse_events

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"


def _stream(client: httpx.Client, method: str, url: str, **kwargs: Any) -> list[tuple[str, dict[str, Any]]]:
    with client.stream(method, url, **kwargs) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(response.iter_lines))


def test_stream_sends_trace_tokens_and_the_result(client: httpx.Client) -> None:
    events = _stream(client, "POST", "/query/stream", json={"question": QUESTION, "stream": True})
    names = [e for e, _ in events]
    assert names[0] == "start" and names[-1] == "result"
    assert "trace" in names and "token" in names
    assert names.index("token") < names.index("result")
    tokens = [d["text"] for e, d in events if e == "token"]
    assert len(tokens) == len(ANSWER.split(" ")) and "".join(tokens).strip() == ANSWER  # word by word
    traced = [d for e, d in events if e == "trace"]
    assert {d["kind"] for d in traced} >= {"retrieval", "llm"}
    result = events[-1][1]
    assert result["answer"] == ANSWER and len(result["trace"]["events"]) == len(traced)
    assert len(result["citations"]) == 2 and all(c["supported_by"] for c in result["citations"])


def test_stream_tokens_of_a_sync_only_llm(client: httpx.Client, server: Server) -> None:
    events = _stream(client, "GET", "/query/syncstream", params={"q": QUESTION, "stream": "true"})
    tokens = [d["text"] for e, d in events if e == "token"]
    assert len(tokens) > 1 and "".join(tokens).strip() == ANSWER and events[-1][0] == "result"
    llm = server.state.strategies["syncstream"].llm
    assert llm.threads and "uvicorn-test" not in llm.threads  # read on a worker thread


@pytest.mark.parametrize("name", ["self", "hyde", "recursive", "healing"])
def test_stream_by_get_sends_the_answer_before_the_result(client: httpx.Client, name: str) -> None:
    events = _stream(client, "GET", f"/query/{name}", params={"q": QUESTION, "stream": "true"})
    names = [e for e, _ in events]
    assert names[0] == "start" and names[-1] == "result" and "trace" in names
    tokens = "".join(d["text"] for e, d in events if e == "token")
    assert tokens.strip() == events[-1][1]["answer"] == ANSWER


def test_stream_ends_with_an_error_event_on_timeout(client: httpx.Client) -> None:
    events = _stream(
        client, "POST", "/query/slow", json={"question": QUESTION, "stream": True, "timeout": 0.1}
    )
    event, data = events[-1]
    assert event == "error"
    assert data["error"]["status"] == 504 and data["error"]["type"] == "query_timeout"
    assert data["trace"]["events"]


def test_stream_refuses_bad_input_with_a_status_not_a_stream(client: httpx.Client) -> None:
    response = client.post("/query/self", json={"question": "", "stream": True})
    assert response.status_code == 400 and response.json()["error"]["type"] == "bad_request"


def test_client_disconnect_mid_stream_cancels_the_query(server: Server, slow_llm: ScriptedLLM) -> None:
    # threshold 1.0: five dependent LLM calls of 0.3 s each if nobody stops it
    payload = {
        "question": QUESTION,
        "stream": True,
        "confidence_threshold": 1.0,
        "max_refinement_iterations": 3,
    }
    calls_before = len(slow_llm.calls)
    with server.client() as c:
        with c.stream("POST", "/query/slow", json=payload) as response:
            for line in response.iter_lines():
                if line.startswith("event: trace"):
                    break  # then hang up
        time.sleep(1.2)
        made = len(slow_llm.calls) - calls_before
        assert made <= 2, made
        queries = c.get("/stats").json()["queries"]
        assert queries["active"] == 0
        assert c.get("/query/self", params={"q": QUESTION}).status_code == 200  # still serving


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_client_disconnect_without_stream_cancels_the_query(
    server: Server, slow_llm: ScriptedLLM, method: str
) -> None:
    # five dependent LLM calls of 0.3 s each if nobody stops it; the client waits 0.4 s
    options = {"confidence_threshold": 1.0, "max_refinement_iterations": 3}
    calls_before = len(slow_llm.calls)
    abandoned = server.state.counters["abandoned"]
    with server.client(timeout=0.4) as c, pytest.raises(httpx.ReadTimeout):
        if method == "GET":
            c.get("/query/slow", params={"q": QUESTION, **options})
        else:
            c.post("/query/slow", json={"question": QUESTION, **options})
    time.sleep(1.2)
    assert len(slow_llm.calls) - calls_before <= 2
    with server.client() as c:
        queries = c.get("/stats").json()["queries"]
        assert queries["active"] == 0 and queries["abandoned"] == abandoned + 1
        assert c.get("/query/self", params={"q": QUESTION}).status_code == 200  # still serving


class RestartingLLM:
    """Streams "Lyon " and breaks on its first call; the retry says something else."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompt: str) -> str:
        return ANSWER

    async def astream(self, prompt: str) -> Any:
        self.calls += 1
        if self.calls == 1:
            yield "Lyon "
            raise ConnectionError("the stream broke")
        for word in ANSWER.split(" "):
            yield word + " "


def test_a_stream_whose_text_was_not_the_answer_sends_a_reset_then_the_answer() -> None:
    rag = make_rag()
    llm = RestartingLLM()
    with serving(rag, llm, {"restart": Echo(rag, llm, execution=instant())}) as server, server.client() as c:
        events = _stream(c, "GET", "/query/restart", params={"q": QUESTION, "stream": "true"})
    names = [e for e, _ in events]
    assert llm.calls == 2 and names[-1] == "result"
    assert names.count("reset") == 1 and "token" in names[: names.index("reset")]  # "Lyon " went out first
    after = "".join(d["text"] for e, d in events[names.index("reset") :] if e == "token")
    assert after.strip() == events[-1][1]["answer"] == ANSWER

"""Steps in the service's stream: a ``step`` event after each ``trace`` event that is a step."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from serve_helpers import sse_events

from selfrag_core import TraceEvent, step_of

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"


def _stream(client: httpx.Client, name: str) -> list[tuple[str, dict[str, Any]]]:
    with client.stream("GET", f"/query/{name}", params={"q": QUESTION, "stream": "true"}) as response:
        assert response.status_code == 200
        return list(sse_events(response.iter_lines))


@pytest.mark.parametrize("name", ["self", "hyde", "recursive", "healing"])
def test_each_step_follows_the_trace_event_it_stands_for(client: httpx.Client, name: str) -> None:
    events = _stream(client, name)
    steps = [(i, d) for i, (e, d) in enumerate(events) if e == "step"]
    assert steps, [e for e, _ in events]
    for i, step in steps:
        event, traced = events[i - 1]
        assert event == "trace" and step["name"] == traced["name"] and step["text"]
    # one per trace event that is a step, in the result's trace order
    trace = events[-1][1]["trace"]["events"]
    expected = [step_of(TraceEvent(**t)) for t in trace]
    assert [(d["kind"], d["name"]) for _, d in steps] == [(s.kind, s.name) for s in expected if s is not None]
    assert "retrieval" in {d["kind"] for _, d in steps}
    tokens = "".join(d["text"] for e, d in events if e == "token")
    assert tokens.strip() == events[-1][1]["answer"]  # the answer as before


def test_the_openai_stream_carries_the_steps_in_chunks_ordinary_clients_ignore(client: httpx.Client) -> None:
    body = {"model": "selfrag-hyde", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    steps = [c for c in chunks if c.get("selfrag", {}).get("event") == "step"]
    assert {c["selfrag"]["data"]["kind"] for c in steps} >= {"hypothesis", "retrieval"}
    assert all(c["choices"][0]["delta"] == {} for c in steps)  # no content: a client that reads deltas
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == client.get("/query/hyde", params={"q": QUESTION}).json()["answer"]

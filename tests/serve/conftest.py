"""Fixtures of the serve tests: one session server with every strategy (see serve_helpers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_helpers import (  # noqa: E402
    Echo,
    ScriptedLLM,
    Server,
    StreamingLLM,
    SyncStreamingLLM,
    instant,
    make_rag,
    serving,
)

from selfrag_core import SelfIRAG  # noqa: E402
from selfrag_core.serve import default_strategies  # noqa: E402


@pytest.fixture(scope="session")
def llm() -> ScriptedLLM:
    return ScriptedLLM()


@pytest.fixture(scope="session")
def slow_llm() -> ScriptedLLM:
    return ScriptedLLM(latency=0.3)


@pytest.fixture(scope="session")
def streaming_llm() -> StreamingLLM:
    return StreamingLLM(latency=0.2)


@pytest.fixture(scope="session")
def server(llm: ScriptedLLM, slow_llm: ScriptedLLM, streaming_llm: StreamingLLM) -> Iterator[Server]:
    """The four default strategies over the embedded store, plus test-only ones:
    ``slow`` (0.3 s per LLM call), ``stream`` and ``syncstream`` (a strategy that streams its
    final answer, with an LLM that streams async / sync only)."""
    rag = make_rag()
    strategies = {
        **default_strategies(rag, llm),
        "slow": SelfIRAG(rag, slow_llm, execution=instant()),
        "stream": Echo(rag, streaming_llm),
        "syncstream": Echo(rag, SyncStreamingLLM()),
    }
    with serving(rag, llm, strategies, max_question_chars=500, max_body_bytes=20_000) as s:
        yield s


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c

"""Helpers of the serve tests: scripted LLMs, the documents, and a real uvicorn server on
127.0.0.1 per app, started in a thread and stopped at teardown."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from selfrag_core import Answer, ExecutionConfig  # noqa: E402
from selfrag_core.engine import Generate, Plan, Retrieve  # noqa: E402
from selfrag_core.serve import ServeSettings, create_app  # noqa: E402
from selfrag_core.strategies.base import Strategy, format_context  # noqa: E402
from selfrag_core.testing import FakeStructuredLLM  # noqa: E402

DOCS = {
    "france.txt": "Paris is the capital of France. The city lies on the river Seine.",
    "germany.txt": "Berlin is the capital of Germany and its largest city.",
    "nile.txt": "The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
}
ANSWER = "Paris is the capital of France. The city lies on the river Seine."
#: one JSON object that every JSON step reads: fast-mode answer and judge, decomposition, claims
JUDGE = json.dumps(
    {
        "answer": ANSWER,
        "relevance": 9,
        "accuracy": 9,
        "completeness": 9,
        "clarity": 9,
        "issues": [],
        "suggestions": [],
        "items": ["What is the capital of France?", "Which river flows through Paris?"],
        "claims": [{"claim": ANSWER, "supported": True}],
    }
)
TOKEN = "s3cret-token"


class ScriptedLLM(FakeStructuredLLM):
    """Plain calls answer ``ANSWER``; JSON calls answer ``JUDGE`` (after ``latency``)."""

    def __init__(self, latency: float = 0.0) -> None:
        super().__init__(ANSWER, latency=latency)

    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> str:
        await super().agenerate_structured(prompt, schema)
        return JUDGE

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> str:
        super().generate_structured(prompt, schema)
        return JUDGE


class StreamingLLM(ScriptedLLM):
    """Also streams plain completions word by word (``astream``)."""

    async def astream(self, prompt: str) -> AsyncIterator[str]:
        call, _ = self._begin(prompt, True, None)
        for word in ANSWER.split(" "):
            await asyncio.sleep(self.latency / 10)
            yield word + " "
        call.end = time.perf_counter()


class SyncStreamingLLM:
    """A sync-only LLM with ``stream(prompt)`` (like the local llama.cpp model)."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def generate(self, prompt: str) -> str:
        return ANSWER

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> str:
        return JUDGE

    def stream(self, prompt: str) -> Iterator[str]:
        self.threads.append(threading.current_thread().name)
        yield from (word + " " for word in ANSWER.split(" "))


class Echo(Strategy[Answer]):
    """Retrieve, then answer in one LLM call whose text is the streamed final answer."""

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        docs = yield Retrieve(self.rag_system, query, 3)
        reply = yield Generate(self.llm, f"{format_context(docs)}\n\n{query}", "answer", stream=True)
        return Answer(reply.text.strip(), docs)


class Server:
    """uvicorn serving ``app`` on a free loopback port, in a daemon thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    @property
    def state(self) -> Any:
        return self.app.state.service

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, **{"timeout": 20, **kwargs})


def make_rag(index_dir: Path | None = None) -> Any:
    from selfrag_core.store import RAG

    rag = RAG("hashing", path=index_dir)
    for source, text in DOCS.items():
        rag.index(text, source=source)
    return rag


@contextmanager
def serving(
    rag: Any, llm: Any, strategies: dict[str, Any] | None = None, **settings: Any
) -> Iterator[Server]:
    app = create_app(rag=rag, llm=llm, strategies=strategies, settings=ServeSettings(**settings))
    with Server(app) as server:
        yield server


def instant() -> ExecutionConfig:
    async def no_sleep(_: float) -> None:
        return None

    return ExecutionConfig(sleep=lambda _: None, async_sleep=no_sleep)


def sse_events(lines: Callable[[], Iterator[str]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs from a server-sent-event line stream."""
    event = "message"
    for line in lines():
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            yield event, json.loads(line[len("data: ") :])

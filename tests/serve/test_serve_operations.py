"""Operations: readiness (/readyz), Prometheus metrics (/metrics) and graceful shutdown,
on in-process apps (httpx's ASGITransport; the lifespan driven as a server drives it)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from serve_helpers import TOKEN, make_rag  # noqa: E402

from selfrag_core import Answer  # noqa: E402
from selfrag_core.engine import Generate, Note, Plan, Retrieve  # noqa: E402
from selfrag_core.errors import ConfigurationError, LLMCallError, MissingDependencyError  # noqa: E402
from selfrag_core.protocols import LLMOutput  # noqa: E402
from selfrag_core.serve import ServeSettings, create_app  # noqa: E402
from selfrag_core.serve import server as serve_server  # noqa: E402
from selfrag_core.serve.settings import METRICS_ENV  # noqa: E402
from selfrag_core.strategies.base import Strategy, format_context  # noqa: E402
from selfrag_core.testing import FakeLLM, FakeRetriever  # noqa: E402

DOCS = ["Paris is the capital of France.", "Berlin is the capital of Germany."]
QUESTION = "What is the capital of France?"


class Answerer(Strategy[Answer]):
    """Retrieve, then answer in one call; a failed call falls back to the best document."""

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        docs = yield Retrieve(self.rag_system, query, 2)
        try:
            reply = yield Generate(self.llm, f"{format_context(docs)}\n\n{query}", "answer", retries=1)
        except LLMCallError as e:
            yield Note("generation_failed", f"{type(e).__name__}: {e}")
            return Answer(docs[0].text if docs else "", docs)
        return Answer(reply.text.strip(), docs)


class TokenLLM(FakeLLM):
    """Reports 7 input and 3 output tokens per answer."""

    async def agenerate(self, prompt: str) -> LLMOutput:  # type: ignore[override]
        return LLMOutput(await super().agenerate(prompt), input_tokens=7, output_tokens=3)


class PingLLM(FakeLLM):
    """A FakeLLM with ``aping`` (counted; raises ``ping_error`` when set)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pings = 0
        self.ping_error: BaseException | None = None

    async def aping(self) -> None:
        self.pings += 1
        if self.ping_error is not None:
            raise self.ping_error


def _app(rag: Any = None, llm: Any = None, strategies: dict[str, Any] | None = None, **settings: Any) -> Any:
    rag = FakeRetriever(list(DOCS)) if rag is None else rag
    llm = FakeLLM("Paris.") if llm is None else llm
    strategies = strategies or {"answer": Answerer(rag, llm)}
    return create_app(rag=rag, llm=llm, strategies=strategies, settings=ServeSettings(**settings))


@asynccontextmanager
async def _client(app: Any) -> AsyncIterator[Any]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://selfrag", timeout=20) as c:
        yield c


@asynccontextmanager
async def _lifespan(app: Any) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """The app's ASGI lifespan, started as a server starts it; yields ``stop`` (what a
    server does on SIGTERM once it stops accepting connections)."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(message: dict[str, Any]) -> None:
        await outbox.put(message)

    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
    task = asyncio.create_task(app(scope, inbox.get, send))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"

    async def stop() -> None:
        await inbox.put({"type": "lifespan.shutdown"})
        assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
        await task

    try:
        yield stop
    finally:
        if not task.done():
            await stop()


# ---------------------------------------------------------------------- readiness


async def test_readyz_is_ready_when_the_backend_and_the_llm_answer() -> None:
    llm = PingLLM("Paris.")
    async with _client(_app(llm=llm)) as c:
        r = await c.get("/readyz")
        assert r.status_code == 200
        assert r.json() == {"status": "ready", "checks": {"backend": "ok", "llm": "ok"}}
    assert llm.pings == 1 and llm.n_calls == 0  # a ping, never a generation


async def test_an_llm_without_ping_is_unchecked_and_an_empty_backend_is_ready() -> None:
    rag, llm = FakeRetriever(), FakeLLM("Paris.")
    async with _client(_app(rag=rag, llm=llm)) as c:
        r = await c.get("/readyz")
    assert r.status_code == 200
    assert r.json() == {"status": "ready", "checks": {"backend": "ok", "llm": "unchecked"}}
    assert rag.queries and llm.n_calls == 0


async def test_a_failing_backend_is_not_ready_and_says_why() -> None:
    rag = FakeRetriever(list(DOCS), fail=ConnectionError("index server refused the connection"))
    async with _client(_app(rag=rag, llm=PingLLM())) as c:
        r = await c.get("/readyz")
        assert (await c.get("/healthz")).status_code == 200  # alive all the same
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "not_ready"
    assert body["checks"] == {"backend": "failed", "llm": "ok"}
    assert "refused the connection" in body["errors"]["backend"]
    assert set(body["errors"]) == {"backend"}


async def test_a_backend_hanging_past_readiness_timeout_is_not_ready() -> None:
    rag = FakeRetriever(list(DOCS), latency=5.0)
    async with _client(_app(rag=rag, readiness_timeout=0.2)) as c:
        started = time.monotonic()
        r = await c.get("/readyz")
        took = time.monotonic() - started
    assert r.status_code == 503 and took < 2.0
    assert r.json()["checks"]["backend"] == "failed"
    assert "0.2s" in r.json()["errors"]["backend"] and "readiness_timeout" in r.json()["errors"]["backend"]


async def test_a_failing_llm_ping_is_not_ready() -> None:
    llm = PingLLM()
    llm.ping_error = ConfigurationError("the LLM server rejected the API key; set OPENAI_API_KEY")
    async with _client(_app(llm=llm)) as c:
        r = await c.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"] == {"backend": "ok", "llm": "failed"}
    assert "OPENAI_API_KEY" in r.json()["errors"]["llm"]


async def test_a_sync_ping_runs_in_a_thread_and_false_is_not_ready() -> None:
    class SyncPing(FakeLLM):
        def ping(self) -> bool:
            return False

    async with _client(_app(llm=SyncPing())) as c:
        r = await c.get("/readyz")
    assert r.status_code == 503 and "ping() answered False" in r.json()["errors"]["llm"]


async def test_probes_are_cached_for_a_second() -> None:
    rag, llm = FakeRetriever(list(DOCS)), PingLLM()
    app = _app(rag=rag, llm=llm)
    now = [1000.0]
    app.state.service.readiness.clock = lambda: now[0]
    async with _client(app) as c:
        answers = await asyncio.gather(*(c.get("/readyz") for _ in range(20)))
        assert {r.status_code for r in answers} == {200}
        assert len(rag.queries) == 1 and llm.pings == 1  # one probe for all of them
        rag.fail = ConnectionError("backend down")
        now[0] += 0.5
        assert (await c.get("/readyz")).status_code == 200  # still the cached outcome
        now[0] += 0.6
        assert (await c.get("/readyz")).status_code == 503  # probed again
        assert len(rag.queries) == 2 and llm.pings == 2


async def test_readyz_is_public_and_metrics_need_the_token() -> None:
    async with _client(_app(api_token=TOKEN, metrics=True)) as c:
        assert (await c.get("/readyz")).status_code == 200
        assert (await c.get("/metrics")).status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert (await c.get("/metrics", headers=auth)).status_code == 200


async def test_openai_compatible_llm_pings_with_a_models_list() -> None:
    pytest.importorskip("openai")
    from selfrag_core.openai_llm import OpenAICompatibleLLM

    class Models:
        calls = 0

        async def _list(self) -> list[str]:
            Models.calls += 1
            return ["m"]

        def list(self) -> Awaitable[list[str]]:
            return self._list()

    client = argparse.Namespace(models=Models())
    llm = OpenAICompatibleLLM("m", base_url="http://127.0.0.1:9/v1", async_client=client)
    async with _client(_app(llm=llm)) as c:
        r = await c.get("/readyz")
    assert r.json()["checks"]["llm"] == "ok" and Models.calls == 1


# ---------------------------------------------------------------------- metrics


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _get(samples: dict[Any, float], metric: str, **labels: str) -> float | None:
    return samples.get((metric, frozenset(labels.items())))


async def test_metrics_are_off_by_default() -> None:
    async with _client(_app()) as c:
        assert (await c.get("/metrics")).status_code == 404


async def test_metrics_count_queries_fallbacks_errors_tokens_and_documents() -> None:
    pytest.importorskip("prometheus_client")
    rag = make_rag()
    llm = TokenLLM({"fallback": ConnectionError("LLM server down")}, default="Paris.")
    broken = FakeRetriever(fail=ConnectionError("index offline"))
    strategies = {"answer": Answerer(rag, llm), "broken": Answerer(broken, llm)}
    app = _app(rag=rag, llm=llm, strategies=strategies, metrics=True)
    async with _client(app) as c:
        ok = await c.post("/query/answer", json={"question": QUESTION})
        fell_back = await c.post("/query/answer", json={"question": f"{QUESTION} fallback"})
        failed = await c.post("/query/broken", json={"question": QUESTION})
        added = await c.post(
            "/documents", json={"documents": [{"text": "Rome is in Italy.", "source": "rome.txt"}]}
        )
        deleted = await c.delete("/documents/rome.txt")
        metrics = await c.get("/metrics")
    assert (ok.status_code, fell_back.status_code, failed.status_code) == (200, 200, 502)
    assert added.status_code == 200 and deleted.status_code == 200
    assert [e["name"] for e in fell_back.json()["trace"]["events"] if e["kind"] == "fallback"] == [
        "generation_failed"
    ]
    assert metrics.headers["content-type"].startswith("text/plain")
    m = _samples(metrics.text)
    assert _get(m, "selfrag_requests_total", strategy="answer", status="200") == 2
    assert _get(m, "selfrag_requests_total", strategy="broken", status="502") == 1
    assert _get(m, "selfrag_request_seconds_count", strategy="answer") == 2
    assert _get(m, "selfrag_request_seconds_bucket", strategy="answer", le="+Inf") == 2
    assert (
        len([k for k in m if k[0] == "selfrag_request_seconds_bucket" and ("strategy", "answer") in k[1]]) > 5
    )
    calls = ok.json()["trace"]["llm_calls"] + fell_back.json()["trace"]["llm_calls"]
    assert calls == 3  # one answer, then the fallback's call and its retry
    assert _get(m, "selfrag_llm_calls_total", strategy="answer") == calls
    assert _get(m, "selfrag_llm_tokens_total", strategy="answer", kind="input") == 7
    assert _get(m, "selfrag_llm_tokens_total", strategy="answer", kind="output") == 3
    assert _get(m, "selfrag_fallbacks_total", strategy="answer", name="generation_failed") == 1
    assert _get(m, "selfrag_errors_total", strategy="broken", type="RetrievalError") == 1
    assert _get(m, "selfrag_errors_total", strategy="answer", type="RetrievalError") is None
    assert _get(m, "selfrag_documents_total", op="add") == 1
    assert _get(m, "selfrag_documents_total", op="delete") == 1


async def test_streamed_and_refused_queries_are_counted() -> None:
    pytest.importorskip("prometheus_client")
    app = _app(metrics=True)
    async with _client(app) as c:
        streamed = await c.post("/query/answer", json={"question": QUESTION, "stream": True})
        refused = await c.post("/query/answer", json={"question": QUESTION, "top_k": 10_000})
        m = _samples((await c.get("/metrics")).text)
    assert streamed.status_code == 200 and "event: result" in streamed.text
    assert refused.status_code == 422
    assert _get(m, "selfrag_requests_total", strategy="answer", status="200") == 1
    assert _get(m, "selfrag_requests_total", strategy="answer", status="422") == 1
    assert _get(m, "selfrag_request_seconds_count", strategy="answer") == 1  # only the one that ran
    assert _get(m, "selfrag_llm_calls_total", strategy="answer") == 1


async def test_each_app_has_its_own_registry() -> None:
    pytest.importorskip("prometheus_client")
    first, second = _app(metrics=True), _app(metrics=True)  # no "duplicated timeseries"
    async with _client(first) as a, _client(second) as b:
        assert (await a.post("/query/answer", json={"question": QUESTION})).status_code == 200
        one, two = _samples((await a.get("/metrics")).text), _samples((await b.get("/metrics")).text)
    assert _get(one, "selfrag_requests_total", strategy="answer", status="200") == 1
    assert _get(two, "selfrag_requests_total", strategy="answer", status="200") is None


def test_metrics_without_prometheus_client_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'selfrag\[metrics\]'"):
        _app(metrics=True)
    _app()  # off: not needed


def test_metrics_setting_from_the_environment_and_the_command_line() -> None:
    assert ServeSettings.from_env({}).metrics is False
    assert ServeSettings.from_env({METRICS_ENV: "1"}).metrics is True
    assert ServeSettings.from_env({METRICS_ENV: " off "}).metrics is False
    assert ServeSettings.from_env({METRICS_ENV: "1"}, metrics=False).metrics is False
    with pytest.raises(ConfigurationError, match=METRICS_ENV):
        ServeSettings.from_env({METRICS_ENV: "maybe"})
    parser = argparse.ArgumentParser()
    serve_server.add_arguments(parser)
    assert serve_server.settings_from_args(parser.parse_args(["--metrics"])).metrics is True
    assert serve_server.settings_from_args(parser.parse_args([])).metrics is False


@pytest.mark.parametrize("field", ["readiness_timeout", "shutdown_grace_s"])
def test_operation_settings_are_validated(field: str) -> None:
    with pytest.raises(ConfigurationError, match=field):
        ServeSettings(**{field: -1.0})


# ---------------------------------------------------------------------- shutdown


async def test_shutdown_turns_readyz_away_while_queries_in_flight_finish() -> None:
    rag, slow = FakeRetriever(list(DOCS)), FakeLLM("Paris.", latency=0.5)
    app = _app(rag=rag, llm=slow, strategies={"slow": Answerer(rag, slow)})
    state = app.state.service
    async with _lifespan(app) as stop, _client(app) as c:
        assert (await c.get("/readyz")).status_code == 200
        query = asyncio.create_task(c.post("/query/slow", json={"question": QUESTION}))
        while not slow.calls:  # the query is waiting on the LLM
            await asyncio.sleep(0.01)
        stopping = asyncio.create_task(stop())
        await asyncio.sleep(0.05)
        ready = await c.get("/readyz")
        assert (ready.status_code, ready.json()) == (503, {"status": "shutting_down"})
        refused = await c.post("/query/slow", json={"question": QUESTION})
        assert refused.status_code == 503 and "shutting down" in refused.json()["error"]["message"]
        assert not stopping.done()  # the lifespan waits for the query in flight
        answered = await query
        assert answered.status_code == 200 and answered.json()["answer"] == "Paris."
        await asyncio.wait_for(stopping, 5)
    assert state.active == 0 and slow.n_calls == 1


async def test_shutdown_waits_no_longer_than_the_grace() -> None:
    rag, stuck = FakeRetriever(list(DOCS)), FakeLLM("Paris.", latency=30)
    app = _app(rag=rag, llm=stuck, strategies={"stuck": Answerer(rag, stuck)}, shutdown_grace_s=0.2)
    async with _lifespan(app) as stop, _client(app) as c:
        query = asyncio.create_task(c.post("/query/stuck", json={"question": QUESTION}))
        while not stuck.calls:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        await stop()
        assert time.monotonic() - started < 2
        query.cancel()


def test_serve_forever_gives_uvicorn_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    fake = argparse.Namespace(run=lambda app, **kw: seen.update(kw))
    monkeypatch.setattr(serve_server, "_uvicorn", lambda: fake)
    monkeypatch.setattr(serve_server, "freeze_startup_objects", lambda: None)
    serve_server.serve_forever(_app(shutdown_grace_s=12.0), "127.0.0.1", 8000)
    assert seen["timeout_graceful_shutdown"] == 12

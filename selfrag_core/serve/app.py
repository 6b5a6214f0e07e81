"""The ASGI app: the strategies, ingestion and stats over HTTP.

:func:`create_app` keeps everything the app uses in ``app.state`` (no globals), so tests
and replicas each build their own. Queries run on the event loop with the strategies'
async path; a query's events reach a streaming client as server-sent events. Only the
queries that can be expected to finish within their timeout are admitted (the rest get 503
and Retry-After at once: ``serve.admission``). On shutdown
(the ASGI lifespan) the app stops taking queries, /readyz answers 503 ``shutting_down``,
and the queries in flight get ``settings.shutdown_grace_s`` seconds to finish.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from selfrag_core.errors import MissingDependencyError

try:
    from fastapi import FastAPI, Query, Request
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(f"selfrag serve needs FastAPI ({e}): pip install 'selfrag[serve]'") from e
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from selfrag_core.errors import ConfigurationError, RAGSystemError, StrategyError
from selfrag_core.otel import configure_otlp, emit_spans
from selfrag_core.serve.admission import Admission, declared_concurrency
from selfrag_core.serve.documents import DocumentError, DocumentStore, UnsupportedError, check_text
from selfrag_core.serve.errors import CONFIGURATION_ERROR, INTERNAL_ERROR, error_body, error_response
from selfrag_core.serve.execution import Outcome, execute, prepare
from selfrag_core.serve.metrics import ServiceMetrics
from selfrag_core.serve.middleware import GuardMiddleware
from selfrag_core.serve.models import (
    DeleteResponse,
    DocumentBatch,
    DocumentIn,
    ErrorResponse,
    HealthResponse,
    IngestResponse,
    QueryParams,
    QueryRequest,
    QueryResponse,
    ReadyResponse,
    StatsResponse,
)
from selfrag_core.serve.readiness import ReadinessProbe
from selfrag_core.serve.responses import FastJSONResponse, dumps
from selfrag_core.serve.settings import TOKEN_ENV, ServeSettings
from selfrag_core.strategies.base import Strategy
from selfrag_core.types import NO_ANSWER_REASONS, Trace
from selfrag_core.validation import check_verifier, validate_query

logger = logging.getLogger("selfrag.serve")

T = TypeVar("T")
_Events = asyncio.Queue[tuple[str, dict[str, Any]] | None]  # a query's events, None at its end
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 404, 413, 422, 500, 502, 503, 504)
}


class Reply:
    """How a query is answered: the service's JSON and server-sent events. The OpenAI
    routes answer in OpenAI's shapes with a subclass (``serve.openai_api.ChatReply``);
    ``context`` joins the query's context (a conversation's ``memory``)."""

    context: Mapping[str, Any] = {}

    def json(self, status: int, content: dict[str, Any]) -> Response:
        return FastJSONResponse(content, status_code=status)

    def events(self, event: str, data: dict[str, Any]) -> Iterable[str]:
        return (f"event: {event}\ndata: {dumps(data).decode()}\n\n",)


SERVICE_REPLY = Reply()


class ApiError(Exception):
    """An error answered with the service's JSON error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
        cause: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.headers = status, message, type_, headers
        self.extra = extra or {}
        self.cause = cause  # the type of the error that failed a query (for the metrics)


@dataclass
class ServiceState:
    """Everything the app uses, kept in ``app.state.service``."""

    rag: Any
    llm: Any
    strategies: dict[str, Strategy[Any]]
    settings: ServeSettings
    store: DocumentStore
    counters: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("served", "rejected", "exceeded", "failed", "abandoned"), 0)
    )
    shutting_down: bool = False
    readiness: ReadinessProbe = field(init=False)
    metrics: ServiceMetrics | None = field(init=False)
    admission: Admission = field(init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        concurrency = settings.query_concurrency or declared_concurrency(self.llm)
        self.admission = Admission(
            settings.max_concurrent_queries,
            concurrency=concurrency,
            measured=settings.admission_control,
            memory_s=max(settings.query_timeout or 60.0, 10.0),
            retry_after_s=settings.retry_after_s,
        )
        self.readiness = ReadinessProbe(self.rag, self.llm, timeout=self.settings.readiness_timeout)
        self.metrics = ServiceMetrics() if self.settings.metrics else None
        if self.settings.otel:
            configure_otlp()  # unless the application set a tracer provider already

    @property
    def active(self) -> int:
        """Queries in flight."""
        return self.admission.active

    async def drain(self) -> None:
        """Stop taking queries and give those in flight ``shutdown_grace_s`` seconds to finish."""
        self.shutting_down = True
        if self.active:
            logger.info("shutting down: waiting for %d queries in flight", self.active)
        deadline = time.monotonic() + self.settings.shutdown_grace_s
        while self.active > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self.active:
            logger.warning(
                "shutting down with %d queries still running after shutdown_grace_s=%ss",
                self.active, self.settings.shutdown_grace_s,
            )  # fmt: skip


def create_app(
    *,
    rag: Any,
    llm: Any,
    strategies: Mapping[str, Strategy[Any]] | None = None,
    settings: ServeSettings | None = None,
    verifier: Any = None,
) -> FastAPI:
    """The service over ``rag`` (the backend) and ``llm``.

    ``strategies`` maps URL names to strategies, ``Strategy`` instances (default: ``plain``,
    a ``PlainRAG``, and ``default_strategies(rag, llm)``; anything else is a TypeError).
    ``verifier`` (a :class:`~selfrag_core.verify.Verifier`; None: the LLM-free default) is
    the default strategies' verifier; strategies you pass carry their own in their configs,
    so giving both is a ConfigurationError.
    ``settings`` defaults to ``ServeSettings.from_env()``, as for ``selfrag serve``
    (``SELFRAG_API_TOKEN`` guards every endpoint but /healthz and /readyz); settings passed
    explicitly are used as given. Without a token the app is open, and logs so.
    """
    if settings is None:
        settings = ServeSettings.from_env()
    elif settings.api_token is None and os.environ.get(TOKEN_ENV, "").strip():
        logger.warning(
            "%s is set but the settings given to create_app have no api_token, so the app is open; "
            "build them with ServeSettings.from_env(...) to require the token",
            TOKEN_ENV,
        )
    check_verifier(verifier)
    if strategies is not None and verifier is not None:
        raise ConfigurationError(
            "create_app(verifier=...) sets the default strategies' verifier; the strategies passed "
            "carry their own: build them with config=...Config(verifier=...) (or build_strategy(..., "
            "verifier=...)) and leave verifier out"
        )
    if strategies is None:
        from selfrag_core.config import PlainRAGConfig
        from selfrag_core.presets import BASELINE, default_strategies
        from selfrag_core.strategies import PlainRAG

        # plain (one retrieval, one answer) beside the four, as `selfrag ask` and `eval` have it
        plain = PlainRAG(rag, llm, config=PlainRAGConfig(verifier=verifier))
        strategies = {BASELINE: plain, **default_strategies(rag, llm, verifier=verifier)}
    if not strategies:
        raise ConfigurationError("no strategies to serve: pass strategies={'self': SelfIRAG(rag, llm)}")
    for name, strategy in strategies.items():
        if not isinstance(strategy, Strategy):
            raise TypeError(
                f"strategies[{name!r}] is a {type(strategy).__name__}, not a Strategy: serve SelfIRAG, "
                "HyDERAG, RecursiveRAG, SelfHealingRAG, PlainRAG or a Strategy subclass of yours"
            )
    state = ServiceState(rag, llm, dict(strategies), settings, DocumentStore(rag, settings.index_dir))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await state.drain()

    app = FastAPI(
        title="selfrag",
        summary="Self-improving retrieval-augmented generation as a service",
        version="0.1.0",
        responses=_ERRORS,
        default_response_class=FastJSONResponse,
        lifespan=lifespan,
    )
    app.state.service = state
    _install_errors(app)
    app.add_middleware(GuardMiddleware, settings=settings)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    for name in state.strategies:
        _add_query_routes(app, state, name)
    _add_routes(app, state)
    from selfrag_core.serve.openai_api import add_openai_routes  # it imports this module

    add_openai_routes(app, state)
    return app


def _add_query_routes(app: FastAPI, state: ServiceState, name: str) -> None:
    kind = type(state.strategies[name]).__name__
    about = (
        f"Answer with {kind}. With `stream` the answer comes as server-sent events: `start`, `trace` "
        "(each LLM call and retrieval as it ends), `step` (after its `trace` event, when it is a step: "
        "a retrieval, a hypothetical passage, a sub-question, a verdict, an attempt or a fallback, with "
        "`kind`, `name`, `detail`, `text` and `error`), `token` (the final answer's text: piece by piece "
        "where the strategy and the LLM stream it, else whole), `reset` (only when the text sent was not the "
        "answer: drop it, the answer follows whole), then `result` (authoritative) or `error`."
    )

    async def get_query(request: Request, params: Annotated[QueryParams, Query()]) -> Response:
        options = params.model_dump(exclude={"q"}, exclude_none=True)
        body = QueryRequest.model_validate({"question": params.q, **options})
        return await _answer(state, name, body, request)

    async def post_query(request: Request, body: QueryRequest) -> Response:
        return await _answer(state, name, body, request)

    for method, endpoint in (("GET", get_query), ("POST", post_query)):
        app.add_api_route(
            f"/query/{name}", endpoint, methods=[method], response_model=QueryResponse,
            tags=["query"], summary=f"Ask {kind}", description=about,
        )  # fmt: skip


async def _answer(
    state: ServiceState, name: str, body: QueryRequest, request: Request, reply: Reply = SERVICE_REPLY
) -> Response:
    try:
        return await _run_query(state, name, body, request, reply)
    except ApiError as e:  # refused before it ran (bad option, busy, shutting down)
        if state.metrics is not None:
            state.metrics.query(name, e.status)
        raise


async def _run_query(
    state: ServiceState, name: str, body: QueryRequest, request: Request, reply: Reply
) -> Response:
    started = time.perf_counter()
    settings = state.settings
    try:
        question = validate_query(body.question, name="question", max_chars=settings.max_question_chars)
    except (TypeError, ValueError) as e:
        raise ApiError(400, str(e)) from e
    if body.top_k is not None and body.top_k > settings.max_top_k:
        raise ApiError(422, f"top_k is {body.top_k}; this server allows at most {settings.max_top_k}")
    events: _Events = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def push(event: str, data: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (event, data))

    try:
        strategy, execution = prepare(state.strategies[name], body, settings)
    except ConfigurationError as e:
        raise ApiError(422, str(e)) from e
    if state.shutting_down:
        raise ApiError(
            503,
            "the server is shutting down; retry (another replica will answer)",
            headers={"Retry-After": str(settings.retry_after_s)},
        )
    await state.store.sync()  # what another worker saved since
    timeout = execution.query_timeout
    refusal = state.admission.admit(timeout)
    if refusal is not None:
        state.counters["rejected"] += 1
        raise ApiError(503, refusal.message, headers={"Retry-After": str(refusal.retry_after_s)})
    traces: list[Trace] = []  # the query's trace, kept even when the query raises
    admitted = time.monotonic()
    measures = [False]  # whether the query ran to its end: a measure of the service time

    async def query() -> Outcome | ApiError:
        """The query once it has its turn (``Admission.turn``), within what is left of its
        timeout; refused with 503 when its wait left too little of it (a late estimate)."""
        waited = await state.admission.turn()
        try:
            run_as = execution
            if waited and timeout is not None:  # the wait for its turn counts against its timeout
                left = timeout - (time.monotonic() - admitted)
                late = _late(state, left)
                if late is not None:
                    return late
                run_as = dataclasses.replace(execution, query_timeout=left)
            return await _guarded(
                execute(
                    strategy, question, body, run_as, settings, push if body.stream else None,
                    on_trace=traces.append, context=reply.context,
                )
            )  # fmt: skip
        finally:
            state.admission.done_running()

    def finish(outcome: Outcome | ApiError | BaseException | None) -> tuple[int, dict[str, Any]]:
        """The reply, and the query counted once in the stats and the metrics."""
        measures[0] = not (
            outcome is None
            or (isinstance(outcome, ApiError) and outcome.status == 503)
            or (isinstance(outcome, Outcome) and outcome.exceeded == "query_timeout")
        )
        if isinstance(outcome, BaseException) and not isinstance(outcome, ApiError):
            status, content, error = 500, error_body(500, INTERNAL_ERROR), type(outcome).__name__
        elif outcome is None:  # nobody is waiting for the answer
            state.counters["abandoned"] += 1
            status, content, error = 499, {}, None
        elif isinstance(outcome, ApiError):
            state.counters["rejected" if outcome.status == 503 else "failed"] += 1
            status, error = outcome.status, outcome.cause
            content = error_body(status, outcome.message, outcome.type, **outcome.extra)
        elif outcome.exceeded is not None:
            state.counters["exceeded"] += 1
            status, error = 504, outcome.exceeded
            content = error_body(504, outcome.message(execution), error, trace=outcome.trace.to_dict())
            if outcome.result is not None:
                content["result"] = outcome.result.to_dict()
        else:
            status, content, error = no_answer_reply(outcome.result.to_dict())
            state.counters["served" if status == 200 else "failed"] += 1
        if state.metrics is not None:
            seconds = time.perf_counter() - started
            state.metrics.query(name, status, seconds, traces[0] if traces else None, error)
        if state.settings.otel and traces:
            emit_spans(traces[0], attributes={"strategy": name, "status": status})
        return status, content

    if not body.stream:
        try:
            outcome = await _unless_disconnected(request, query())
            status, content = finish(outcome)
        except Exception as e:  # answered as a 500 by the middleware
            finish(e)
            raise
        finally:
            state.admission.release(timeout, finished=measures[0])
        if outcome is None:
            return Response(status_code=499)
        response = reply.json(status, content)
        if isinstance(outcome, ApiError) and outcome.headers:
            response.headers.update(outcome.headers)
        return response

    async def produce() -> None:
        push("start", {"strategy": name, "question": question})
        try:
            try:
                status, content = finish(await query())
            except Exception as e:  # headers are sent: the error goes in the stream
                logger.error("streamed query failed: %s: %s", type(e).__name__, e, exc_info=e)
                status, content = finish(e)
            push("result" if status == 200 else "error", content)
        finally:
            loop.call_soon_threadsafe(events.put_nowait, None)

    task = asyncio.create_task(produce())
    # even if cancelled before it ran
    task.add_done_callback(lambda _: state.admission.release(timeout, finished=measures[0]))
    return StreamingResponse(
        _sse(events, task, reply),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _late(state: ServiceState, left: float) -> ApiError | None:
    """The 503 of a query whose wait for its turn left less of its timeout than a query
    takes (the service time grew while it waited), or None: it runs."""
    admission = state.admission
    per = admission.service_s() if admission.measured else None
    if per is None and left > 0:
        return None
    needs = 0.0 if per is None else per * min(admission.concurrency, max(1, admission.running))
    if left > needs:
        return None
    per = per or 0.0
    retry = max(1, state.settings.retry_after_s, math.ceil(admission.active * per))
    return ApiError(
        503,
        f"the query waited its turn until {max(left, 0):.2g}s of its timeout were left, less than the "
        f"about {needs:.2g}s a query takes here; retry in {retry}s",
        headers={"Retry-After": str(retry)},
        extra={"retry_after_s": retry},
    )


#: the reasons for no answer (``Result.no_answer``) that are an upstream failure, answered
#: as a 502 with the result: the LLM or the backend failed (a timeout or a used-up budget is
#: a 504 already); the other reasons (no documents, unusable replies) are a 200 whose
#: ``no_answer`` says why
UPSTREAM_NO_ANSWERS = frozenset({"generation_failed", "retrieval_failed"})


def no_answer_reply(result: dict[str, Any]) -> tuple[int, dict[str, Any], str | None]:
    """A finished result's status, body and error: 200 and the result, or, when the LLM
    or the backend failed so that there is no answer, 502 with the error type
    ``no_answer``, ``no_answer`` (the reason) and the whole ``result`` (its fallback answer
    and trace)."""
    reason = result.get("no_answer")
    if reason not in UPSTREAM_NO_ANSWERS:
        return 200, result, None
    message = f"no answer: {NO_ANSWER_REASONS[reason]}; the trace says what failed"
    body = error_body(502, message, "no_answer", no_answer=reason, trace=result.get("trace"), result=result)
    return 502, body, reason


async def _unless_disconnected(request: Request, query: Awaitable[T]) -> T | None:
    """``query``'s value, or None once the client has gone away (the query is then
    cancelled). The body is read already, so the next message is the disconnect."""
    task = asyncio.ensure_future(query)

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        task.cancel()
        logger.info("client went away; query cancelled")

    watcher = asyncio.create_task(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if watcher.done() and not watcher.cancelled():
            return None  # cancelled by the watcher, not by the server
        raise
    finally:
        watcher.cancel()


async def _guarded(query: Awaitable[Outcome]) -> Outcome | ApiError:
    """The outcome, or the error a failed query is answered with (never a stack trace)."""
    try:
        return await query
    except ConfigurationError as e:
        return _misconfigured(e)
    except RAGSystemError as e:
        logger.warning("query failed: %s: %s", type(e).__name__, e)
        report = e.report if isinstance(e, StrategyError) else None
        extra = {"trace": report.trace.to_dict()} if report is not None else {}
        return ApiError(502, f"{type(e).__name__}: {e}", extra=extra, cause=type(e).__name__)


def _misconfigured(e: ConfigurationError) -> ApiError:
    """A ConfigurationError escaping a request (the server's setup is at fault): its message,
    for the operator, goes to the client with its own error type and to the log once."""
    logger.error("the server is misconfigured: %s", e, exc_info=e)
    component = e.component
    return ApiError(
        500,
        f"{type(e).__name__}: {e}",
        CONFIGURATION_ERROR,
        extra={"component": component} if component else {},
        cause=type(e).__name__,
    )


async def _sse(events: _Events, task: asyncio.Task[None], reply: Reply) -> AsyncIterator[str]:
    """Server-sent events until the query ends; a client going away cancels the query."""
    try:
        while (item := await events.get()) is not None:
            for text in reply.events(*item):
                yield text
    finally:
        if not task.done():
            task.cancel()
            logger.info("client went away mid-stream; query cancelled")


def _add_routes(app: FastAPI, state: ServiceState) -> None:
    @app.api_route("/query/{strategy}", methods=["GET", "POST"], include_in_schema=False)
    async def unknown_strategy(strategy: str) -> Response:
        known = ", ".join(sorted(state.strategies))
        raise ApiError(404, f"unknown strategy {strategy!r}; this server has: {known}", "unknown_strategy")

    @app.get("/healthz", response_model=HealthResponse, tags=["service"])
    async def healthz() -> HealthResponse:
        return HealthResponse(status="ok", strategies=sorted(state.strategies), documents=state.store.count())

    @app.get(
        "/readyz",
        response_model=ReadyResponse,
        tags=["service"],
        responses={503: {"model": ReadyResponse, "description": "Not ready, or shutting down"}},
    )
    async def readyz() -> Response:
        """Readiness: 200 when the backend answers a ``top_k=1`` retrieval and the LLM its
        ping (``unchecked`` when it has none) within ``readiness_timeout``; 503 with the
        failing check and its error otherwise, or ``shutting_down`` once shutdown began.
        Probes are cached for a second. Liveness is /healthz."""
        headers = {"Cache-Control": "no-store"}
        if not state.shutting_down:
            readiness = await state.readiness.check()
            if not state.shutting_down:  # nor began while probing
                status = 200 if readiness.ready else 503
                return FastJSONResponse(readiness.to_dict(), status_code=status, headers=headers)
        return FastJSONResponse({"status": "shutting_down"}, status_code=503, headers=headers)

    if state.metrics is not None:
        metrics = state.metrics

        @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
        async def prometheus_metrics() -> Response:
            """Prometheus metrics (on with ``SELFRAG_METRICS=1`` / ``--metrics``)."""
            data, content_type = metrics.render()
            return Response(data, media_type=content_type)

    @app.get("/stats", response_model=StatsResponse, tags=["service"])
    async def stats() -> StatsResponse:
        limits = {**dataclasses.asdict(state.settings), "api_token": state.settings.api_token is not None}
        await state.store.sync()
        return StatsResponse(
            strategies={
                name: {"class": type(s).__name__, **s.get_stats()} for name, s in state.strategies.items()
            },
            documents=state.store.count(),
            queries={**state.counters, "active": state.active},
            limits=limits,
            worker=os.getpid(),
        )

    @app.post("/documents", response_model=IngestResponse, tags=["documents"])
    async def add_documents(body: DocumentIn | DocumentBatch) -> IngestResponse:
        docs = body.documents if isinstance(body, DocumentBatch) else [body]
        settings = state.settings
        if len(docs) > settings.max_batch_documents:
            raise ApiError(
                400, f"{len(docs)} documents in one batch; the limit is {settings.max_batch_documents}"
            )
        try:
            for doc in docs:
                check_text(doc, settings.max_document_chars)
            added = await state.store.add(docs)
        except ConfigurationError:
            raise  # the backend's setup, not the request (answered by the handler, as a 500)
        except (DocumentError, TypeError, ValueError) as e:
            status = 501 if isinstance(e, UnsupportedError) else 400
            raise ApiError(status, str(e)) from e
        if state.metrics is not None:
            state.metrics.documents_changed("add", len(docs))
        return added

    async def delete_source(source: str, hint: bool) -> DeleteResponse:
        try:
            removed, persisted = await state.store.delete(source)
        except KeyError as e:
            also = (
                f"; for a source starting with '/' send DELETE /documents?source=/{source}"
                if hint and not source.startswith("/")
                else ""
            )
            raise ApiError(404, f"no document with source {source!r}{also}", "unknown_source") from e
        except UnsupportedError as e:
            raise ApiError(501, str(e)) from e
        if state.metrics is not None:
            state.metrics.documents_changed("delete")
        return DeleteResponse(source=source, deleted=removed, count=state.store.count(), persisted=persisted)

    @app.delete("/documents", response_model=DeleteResponse, tags=["documents"])
    async def delete_by_query(
        source: str = Query(min_length=1, description="the source as added: any string, absolute paths too"),
    ) -> DeleteResponse:
        """Delete every chunk of ``source`` (``DELETE /documents?source=/home/me/notes/a.md``)."""
        return await delete_source(source, hint=False)

    @app.delete("/documents/{source:path}", response_model=DeleteResponse, tags=["documents"])
    async def delete_document(source: str) -> DeleteResponse:
        """Delete every chunk of ``source``, the rest of the path (whose leading ``/`` an
        absolute path loses: ``DELETE /documents?source=...`` takes any source)."""
        return await delete_source(source, hint=True)


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.type, headers=exc.headers, **exc.extra)

    @app.exception_handler(ConfigurationError)
    async def configuration_error(request: Request, exc: ConfigurationError) -> JSONResponse:
        return await api_error(request, _misconfigured(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.url.path}; see /docs for the endpoints"
        elif exc.status_code == 400 and "parsing the body" in message:
            message = "the request body could not be read; send UTF-8 JSON"
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {
                "loc": [str(x) for x in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type")),
            }
            for e in exc.errors()
        ]
        if any(d["type"] == "json_invalid" for d in details):
            return error_response(400, "the request body is not valid JSON", "invalid_json")
        summary = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details[:5])
        return error_response(422, f"invalid request: {summary}", details=details)

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

import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from selfrag_core.errors import MissingDependencyError

try:
    from fastapi import FastAPI, Query, Request
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(f"selfrag serve needs FastAPI ({e}): pip install 'selfrag[serve]'") from e
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from selfrag_core.errors import ConfigurationError
from selfrag_core.serve.documents import DocumentError, DocumentStore, UnsupportedError, check_text
from selfrag_core.serve.errors import error_response
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
from selfrag_core.serve.openai_api import add_openai_routes
from selfrag_core.serve.responses import FastJSONResponse
from selfrag_core.serve.service import ApiError, ServiceState, _misconfigured, answer_query
from selfrag_core.serve.settings import TOKEN_ENV, ServeSettings
from selfrag_core.strategies.base import Strategy
from selfrag_core.validation import check_verifier

logger = logging.getLogger("selfrag.serve")

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 404, 413, 422, 500, 502, 503, 504)
}


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
        return await answer_query(state, name, body, request)

    async def post_query(request: Request, body: QueryRequest) -> Response:
        return await answer_query(state, name, body, request)

    for method, endpoint in (("GET", get_query), ("POST", post_query)):
        app.add_api_route(
            f"/query/{name}", endpoint, methods=[method], response_model=QueryResponse,
            tags=["query"], summary=f"Ask {kind}", description=about,
        )  # fmt: skip


def _add_routes(app: FastAPI, state: ServiceState) -> None:
    """The routes beside the queries': the service's, then the documents'."""
    _add_service_routes(app, state)
    _add_document_routes(app, state)


def _add_service_routes(app: FastAPI, state: ServiceState) -> None:
    """An unknown strategy's 404, /healthz, /readyz, /metrics (when on) and /stats."""

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


def _add_document_routes(app: FastAPI, state: ServiceState) -> None:
    """POST /documents, and DELETE of a source's chunks (by query and by path)."""

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

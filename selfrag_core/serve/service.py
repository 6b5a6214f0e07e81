"""The service's state and its query path: a query validated, admitted (or refused with
503 and Retry-After: ``serve.admission``), run within what is left of its timeout
(``serve.execution``), counted once in the stats and the metrics, and answered as JSON or
server-sent events (:class:`Reply`). ``serve.app`` routes ``/query/NAME`` to
:func:`answer_query`, and ``serve.openai_api`` ``/v1/chat/completions`` (with its own
:class:`Reply`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from selfrag_core.config import ExecutionConfig
from selfrag_core.errors import ConfigurationError, RAGSystemError, StrategyError
from selfrag_core.otel import configure_otlp, emit_spans
from selfrag_core.serve.admission import Admission, declared_concurrency
from selfrag_core.serve.documents import DocumentStore
from selfrag_core.serve.errors import CONFIGURATION_ERROR, INTERNAL_ERROR, error_body
from selfrag_core.serve.execution import Outcome, execute, prepare
from selfrag_core.serve.metrics import ServiceMetrics
from selfrag_core.serve.models import QueryRequest
from selfrag_core.serve.readiness import ReadinessProbe
from selfrag_core.serve.responses import FastJSONResponse, dumps
from selfrag_core.serve.settings import ServeSettings
from selfrag_core.strategies.base import Strategy
from selfrag_core.types import NO_ANSWER_REASONS, Trace
from selfrag_core.validation import validate_query

logger = logging.getLogger("selfrag.serve")

T = TypeVar("T")
_Events = asyncio.Queue[tuple[str, dict[str, Any]] | None]  # a query's events, None at its end


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


async def answer_query(
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
    """A query's path: checked, admitted, run within what is left of its timeout, counted
    once and answered, as one JSON reply or as server-sent events."""
    started = time.perf_counter()
    question, strategy, execution = _checked(state, name, body)
    await state.store.sync()  # what another worker saved since
    timeout = execution.query_timeout
    refusal = state.admission.admit(timeout)
    if refusal is not None:
        state.counters["rejected"] += 1
        raise ApiError(503, refusal.message, headers={"Retry-After": str(refusal.retry_after_s)})
    events: _Events = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def push(event: str, data: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (event, data))

    traces: list[Trace] = []  # the query's trace, kept even when the query raises
    admitted = time.monotonic()
    measures = [False]  # whether the query ran to its end: a measure of the service time

    def query() -> Awaitable[Outcome | ApiError]:
        on_events = push if body.stream else None
        return _in_turn(state, strategy, question, body, execution, admitted, on_events, traces, reply)

    def finish(outcome: Outcome | ApiError | BaseException | None) -> tuple[int, dict[str, Any]]:
        """The reply, and the query counted once in the stats and the metrics."""
        measures[0] = _measures(outcome)
        status, content, error = _outcome_reply(state, outcome, execution)
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
        return _whole_reply(reply, outcome, status, content)

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


async def _in_turn(
    state: ServiceState,
    strategy: Strategy[Any],
    question: str,
    body: QueryRequest,
    execution: ExecutionConfig,
    admitted: float,
    push: Callable[[str, dict[str, Any]], None] | None,
    traces: list[Trace],
    reply: Reply,
) -> Outcome | ApiError:
    """The query once it has its turn (``Admission.turn``), within what is left of its
    timeout (it was admitted at ``admitted``, monotonic); refused with 503 when its wait
    left too little of it (a late estimate). Its trace is appended to ``traces``."""
    waited = await state.admission.turn()
    try:
        run_as, timeout = execution, execution.query_timeout
        if waited and timeout is not None:  # the wait for its turn counts against its timeout
            left = timeout - (time.monotonic() - admitted)
            late = _late(state, left)
            if late is not None:
                return late
            run_as = dataclasses.replace(execution, query_timeout=left)
        return await _guarded(
            execute(
                strategy, question, body, run_as, state.settings, push,
                on_trace=traces.append, context=reply.context,
            )
        )  # fmt: skip
    finally:
        state.admission.done_running()


def _checked(
    state: ServiceState, name: str, body: QueryRequest
) -> tuple[str, Strategy[Any], ExecutionConfig]:
    """The query's question, strategy and execution, or the ApiError that refuses it: a bad
    question (400), a ``top_k`` above the server's or a bad option (422), shutting down (503)."""
    settings = state.settings
    try:
        question = validate_query(body.question, name="question", max_chars=settings.max_question_chars)
    except (TypeError, ValueError) as e:
        raise ApiError(400, str(e)) from e
    if body.top_k is not None and body.top_k > settings.max_top_k:
        raise ApiError(422, f"top_k is {body.top_k}; this server allows at most {settings.max_top_k}")
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
    return question, strategy, execution


def _measures(outcome: Outcome | ApiError | BaseException | None) -> bool:
    """Whether a query's outcome measures the service time: it ran to its end (not
    abandoned, refused with 503 or cut by its timeout)."""
    return not (
        outcome is None
        or (isinstance(outcome, ApiError) and outcome.status == 503)
        or (isinstance(outcome, Outcome) and outcome.exceeded == "query_timeout")
    )


def _outcome_reply(
    state: ServiceState, outcome: Outcome | ApiError | BaseException | None, execution: ExecutionConfig
) -> tuple[int, dict[str, Any], str | None]:
    """A query's status, reply and error (for the metrics), counted in the stats: 500 for an
    unexpected error, 499 abandoned, the ApiError's, 504 over a limit, or the answer's."""
    if isinstance(outcome, BaseException) and not isinstance(outcome, ApiError):
        return 500, error_body(500, INTERNAL_ERROR), type(outcome).__name__
    if outcome is None:  # nobody is waiting for the answer
        state.counters["abandoned"] += 1
        return 499, {}, None
    if isinstance(outcome, ApiError):
        state.counters["rejected" if outcome.status == 503 else "failed"] += 1
        return (
            outcome.status,
            error_body(outcome.status, outcome.message, outcome.type, **outcome.extra),
            outcome.cause,
        )
    if outcome.exceeded is not None:
        state.counters["exceeded"] += 1
        content = error_body(504, outcome.message(execution), outcome.exceeded, trace=outcome.trace.to_dict())
        if outcome.result is not None:
            content["result"] = outcome.result.to_dict()
        return 504, content, outcome.exceeded
    status, content, error = no_answer_reply(outcome.result.to_dict())
    state.counters["served" if status == 200 else "failed"] += 1
    return status, content, error


def _whole_reply(
    reply: Reply, outcome: Outcome | ApiError | None, status: int, content: dict[str, Any]
) -> Response:
    """A query answered in one reply (an ApiError's headers on it), or 499 when abandoned."""
    if outcome is None:
        return Response(status_code=499)
    response = reply.json(status, content)
    if isinstance(outcome, ApiError) and outcome.headers:
        response.headers.update(outcome.headers)
    return response


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

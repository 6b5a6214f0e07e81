"""The strategies as a LlamaIndex query engine."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Generator, Iterator
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation.events.query import QueryEndEvent, QueryStartEvent
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import NodeWithScore, QueryType
from pydantic import field_validator

from selfrag_core import (
    Result,
    RetrievedDoc,
    TraceEvent,
    arun_query,
    check_strategy,
    observe_trace,
    run_query,
)
from selfrag_llamaindex import _events
from selfrag_llamaindex._convert import node_from_doc, note, query_text, response_metadata
from selfrag_llamaindex.backend import as_backend
from selfrag_llamaindex.llm import LlamaIndexLLM

dispatcher = instrument.get_dispatcher(__name__)  # type: ignore[attr-defined]


class SelfRAGQueryEngine(CustomQueryEngine):
    """``SelfRAGQueryEngine(strategy=..., streaming=False, context=None, callback_manager=None)``.

    Answers with any selfrag strategy and returns a ``Response``: the strategy's
    answer, ``source_nodes`` = the documents it used (``NodeWithScore`` with the
    backend's node ids), and ``metadata`` = the result's ``to_dict()`` without answer
    and sources (confidence or scores, sub-questions, hypothetical documents, the
    trace), ``strategy``, ``fallbacks`` (every fallback the core or the adapter took)
    and ``adapter_notes``.

    ``aquery`` runs the strategy's ``aquery`` on the event loop (never blocking it).
    With ``streaming=True`` the result is a ``StreamingResponse`` (``AsyncStreamingResponse``
    from ``aquery``) yielding the final answer's text as the strategy's LLM produces it
    (SelfIRAG and SelfHealingRAG pick their answer only at the end, so it comes in one
    piece); ``source_nodes`` and ``metadata`` are filled in when the stream ends.

    During a query, the engine's ``callback_manager`` sees a QUERY event, an LLM event
    per call of a :class:`LlamaIndexLLM`, a RETRIEVE event per retrieval of an
    :func:`as_backend` backend and a SUB_QUESTION event per sub-question of a
    decomposition, from when it is asked until it is answered; instrumentation handlers
    see the query span, a :class:`~selfrag_llamaindex.SelfRAGStepEvent` per step of the
    query as it happens (each retrieval, hypothetical passage, sub-question, verdict,
    attempt and fallback: ``selfrag_core.Step``) and, through LlamaIndex's own LLMs and
    retrievers, their events.
    ``context`` is passed to every query (e.g. ``{"filters": ...}``).
    """

    strategy: Any
    streaming: bool = False
    context: dict[str, Any] | None = None

    @field_validator("strategy")
    @classmethod
    def _check_strategy(cls, value: Any) -> Any:
        return check_strategy(value)

    @classmethod
    def from_llamaindex(
        cls,
        strategy_cls: Any,
        *,
        llm: Any,
        retriever: Any,
        streaming: bool = False,
        callback_manager: Any = None,
        **strategy_kwargs: Any,
    ) -> SelfRAGQueryEngine:
        """Build ``strategy_cls(as_backend(retriever), LlamaIndexLLM(llm), **kwargs)``
        and the engine over it. ``retriever`` may be a retriever or an index."""
        strategy = strategy_cls(as_backend(retriever), LlamaIndexLLM(llm), **strategy_kwargs)
        extra = {} if callback_manager is None else {"callback_manager": callback_manager}
        return cls(strategy=strategy, streaming=streaming, **extra)

    @dispatcher.span
    def query(self, str_or_query_bundle: QueryType) -> RESPONSE_TYPE:
        dispatcher.event(QueryStartEvent(query=str_or_query_bundle))
        query, notes = query_text(str_or_query_bundle)
        with self.callback_manager.as_trace("query"):
            response = self._respond(query, notes)
        dispatcher.event(QueryEndEvent(query=str_or_query_bundle, response=response))
        return response

    @dispatcher.span
    async def aquery(self, str_or_query_bundle: QueryType) -> RESPONSE_TYPE:
        dispatcher.event(QueryStartEvent(query=str_or_query_bundle))
        query, notes = query_text(str_or_query_bundle)
        with self.callback_manager.as_trace("query"):
            response = await self._arespond(query, notes)
        dispatcher.event(QueryEndEvent(query=str_or_query_bundle, response=response))
        return response

    def custom_query(self, query_str: str) -> RESPONSE_TYPE:
        return self._respond(query_str, [])

    async def acustom_query(self, query_str: str) -> RESPONSE_TYPE:
        return await self._arespond(query_str, [])

    def _respond(self, query: str, notes: list[dict[str, Any]]) -> RESPONSE_TYPE:
        if self.streaming:
            nodes: list[NodeWithScore] = []
            metadata: dict[str, Any] = {}
            return StreamingResponse(self._token_gen(query, notes, nodes, metadata), nodes, metadata)
        with self._observed(query, notes) as (ev, scope):
            return self._response(run_query(self.strategy, query, self.context), scope, ev)

    async def _arespond(self, query: str, notes: list[dict[str, Any]]) -> RESPONSE_TYPE:
        if self.streaming:
            nodes: list[NodeWithScore] = []
            metadata: dict[str, Any] = {}
            return AsyncStreamingResponse(self._atoken_gen(query, notes, nodes, metadata), nodes, metadata)
        with self._observed(query, notes) as (ev, scope):
            return self._response(await arun_query(self.strategy, query, self.context), scope, ev)

    def _token_gen(
        self, query: str, notes: list[dict[str, Any]], nodes: list[NodeWithScore], metadata: dict[str, Any]
    ) -> Generator[str, None, None]:
        """The final answer's tokens as the strategy's LLM produces them; the response's
        ``nodes`` and ``metadata`` are filled in when the stream ends."""
        scope = _QueryScope(self, query, notes)
        with (
            self.callback_manager.event(CBEventType.QUERY, payload=scope.payload) as ev,
            contextlib.closing(_Stepped(scope, self.strategy.stream(query, self.context))) as events,
        ):
            for event in events:
                if (text := self._streamed(event, scope, nodes, metadata, ev)) is not None:
                    yield text

    async def _atoken_gen(
        self, query: str, notes: list[dict[str, Any]], nodes: list[NodeWithScore], metadata: dict[str, Any]
    ) -> AsyncGenerator[str, None]:
        scope = _QueryScope(self, query, notes)
        with self.callback_manager.event(CBEventType.QUERY, payload=scope.payload) as ev:
            async with contextlib.aclosing(
                _Stepped(scope, self.strategy.astream(query, self.context))
            ) as events:
                async for event in events:
                    if (text := self._streamed(event, scope, nodes, metadata, ev)) is not None:
                        yield text

    def _streamed(
        self, event: Any, scope: _QueryScope, nodes: list[NodeWithScore], metadata: dict[str, Any], ev: Any
    ) -> str | None:
        """The text a stream event gives the consumer; the result (None) fills in ``nodes``
        and ``metadata``."""
        if event.kind == "token":
            return str(event.text)
        if event.kind == "reset":
            return scope.restart()
        if event.kind != "result":  # a step: event handlers heard it from the trace
            return None
        final = self._response(event.result, scope, ev)
        nodes.extend(final.source_nodes)
        metadata.update(final.metadata or {})
        if any(n["name"] == "stream_restarted" for n in scope.observation.notes):
            metadata["answer"] = str(event.result.answer)  # the streamed text is not only the answer
        return None

    @contextlib.contextmanager
    def _observed(self, query: str, notes: list[dict[str, Any]]) -> Iterator[tuple[Any, _QueryScope]]:
        scope = _QueryScope(self, query, notes)
        with self.callback_manager.event(CBEventType.QUERY, payload=scope.payload) as ev, scope.active():
            yield ev, scope

    def _response(self, result: Result[RetrievedDoc], scope: _QueryScope, ev: Any) -> Response:
        observation = scope.observation
        nodes = [node_from_doc(d, observation.nodes) for d in result.documents]
        metadata = response_metadata(result, self.strategy, scope.notes + observation.notes)
        response = Response(str(result.answer), nodes, metadata)
        ev.on_end(payload={EventPayload.RESPONSE: response})
        return response


class _QueryScope:
    """What one query sets while it runs: the observation (LLM and RETRIEVE events on the
    engine's callback manager, adapter notes, the backend's nodes by id) and the reporter
    of sub-questions; ``notes`` are those taken on the query itself. :meth:`active` sets
    them as context variables. A streamed response enters it around each step of the
    strategy's stream only, so that nothing stays set in the consumer's context between
    steps, after the stream, or when an abandoned stream is closed from another context
    (where resetting a context variable raises)."""

    def __init__(self, engine: SelfRAGQueryEngine, query: str, notes: list[dict[str, Any]]) -> None:
        manager = engine.callback_manager
        self.payload: dict[str, Any] = {EventPayload.QUERY_STR: query}
        self.notes = notes
        self.observation = _events.Observation(manager)
        self.reporter = _events.sub_question_reporter(manager, type(engine.strategy).__name__)

    def hear(self, event: TraceEvent) -> None:
        """A trace event of the query: a SUB_QUESTION callback event where it is one, a
        :class:`~selfrag_llamaindex.SelfRAGStepEvent` for event handlers where it is a step."""
        self.reporter(event)
        _events.dispatch_step(dispatcher, event)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with _events.observing(self.observation), observe_trace(self.hear):
            yield

    def restart(self) -> str:
        """The stream's text so far was not the answer (see ``StreamEvent``), and a text
        stream cannot take it back: a blank line, after which the answer comes in full,
        noted in the metadata (whose ``answer`` then holds the answer alone)."""
        self.observation.notes.append(
            note(
                "stream_restarted",
                "the text streamed before the blank line was not the answer (the LLM's stream "
                "broke and its retry said something else, or the strategy fell back); "
                "the answer follows it in full and is in metadata['answer']",
            )
        )
        return "\n\n"


class _Stepped:
    """A strategy's stream (sync or async) whose events are each produced with the query's
    context variables set, and only then (see :class:`_QueryScope`)."""

    def __init__(self, scope: _QueryScope, events: Any) -> None:
        self.scope, self.events = scope, events

    def __iter__(self) -> _Stepped:
        return self

    def __next__(self) -> Any:
        with self.scope.active():
            return next(self.events)

    def __aiter__(self) -> _Stepped:
        return self

    async def __anext__(self) -> Any:
        with self.scope.active():
            return await anext(self.events)

    def close(self) -> None:
        self.events.close()

    async def aclose(self) -> None:
        await self.events.aclose()

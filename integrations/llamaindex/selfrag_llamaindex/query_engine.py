"""The strategies as a LlamaIndex query engine."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator, Generator, Iterator
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.instrumentation.events.query import QueryEndEvent, QueryStartEvent
from llama_index.core.query_engine import CustomQueryEngine
from llama_index.core.schema import QueryType
from pydantic import Field, field_validator

from selfrag_core import arun_query, check_strategy, observe_trace, run_query
from selfrag_llamaindex import _events
from selfrag_llamaindex._convert import nodes_from_docs, note, query_text, response_metadata
from selfrag_llamaindex.backend import as_backend
from selfrag_llamaindex.llm import LlamaIndexLLM

dispatcher = instrument.get_dispatcher(__name__)  # type: ignore[attr-defined]


def run_strategy(strategy: Any, query: str, context: dict[str, Any] | None) -> Any:
    """The strategy's result for ``query``, through the core's one runner."""
    return run_query(strategy, query, context)


async def arun_strategy(strategy: Any, query: str, context: dict[str, Any] | None) -> Any:
    return await arun_query(strategy, query, context)


def _chunks(text: str) -> Generator[str, None, None]:
    """The answer in word-sized chunks (leading whitespace kept), for streaming."""
    yield from re.findall(r"\s*\S+", text) or [text]


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
    from ``aquery``) whose generator yields the final answer's text as the strategy's
    LLM produces it (HyDE's answer, the recursive merge; SelfIRAG and SelfHealingRAG pick
    their answer only at the end, so it comes in one piece); ``source_nodes`` and
    ``metadata`` are filled in when the stream ends. During a query, the engine's ``callback_manager`` sees a
    QUERY event, an LLM event per call of a :class:`LlamaIndexLLM` and a RETRIEVE
    event per retrieval of an :func:`as_backend` backend, and a SUB_QUESTION event per
    sub-question of a decomposition, from when it is asked until it is answered; instrumentation
    handlers see the query span and, through LlamaIndex's own LLMs and retrievers,
    their events. ``context`` is passed to every ``strategy.query`` (e.g.
    ``{"filters": ...}``).
    """

    strategy: Any
    streaming: bool = False
    context: dict[str, Any] | None = Field(default=None)

    @field_validator("strategy")
    @classmethod
    def _check_strategy(cls, value: Any) -> Any:
        check_strategy(value)
        return value

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

    # ------------------------------------------------------------------ LlamaIndex entry points
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

    # ------------------------------------------------------------------ shared pre/post
    def _streams_tokens(self) -> bool:
        return self.streaming

    def _respond(self, query: str, notes: list[dict[str, Any]]) -> RESPONSE_TYPE:
        if self._streams_tokens():
            response = StreamingResponse(_chunks(""), [], {})
            response.response_gen = self._token_gen(query, notes, response)
            return response
        with self._observed(query) as (ev, observation):
            result = run_strategy(self.strategy, query, self.context)
            return self._response(result, notes, observation, ev, asynchronous=False)

    async def _arespond(self, query: str, notes: list[dict[str, Any]]) -> RESPONSE_TYPE:
        if self._streams_tokens():
            response = AsyncStreamingResponse(_achunks(""), [], {})
            response.response_gen = self._atoken_gen(query, notes, response)
            return response
        with self._observed(query) as (ev, observation):
            result = await arun_strategy(self.strategy, query, self.context)
            return self._response(result, notes, observation, ev, asynchronous=True)

    def _token_gen(
        self, query: str, notes: list[dict[str, Any]], response: Any
    ) -> Generator[str, None, None]:
        """The final answer's tokens as the strategy's LLM produces them; the sources and
        metadata are filled in on ``response`` when the stream ends."""
        scope = _QueryScope(self, query)
        with (
            self.callback_manager.event(_events.CBEventType.QUERY, payload=scope.payload) as ev,
            contextlib.closing(_Stepped(scope, self.strategy.stream(query, self.context))) as events,
        ):
            for event in events:
                if (text := self._streamed(event, scope, notes, response, ev)) is not None:
                    yield text

    async def _atoken_gen(
        self, query: str, notes: list[dict[str, Any]], response: Any
    ) -> AsyncGenerator[str, None]:
        scope = _QueryScope(self, query)
        with self.callback_manager.event(_events.CBEventType.QUERY, payload=scope.payload) as ev:
            async with contextlib.aclosing(
                _Stepped(scope, self.strategy.astream(query, self.context))
            ) as events:
                async for event in events:
                    if (text := self._streamed(event, scope, notes, response, ev)) is not None:
                        yield text

    def _streamed(
        self, event: Any, scope: _QueryScope, notes: list[dict[str, Any]], response: Any, ev: Any
    ) -> str | None:
        """The text a stream event gives the consumer; the result (None) completes ``response``."""
        if event.kind == "token":
            return str(event.text)
        if event.kind == "reset":
            return scope.restart()
        self._complete(response, event.result, notes, scope.observation, ev)
        return None

    def _complete(
        self, response: Any, result: Any, notes: list[dict[str, Any]], observation: Any, ev: Any
    ) -> None:
        final = self._response(result, notes, observation, ev, asynchronous=False, stream=False)
        response.source_nodes.extend(final.source_nodes)
        response.metadata = {**(response.metadata or {}), **(final.metadata or {})}
        if any(n["name"] == "stream_restarted" for n in observation.notes):
            response.metadata["answer"] = str(result.answer)  # the streamed text is not only the answer

    @contextlib.contextmanager
    def _observed(self, query: str) -> Iterator[tuple[Any, _events.Observation]]:
        scope = _QueryScope(self, query)
        with (
            self.callback_manager.event(_events.CBEventType.QUERY, payload=scope.payload) as ev,
            scope.active(),
        ):
            yield ev, scope.observation

    def _response(
        self,
        result: Any,
        notes: list[dict[str, Any]],
        observation: _events.Observation,
        ev: Any,
        *,
        asynchronous: bool,
        stream: bool | None = None,
    ) -> RESPONSE_TYPE:
        answer = str(result.answer)
        nodes = nodes_from_docs(list(getattr(result, "sources", None) or []), observation.nodes)
        metadata = response_metadata(result, self.strategy, notes + observation.notes)
        response: RESPONSE_TYPE
        if not (self.streaming if stream is None else stream):
            response = Response(answer, nodes, metadata)
        elif asynchronous:
            response = AsyncStreamingResponse(_achunks(answer), nodes, metadata)
        else:
            response = StreamingResponse(_chunks(answer), nodes, metadata)
        ev.on_end(payload={_events.EventPayload.RESPONSE: response})
        return response


class _QueryScope:
    """What one query sets while it runs: the observation (LLM and RETRIEVE events on the
    engine's callback manager, adapter notes, the backend's nodes by id) and the reporter
    of sub-questions. :meth:`active` sets them as context variables. A streamed response
    enters it around each step of the strategy's stream only, so that nothing stays set
    in the consumer's context between steps, after the stream, or when an abandoned stream
    is closed from another context (where resetting a context variable raises)."""

    def __init__(self, engine: SelfRAGQueryEngine, query: str) -> None:
        manager = engine.callback_manager
        self.payload: dict[str, Any] = {_events.EventPayload.QUERY_STR: query}
        self.observation = _events.Observation(manager)
        self.reporter = _events.sub_question_reporter(manager, type(engine.strategy).__name__)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with _events.observing(self.observation), observe_trace(self.reporter):
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


async def _achunks(text: str) -> AsyncGenerator[str, None]:
    for chunk in _chunks(text):
        yield chunk

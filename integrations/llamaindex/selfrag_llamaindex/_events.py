"""Per-query observation: which callback manager sees the LLM calls and retrievals.

A query engine activates its ``CallbackManager`` for the duration of one query (a
``ContextVar``, so concurrent queries and the engine's worker threads and tasks each
see their own). :class:`~selfrag_llamaindex.LlamaIndexLLM` and the backends made by
:func:`~selfrag_llamaindex.as_backend` then report LLM and RETRIEVE events to it,
and record adapter-level fallbacks (nodes without text) for the response metadata.
:func:`sub_question_reporter` turns the core's ``sub_question`` progress notes into
SUB_QUESTION events as each sub-question starts and is answered; :func:`dispatch_step`
tells instrumentation event handlers each step of a query (:class:`SelfRAGStepEvent`).
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.query_engine.sub_question_query_engine import SubQuestionAnswerPair
from llama_index.core.question_gen.types import SubQuestion
from pydantic import Field

from selfrag_core import TraceEvent, step_of


class SelfRAGStepEvent(BaseEvent):
    """A step of a selfrag query, as it happens (``selfrag_core.Step``): ``kind``
    (``retrieval``, ``hypothesis``, ``sub_question``, ``verdict``, ``attempt`` or
    ``fallback``), the trace event's ``name``, ``detail``, a one-line ``text`` and the
    ``error`` when it failed. Event handlers (``llama_index.core.instrumentation``)
    receive it during the engine's queries, streamed or not."""

    kind: str
    name: str
    detail: dict[str, Any] = Field(default_factory=dict)
    text: str = ""
    error: str | None = None

    @classmethod
    def class_name(cls) -> str:
        return "SelfRAGStepEvent"


def dispatch_step(dispatcher: Any, event: TraceEvent) -> None:
    """``event`` as a :class:`SelfRAGStepEvent` on ``dispatcher`` when it is a step."""
    step = step_of(event)
    if step is not None:
        dispatcher.event(SelfRAGStepEvent(**step.to_dict()))


@dataclass
class Observation:
    callback_manager: CallbackManager
    notes: list[dict[str, Any]] = field(default_factory=list)
    #: the retrieved nodes by id, so responses cite the backend's own node objects
    nodes: dict[str, Any] = field(default_factory=dict)


_ACTIVE: ContextVar[Observation | None] = ContextVar("selfrag_llamaindex_observation", default=None)


@contextlib.contextmanager
def observing(observation: Observation) -> Iterator[Observation]:
    """``observation`` is the active one inside the block (in this context, and in the
    threads and tasks started from it)."""
    token = _ACTIVE.set(observation)
    try:
        yield observation
    finally:
        _ACTIVE.reset(token)


def record(note: dict[str, Any]) -> None:
    active = _ACTIVE.get()
    if active is not None:
        active.notes.append(note)


def remember(nodes: list[Any]) -> None:
    active = _ACTIVE.get()
    if active is not None:
        active.nodes.update((n.node.node_id, n.node) for n in nodes if hasattr(n, "node"))


@contextlib.contextmanager
def event(kind: CBEventType, payload: Callable[[], dict[Any, Any]], own_manager: Any = None) -> Iterator[Any]:
    """An event on the active query's callback manager, with the start payload that
    ``payload()`` makes (only then), for the handlers the wrapped object does not
    already report to itself (``own_manager``'s): a handler set globally with
    ``Settings.callback_manager`` sits in the engine's, the LLM's and the retriever's
    managers alike, and must see each call once. A no-op outside a query or when no
    handler is left."""
    active = _ACTIVE.get()
    manager = None if active is None else _reporting(active.callback_manager, own_manager)
    if manager is None:
        yield None
        return
    with manager.event(kind, payload=payload()) as ev:
        yield ev


def _reporting(active: CallbackManager, own: Any) -> CallbackManager | None:
    """``active``, or ``active`` with only the handlers that ``own`` lacks; None if none.
    (A shallow copy, not a new ``CallbackManager``: that would add LlamaIndex's global
    handler again, and the events belong to ``active``'s trace.)"""
    theirs = getattr(own, "handlers", None) or []
    missing = [h for h in active.handlers if not any(h is t for t in theirs)]
    if not missing:
        return None
    if len(missing) == len(active.handlers):
        return active
    subset = copy.copy(active)
    subset.handlers = missing
    return subset


def end(ev: Any, payload: dict[Any, Any]) -> None:
    if ev is not None:
        ev.on_end(payload=payload)


def sub_question_reporter(manager: CallbackManager, tool_name: str) -> Callable[[TraceEvent], None]:
    """A trace listener (``selfrag_core.observe_trace``) that reports each sub-question
    of a decomposition on ``manager`` as LlamaIndex's own ``SubQuestionQueryEngine``
    does: a SUB_QUESTION event starting when the sub-question is asked and ending with
    its answer (or, for a failed one, the error as the event's exception)."""
    started: dict[tuple[str, int], list[str]] = {}
    lock = threading.Lock()

    def report(event: TraceEvent) -> None:
        if event.kind != "progress" or event.name != "sub_question" or not manager.handlers:
            return
        detail = event.detail
        key = (str(detail.get("question")), int(detail.get("depth", 0)))
        question = SubQuestion(sub_question=key[0], tool_name=tool_name)
        pair = SubQuestionAnswerPair(sub_q=question, answer=detail.get("answer"), sources=[])
        payload: dict[Any, Any] = {EventPayload.SUB_QUESTION: pair}
        if detail.get("status") == "started":
            new_id = manager.on_event_start(CBEventType.SUB_QUESTION, payload=payload)
            with lock:
                started.setdefault(key, []).append(new_id)
            return
        with lock:
            ids = started.get(key)
            event_id = ids.pop() if ids else None
        if event_id is None:  # a listener added mid-query: start and end together
            event_id = manager.on_event_start(CBEventType.SUB_QUESTION, payload=payload)
        if event.error:
            payload[EventPayload.EXCEPTION] = RuntimeError(event.error)
        manager.on_event_end(CBEventType.SUB_QUESTION, payload=payload, event_id=event_id)

    return report

"""Per-query observation: which callback manager sees the LLM calls and retrievals.

A query engine activates its ``CallbackManager`` for the duration of one query (a
``ContextVar``, so concurrent queries and the engine's worker threads and tasks each
see their own). :class:`~selfrag_llamaindex.LlamaIndexLLM` and the backends made by
:func:`~selfrag_llamaindex.as_backend` then report LLM and RETRIEVE events to it,
and record adapter-level fallbacks (nodes without text) for the response metadata.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload


@dataclass
class Observation:
    callback_manager: CallbackManager
    notes: list[dict[str, Any]] = field(default_factory=list)
    #: the retrieved nodes by id, so responses cite the backend's own node objects
    nodes: dict[str, Any] = field(default_factory=dict)


_ACTIVE: ContextVar[Observation | None] = ContextVar("selfrag_llamaindex_observation", default=None)


@contextlib.contextmanager
def observing(callback_manager: CallbackManager) -> Iterator[Observation]:
    token = _ACTIVE.set(Observation(callback_manager))
    try:
        yield _ACTIVE.get()  # type: ignore[misc]
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
def event(kind: CBEventType, payload: dict[Any, Any], own_manager: Any = None) -> Iterator[Any]:
    """An event on the active query's callback manager; a no-op outside a query, when
    the manager has no handlers, or when the wrapped object already reports to that
    same manager (no duplicates)."""
    active = _ACTIVE.get()
    if active is None or not active.callback_manager.handlers or active.callback_manager is own_manager:
        yield None
        return
    with active.callback_manager.event(kind, payload=payload) as ev:
        yield ev


def end(ev: Any, payload: dict[Any, Any]) -> None:
    if ev is not None:
        ev.on_end(payload=payload)


__all__ = ["CBEventType", "EventPayload", "Observation", "end", "event", "observing", "record"]

"""A retriever's retrieval without the instrumentation nobody receives.

LlamaIndex builds a retrieval's instrumentation whether or not anything listens.
``BaseRetriever.aretrieve`` makes a dispatcher span (binding the call's arguments with
``inspect.signature``), retrieval start/end events (pydantic objects) and a
callback-manager trace and RETRIEVE event around the retriever's ``_aretrieve``. A
``VectorIndexRetriever``'s ``_aretrieve`` adds a span of its own and, for the query's
embedding, another span, embedding start/end events with the model serialised for their
payload, and an EMBEDDING callback event. For the peers' index that is about 1.1 M of the
2.2 M instructions a retrieval takes; the embedding itself, the matrix product and the
docstore lookups are the rest.

:func:`unobserved` tells how much of it nothing would receive, checked for each
retrieval, so a handler added at any time (a ``LlamaDebugHandler``,
``set_global_handler``, an OpenTelemetry instrumentor) sees every event from the next
retrieval on:

* ``OUTER``: the retriever's ``retrieve`` and ``aretrieve`` are ``BaseRetriever``'s own
  (not overridden by its class, not patched or wrapped on ``BaseRetriever`` itself, as
  an instrumentor may do), its callback manager has no handler, and no instrumentation
  event or span handler is reachable from ``BaseRetriever``'s dispatcher (LlamaIndex's
  do-nothing ``NullSpanHandler`` and ``NullEventHandler``, and selfrag's own counter of
  structured-output tokens, do not count). :func:`aretrieve` then calls the retriever's
  ``_aretrieve`` (with whatever instrumentation it has) and its recursive retrieval of
  ``IndexNode`` objects inside a callback-manager trace, as ``aretrieve`` would.
* ``DEEP``: also, the retriever is a plain ``VectorIndexRetriever`` whose ``_retrieve``
  and ``_aretrieve`` are LlamaIndex's own, whose query needs an embedding, and whose
  embedding model's public query-embedding methods are ``BaseEmbedding``'s own, with no
  embeddings cache, rate limiter or callback handler, and nothing listens on their
  dispatchers. :func:`aretrieve` then calls the model's ``_aget_query_embedding`` and the
  retriever's ``_aget_nodes_with_embeddings`` (the vector store query and the docstore
  lookups) directly (an empty query, which LlamaIndex does not embed, goes the OUTER way).

Inside either, and in :class:`~selfrag_llamaindex.LlamaIndexLLM`'s ``complete`` and
``acomplete``, :func:`unspanned` leaves out the dispatcher span LlamaIndex puts around
an LLM's, an embedding model's or a retriever's own methods (``acomplete``,
``_aget_query_embedding``, ``_aretrieve``) when no handler is reachable from the
dispatcher that span reports to.

"Their own" is checked by identity on every retrieval, against the methods recorded at
import; if any of them was not llama-index-core's function (or its dispatcher span) even
then, a patch made before selfrag was imported, every retrieval takes the full path.
Either way the steps, and so the nodes and scores, are the retriever's own.
"""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from typing import Any

import llama_index.core
import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding, mean_agg
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.instrumentation.event_handlers import NullEventHandler
from llama_index.core.instrumentation.span_handlers import NullSpanHandler
from llama_index.core.llms import callbacks as llm_callbacks
from llama_index.core.schema import NodeWithScore, QueryBundle

from selfrag_llamaindex._usage import UsageHandler

#: LlamaIndex's own do-nothing handlers, and selfrag's counter of structured-output tokens
_IDLE_HANDLERS = (NullSpanHandler, NullEventHandler, UsageHandler)
#: what ``BaseRetriever.retrieve`` reports to
_RETRIEVE = instrument.get_dispatcher(BaseRetriever.__module__)  # type: ignore[attr-defined]
#: what a ``VectorIndexRetriever``'s ``_retrieve`` and its query embedding report to
_EMBED = tuple(
    instrument.get_dispatcher(cls.__module__)  # type: ignore[attr-defined]
    for cls in (VectorIndexRetriever, BaseEmbedding)
)

#: the methods a quiet retrieval does not call, by the class that defines them: each must
#: still be LlamaIndex's own where it is looked up (not overridden by a subclass, not
#: patched or wrapped by an instrumentor, now or before selfrag was imported)
_OUTER_SKIPS = {name: inspect.getattr_static(BaseRetriever, name) for name in ("retrieve", "aretrieve")}
_DEEP_SKIPS = {
    name: inspect.getattr_static(VectorIndexRetriever, name) for name in ("_retrieve", "_aretrieve")
}
_EMBED_SKIPS = {
    name: inspect.getattr_static(BaseEmbedding, name)
    for name in (
        "get_query_embedding",
        "aget_query_embedding",
        "get_agg_embedding_from_queries",
        "aget_agg_embedding_from_queries",
    )
}
_LLAMA_INDEX_CORE = str(Path(llama_index.core.__file__).parent)


def _llamaindex_own(method: Any) -> bool:
    """``method`` is a function of llama-index-core's, alone or in its dispatcher span."""
    if type(method) is not types.FunctionType:
        method = getattr(method, "__wrapped__", None)
        if type(method) is not types.FunctionType or not getattr(
            method, "__dispatcher_span_decorated__", False
        ):
            return False
    return method.__code__.co_filename.startswith(_LLAMA_INDEX_CORE)


#: False (every retrieval on the full path) when something had patched them before
_PRISTINE = all(
    _llamaindex_own(m) for skips in (_OUTER_SKIPS, _DEEP_SKIPS, _EMBED_SKIPS) for m in skips.values()
)

#: how much of a retrieval's instrumentation nothing would receive (see :func:`unobserved`)
OUTER, DEEP = "outer", "deep"


def unobserved(retriever: Any) -> str | None:
    """How much of ``retriever``'s retrieval nothing would observe: None (some of it may
    be), ``OUTER`` (``BaseRetriever.retrieve``'s span and events: the retriever's own
    ``_retrieve`` / ``_aretrieve`` is called, with its own instrumentation), or ``DEEP``
    (also a ``VectorIndexRetriever``'s ``_retrieve`` span and its query embedding's)."""
    cls: type = type(retriever)
    if (
        not _PRISTINE
        or not _unchanged(cls, _OUTER_SKIPS)
        or getattr(retriever, "callback_manager", None) is None
        or retriever.callback_manager.handlers
        or _listening(_RETRIEVE)
    ):
        return None
    if cls is not VectorIndexRetriever or not _unchanged(cls, _DEEP_SKIPS):
        return OUTER
    embed = retriever._embed_model
    deep = (
        isinstance(embed, BaseEmbedding)
        and retriever._needs_embedding()
        and _unchanged(type(embed), _EMBED_SKIPS)
        and getattr(embed, "embeddings_cache", None) is None
        and getattr(embed, "rate_limiter", None) is None
        and not embed.callback_manager.handlers
        and not any(_listening(d) for d in _EMBED)
    )
    return DEEP if deep else OUTER


def _unchanged(cls: type, skips: dict[str, Any]) -> bool:
    """Each of ``skips`` is, looked up on ``cls`` now, the very object recorded."""
    return all(_lookup(cls, name) is method for name, method in skips.items())


def _lookup(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _listening(dispatcher: Any) -> bool:
    """A handler is reachable from ``dispatcher`` the way LlamaIndex propagates events."""
    while dispatcher is not None:
        for handler in dispatcher.span_handlers:
            if type(handler) not in _IDLE_HANDLERS:
                return True
        for handler in dispatcher.event_handlers:
            if type(handler) not in _IDLE_HANDLERS:
                return True
        dispatcher = dispatcher.parent if dispatcher.propagate else None
    return False


#: the code of the wrappers ``Dispatcher.span`` puts around a function (sync and async)
_SPAN_CODES = frozenset(
    _lookup(BaseRetriever, name)._self_wrapper.__code__ for name in ("retrieve", "aretrieve")
)
#: each dispatcher span met so far (by id, with the span itself) and the dispatcher it reports to
_SPANS: dict[int, tuple[Any, Any]] = {}


def unspanned(obj: Any, name: str) -> Any:
    """``obj``'s method ``name``, without the dispatcher span LlamaIndex puts around it
    when nothing would receive that span: the function inside the span, bound to
    ``obj``. Else (no span there, or a handler reachable from its dispatcher) the method
    as it is. The span is all that is left out: what the function does itself (an
    LLM's callback events, a retriever's own steps) runs as ever.

    LlamaIndex wraps every implementation of an abstract method of an LLM, embedding
    model, retriever or query engine (``acomplete``, ``_aget_query_embedding``,
    ``_aretrieve``, ...) in a span that binds the call's arguments with
    ``inspect.signature`` and names it with a ``uuid4``: about 30 µs a call, on every
    LLM call and query embedding.
    """
    method = _lookup(type(obj), name)
    dispatcher = _span_dispatcher(method)
    if dispatcher is None or _listening(dispatcher) or name in getattr(obj, "__dict__", ()):
        return getattr(obj, name)
    return types.MethodType(method.__wrapped__, obj)


def _span_dispatcher(method: Any) -> Any:
    """The dispatcher ``method`` reports to when it is a function in LlamaIndex's
    dispatcher span (as ``Dispatcher.span`` made it: the span's own wrapper code around
    a plain function), else None."""
    known = _SPANS.get(id(method))
    if known is not None and known[0] is method:
        return known[1]
    wrapper: Any = getattr(method, "_self_wrapper", None)
    if (
        getattr(wrapper, "__code__", None) not in _SPAN_CODES
        or type(getattr(method, "__wrapped__", None)) is not types.FunctionType
    ):
        return None
    dispatcher = inspect.getclosurevars(wrapper).nonlocals.get("self")
    if not isinstance(dispatcher, instrument.Dispatcher):  # type: ignore[attr-defined]
        return None
    _SPANS[id(method)] = (method, dispatcher)
    return dispatcher


def _probe(prompt: str) -> None: ...


async def _aprobe(prompt: str) -> None: ...


#: the code of the wrappers ``llm_completion_callback`` puts around an LLM's ``complete``
#: and ``acomplete`` (sync and async) to send their callback and instrumentation events
_COMPLETION_CODES = frozenset(
    llm_callbacks.llm_completion_callback()(fn).__code__ for fn in (_probe, _aprobe)
)
#: what those events report to
_COMPLETION_EVENTS = llm_callbacks.dispatcher
#: each completion wrapper met so far (by id, with the wrapper itself) and the function inside
_COMPLETIONS: dict[int, tuple[Any, Any]] = {}


def completion(llm: Any, name: str) -> Any:
    """``llm.complete`` or ``llm.acomplete`` (``name``) without LlamaIndex's instrumentation
    where nothing would receive it: its dispatcher span (see :func:`unspanned`) and the
    events of ``llm_completion_callback`` (start and end events with the model
    serialised for their payload, a callback trace and LLM event: about 0.45 M
    instructions a call) when the LLM's callback manager has no handler, it has no rate
    limiter (which that wrapper applies) and no handler is reachable from the events'
    dispatcher. Only LlamaIndex's own wrapper is left out, recognised by its code: the
    LLM class's own method, and any decorator of its author's, runs as ever."""
    method = unspanned(llm, name)
    inner = _completion_inner(method.__func__) if type(method) is types.MethodType else None
    if (
        inner is None
        or type(llm.callback_manager) is not CallbackManager
        or llm.callback_manager.handlers
        or getattr(llm, "rate_limiter", None) is not None
        or _listening(_COMPLETION_EVENTS)
    ):
        return method
    return types.MethodType(inner, llm)


def _completion_inner(wrapper: Any) -> Any:
    """The function ``llm_completion_callback`` wrapped in ``wrapper``, or None when
    ``wrapper`` is not its event-sending wrapper."""
    known = _COMPLETIONS.get(id(wrapper))
    if known is not None and known[0] is wrapper:
        return known[1]
    if getattr(wrapper, "__code__", None) not in _COMPLETION_CODES:
        return None
    inner = inspect.getclosurevars(wrapper).nonlocals.get("f")
    if not callable(inner):
        return None
    _COMPLETIONS[id(wrapper)] = (wrapper, inner)
    return inner


def _embedding(raw: Any) -> Any:
    """What ``get_agg_embedding_from_queries`` makes of one query's embedding: the mean
    of one, which is a copy of the embedding when it is a list of floats (the first item
    is checked), else the mean's list."""
    if type(raw) is list and (not raw or type(raw[0]) is float):
        return list(raw)
    return mean_agg([raw])


def retrieve(retriever: Any, query: str, depth: str) -> list[NodeWithScore]:
    """``retriever.retrieve(query)`` without what :func:`unobserved` found (``depth``)
    nothing observes."""
    bundle = QueryBundle(query)
    with retriever.callback_manager.as_trace("query"):  # (a trace per retrieval, as LlamaIndex's)
        if depth == DEEP and bundle.embedding_strs:
            bundle.embedding = _embedding(unspanned(retriever._embed_model, "_get_query_embedding")(query))
            nodes = retriever._get_nodes_with_embeddings(bundle)
        else:
            nodes = unspanned(retriever, "_retrieve")(bundle)
        return retriever._handle_recursive_retrieval(bundle, nodes)  # type: ignore[no-any-return]


async def aretrieve(retriever: Any, query: str, depth: str) -> list[NodeWithScore]:
    """``await retriever.aretrieve(query)`` without what :func:`unobserved` found
    (``depth``) nothing observes."""
    bundle = QueryBundle(query)
    with retriever.callback_manager.as_trace("query"):
        if depth == DEEP and bundle.embedding_strs:
            embed = unspanned(retriever._embed_model, "_aget_query_embedding")
            embedding = _embedding(await embed(query))
            nodes = await retriever._aget_nodes_with_embeddings(QueryBundle(query, embedding=embedding))
        else:
            nodes = await unspanned(retriever, "_aretrieve")(query_bundle=bundle)
        return await retriever._ahandle_recursive_retrieval(query_bundle=bundle, nodes=nodes)  # type: ignore[no-any-return]

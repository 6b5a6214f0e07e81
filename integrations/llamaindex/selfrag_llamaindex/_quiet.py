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

Inside either, :func:`unspanned` leaves out the dispatcher span LlamaIndex puts around
an embedding model's or a retriever's own method (``_aget_query_embedding``,
``_aretrieve``) when no handler is reachable from that span's dispatcher, and
:func:`completion` does the same for :class:`~selfrag_llamaindex.LlamaIndexLLM`'s
``complete`` and ``acomplete``, with ``llm_completion_callback``'s events too when
nothing would receive them. Whatever runs where a span was left out (a retrieval's
steps, such a method) runs under a new span id of that span's form (``Class.method-``
and a UUID), so events and spans inside it, sent to other dispatchers, name a parent as
they would. Only the wrappers of the llama-index-core version read (``_READ``, by a hash
of their source) are left out.

"Their own" is checked by identity on every retrieval, against the methods recorded at
import; if any of them was not llama-index-core's function (or its dispatcher span) even
then, a patch made before selfrag was imported, every retrieval takes the full path.
Either way the steps, and so the nodes and scores, are the retriever's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_index.core
import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding, mean_agg
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.instrumentation.event_handlers import NullEventHandler
from llama_index.core.instrumentation.span import active_span_id
from llama_index.core.instrumentation.span_handlers import NullSpanHandler
from llama_index.core.llms import callbacks as llm_callbacks
from llama_index.core.schema import NodeWithScore, QueryBundle

from selfrag_llamaindex._usage import UsageHandler

#: LlamaIndex's own do-nothing handlers, and selfrag's counter of structured-output tokens
#: (it counts only inside ``structured_predict``, which always takes LlamaIndex's full path)
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


def _read(fn: Any) -> str | None:
    """A short hash of ``fn``'s source, None when it cannot be read."""
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
    except Exception:  # (no source, or source that does not parse: not the version read)
        return None


#: the sources of LlamaIndex's instrumentation wrappers that selfrag leaves out, as read
#: in llama-index-core 0.14.25 (the version CI pins); changed ones are never left out
_READ = {
    "Dispatcher.span": "3c3b853010a96221",
    "llm_completion_callback": "6f74c71a71524bf7",
}


def _stand_ins() -> tuple[Any, Any]:
    """A sync and an async function, to decorate with the wrappers to recognise."""

    def complete(self: Any, prompt: str) -> None: ...

    async def acomplete(self: Any, prompt: str) -> None: ...

    return complete, acomplete


def _span_codes() -> frozenset[Any]:
    """The code of the wrappers ``Dispatcher.span`` puts around a sync and an async function."""
    if _read(instrument.Dispatcher.span) != _READ["Dispatcher.span"]:  # type: ignore[attr-defined]
        return frozenset()
    probe = instrument.Dispatcher(name="selfrag-probe")  # type: ignore[attr-defined]
    spanned: list[Any] = [probe.span(fn) for fn in _stand_ins()]
    return frozenset(wrapper._self_wrapper.__code__ for wrapper in spanned)


def _completion_codes() -> frozenset[Any]:
    """The code of the event-sending wrappers ``llm_completion_callback`` puts around a
    sync and an async ``complete``."""
    if _read(llm_callbacks.llm_completion_callback) != _READ["llm_completion_callback"]:
        return frozenset()
    return frozenset(llm_callbacks.llm_completion_callback()(fn).__code__ for fn in _stand_ins())


_SPAN_CODES = _span_codes()
_COMPLETION_CODES = _completion_codes()
#: where those wrappers send their instrumentation events
_COMPLETION_EVENTS = llm_callbacks.dispatcher


def unspanned(obj: Any, name: str) -> Any:
    """``obj``'s method ``name``, without the dispatcher span LlamaIndex puts around it
    when no handler is reachable from the span's dispatcher; else the method as it is.

    LlamaIndex wraps every implementation of an abstract method of an LLM, embedding
    model, retriever or query engine (``acomplete``, ``_aget_query_embedding``,
    ``_aretrieve``, ...) in a span. The span binds the call's arguments with
    ``inspect.signature`` and tells its dispatcher's handlers: about 30 µs a call. Left
    out, the function still runs under a span id of the same form (``Class.method-uuid``)
    as LlamaIndex's current span, so events and spans inside it, which may go to other
    dispatchers, name a parent just as they would.
    """
    inner = _inside_span(obj, name)
    return getattr(obj, name) if inner is None else _as_span(inner, obj)


def completion(llm: Any, name: str) -> Any:
    """``llm.complete`` or ``llm.acomplete`` (``name``) without LlamaIndex's
    instrumentation where nothing would receive it: its span, as :func:`unspanned`, and
    ``llm_completion_callback``'s events (start and end events with the model serialised
    for their payloads, a callback trace and LLM event: about 0.45 M instructions a
    call). The events are left out only when all of these hold:

    * the wrapper is LlamaIndex's own (recognised by its code) directly inside the span;
    * the LLM's callback manager is a ``CallbackManager`` without handlers;
    * the LLM has no rate limiter (the wrapper applies it);
    * no handler is reachable from the dispatcher the events go to.

    The LLM class's own method, and any decorator of its author's, runs as ever, inside
    the LLM's callback trace as the wrapper runs it (with no handler, the trace only
    keeps LlamaIndex's bookkeeping of the trace stack, and marks an exception as recorded
    so that an outer trace does not record it again).
    """
    inner = _inside_span(llm, name)
    if inner is None:
        return getattr(llm, name)
    events_inner = _closure(inner, "f") if inner.__code__ in _COMPLETION_CODES else None
    if (
        events_inner is None
        or type(llm.callback_manager) is not CallbackManager
        or llm.callback_manager.handlers
        or getattr(llm, "rate_limiter", None) is not None
        or _listening(_COMPLETION_EVENTS)
    ):
        return _as_span(inner, llm)
    return _as_span(events_inner, llm, trace=llm.callback_manager)


def _inside_span(obj: Any, name: str) -> Any:
    """The function inside ``obj``'s method ``name`` when that is a function in
    LlamaIndex's dispatcher span (the span's own wrapper code around a plain function)
    and no handler is reachable from the span's dispatcher; else None."""
    method = _lookup(type(obj), name)
    wrapper = getattr(method, "_self_wrapper", None)
    inner = getattr(method, "__wrapped__", None)
    if (
        getattr(wrapper, "__code__", None) not in _SPAN_CODES
        or type(inner) is not types.FunctionType
        or name in getattr(obj, "__dict__", ())  # (set on the instance: called as it is)
    ):
        return None
    dispatcher = _closure(wrapper, "self")
    if type(dispatcher) is not instrument.Dispatcher or _listening(dispatcher):  # type: ignore[attr-defined]
        return None
    return inner


def _closure(fn: Any, name: str) -> Any:
    """The value of the variable ``name`` that ``fn`` closes over (None if it does not)."""
    names = fn.__code__.co_freevars
    return fn.__closure__[names.index(name)].cell_contents if name in names else None


def _span_id(label: str) -> str:
    """A new span id of LlamaIndex's form, ``label-<a random version-4 UUID>`` (made from
    16 random bytes as ``uuid4`` does, without its object: less than half the CPU)."""
    h = os.urandom(16).hex()
    return f"{label}-{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


@contextlib.contextmanager
def _span(label: str) -> Iterator[None]:
    """LlamaIndex's current span id set, for the block, to a new one of a span's form."""
    token = active_span_id.set(_span_id(label))
    try:
        yield
    finally:
        active_span_id.reset(token)


def _as_span(fn: Any, obj: Any, trace: CallbackManager | None = None) -> Any:
    """``fn`` bound to ``obj``, run as inside its span (under a new span id of the span's
    form) and, with ``trace``, inside that manager's callback trace "completion", as
    ``llm_completion_callback`` runs it."""
    label = f"{type(obj).__name__}.{fn.__name__}"

    def traced() -> Any:
        return trace.as_trace("completion") if trace is not None else contextlib.nullcontext()

    if inspect.iscoroutinefunction(fn):

        async def acall(*args: Any, **kwargs: Any) -> Any:
            with _span(label), traced():
                return await fn(obj, *args, **kwargs)

        return acall

    def call(*args: Any, **kwargs: Any) -> Any:
        with _span(label), traced():
            return fn(obj, *args, **kwargs)

    return call


def _embedding(raw: Any) -> Any:
    """What ``get_agg_embedding_from_queries`` makes of one query's embedding: the mean
    of one, which is a copy of the embedding when it is a list of floats (the first item
    is checked), else the mean's list."""
    if type(raw) is list and (not raw or type(raw[0]) is float):
        return list(raw)
    return mean_agg([raw])


def retrieve(retriever: Any, query: str, depth: str) -> list[NodeWithScore]:
    """``retriever.retrieve(query)`` without what :func:`unobserved` found (``depth``)
    nothing observes. The steps run under span ids of the spans left out (``retrieve``'s,
    and ``_retrieve``'s around a DEEP retrieval's own steps), so spans and events inside
    them (a recursive retrieval's query engine, a vector store's) name a parent as they
    would."""
    bundle, name = QueryBundle(query), type(retriever).__name__
    with _span(f"{name}.retrieve"), retriever.callback_manager.as_trace("query"):
        if depth == DEEP and bundle.embedding_strs:
            with _span(f"{name}._retrieve"):
                embed = unspanned(retriever._embed_model, "_get_query_embedding")
                bundle.embedding = _embedding(embed(query))
                nodes = retriever._get_nodes_with_embeddings(bundle)
        else:
            nodes = unspanned(retriever, "_retrieve")(bundle)
        return retriever._handle_recursive_retrieval(bundle, nodes)  # type: ignore[no-any-return]


async def aretrieve(retriever: Any, query: str, depth: str) -> list[NodeWithScore]:
    """``await retriever.aretrieve(query)`` without what :func:`unobserved` found
    (``depth``) nothing observes, as :func:`retrieve`."""
    bundle, name = QueryBundle(query), type(retriever).__name__
    with _span(f"{name}.aretrieve"), retriever.callback_manager.as_trace("query"):
        if depth == DEEP and bundle.embedding_strs:
            with _span(f"{name}._aretrieve"):
                embed = unspanned(retriever._embed_model, "_aget_query_embedding")
                embedding = _embedding(await embed(query))
                nodes = await retriever._aget_nodes_with_embeddings(QueryBundle(query, embedding=embedding))
        else:
            nodes = await unspanned(retriever, "_aretrieve")(query_bundle=bundle)
        return await retriever._ahandle_recursive_retrieval(query_bundle=bundle, nodes=nodes)  # type: ignore[no-any-return]

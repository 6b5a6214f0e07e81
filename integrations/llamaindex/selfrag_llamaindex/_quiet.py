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

* ``OUTER``: the retriever keeps ``BaseRetriever``'s ``retrieve`` and ``aretrieve``
  (overrides neither), its callback manager has no handler, and no instrumentation event
  or span handler is reachable from ``BaseRetriever``'s dispatcher (LlamaIndex's
  do-nothing ``NullSpanHandler`` and ``NullEventHandler``, and selfrag's own counter of
  structured-output tokens, do not count). :func:`aretrieve` then calls the retriever's
  ``_aretrieve`` (with whatever instrumentation it has) and its recursive retrieval of
  ``IndexNode`` objects, as ``aretrieve`` would.
* ``DEEP``: also, the retriever is a plain ``VectorIndexRetriever`` whose query needs an
  embedding, its embedding model keeps ``BaseEmbedding``'s public query-embedding methods
  and has no embeddings cache, rate limiter or callback handler, and nothing listens on
  their dispatchers. :func:`aretrieve` then calls the model's ``_aget_query_embedding``
  and the retriever's ``_aget_nodes_with_embeddings`` (the vector store query and the
  docstore lookups) directly.

Either way the steps, and so the nodes and scores, are the retriever's own.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding, mean_agg
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.instrumentation.event_handlers import NullEventHandler
from llama_index.core.instrumentation.span_handlers import NullSpanHandler
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
_EMBEDDING_API = (
    "get_query_embedding",
    "aget_query_embedding",
    "get_agg_embedding_from_queries",
    "aget_agg_embedding_from_queries",
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
        not _keeps(cls, BaseRetriever, ("retrieve", "aretrieve"))
        or getattr(retriever, "callback_manager", None) is None
        or retriever.callback_manager.handlers
        or _listening(_RETRIEVE)
    ):
        return None
    if cls is not VectorIndexRetriever:
        return OUTER
    embed = retriever._embed_model
    deep = (
        _keeps(embed.__class__, BaseEmbedding, _EMBEDDING_API)
        and getattr(embed, "embeddings_cache", None) is None
        and getattr(embed, "rate_limiter", None) is None
        and retriever._needs_embedding()
        and not embed.callback_manager.handlers
        and not any(_listening(d) for d in _EMBED)
    )
    return DEEP if deep else OUTER


@lru_cache(maxsize=256)
def _keeps(cls: type, base: type, names: tuple[str, ...]) -> bool:
    """``cls`` keeps ``base``'s own ``names`` (overrides none of them)."""
    return all(next(k for k in cls.__mro__ if name in k.__dict__) is base for name in names)


def _listening(dispatcher: Any) -> bool:
    """A handler is reachable from ``dispatcher`` the way LlamaIndex propagates events."""
    while dispatcher is not None:
        handlers = (*dispatcher.span_handlers, *dispatcher.event_handlers)
        if any(type(h) not in _IDLE_HANDLERS for h in handlers):
            return True
        dispatcher = dispatcher.parent if dispatcher.propagate else None
    return False


def _embedding(raw: Any) -> Any:
    """What ``get_agg_embedding_from_queries`` makes of one query's embedding: the mean
    of one, which is the embedding itself when it is a list of floats (the first item is
    checked), else the mean's list."""
    if type(raw) is list and (not raw or type(raw[0]) is float):
        return raw
    return mean_agg([raw])


def retrieve(retriever: Any, query: str, depth: str) -> list[NodeWithScore]:
    """``retriever.retrieve(query)`` without what :func:`unobserved` found (``depth``)
    nothing observes."""
    if depth == DEEP:
        embedding = _embedding(retriever._embed_model._get_query_embedding(query))
        bundle = QueryBundle(query, embedding=embedding)  # (sync LlamaIndex passes it on)
        nodes = retriever._get_nodes_with_embeddings(bundle)
    else:
        bundle = QueryBundle(query)
        nodes = retriever._retrieve(bundle)
    return retriever._handle_recursive_retrieval(bundle, nodes)  # type: ignore[no-any-return]


async def aretrieve(retriever: Any, query: str, depth: str) -> list[NodeWithScore]:
    """``await retriever.aretrieve(query)`` without what :func:`unobserved` found
    (``depth``) nothing observes."""
    bundle = QueryBundle(query)
    if depth == DEEP:
        embedding = _embedding(await retriever._embed_model._aget_query_embedding(query))
        nodes = await retriever._aget_nodes_with_embeddings(QueryBundle(query, embedding=embedding))
    else:
        nodes = await retriever._aretrieve(bundle)
    return await retriever._ahandle_recursive_retrieval(bundle, nodes)  # type: ignore[no-any-return]

"""A ``VectorIndexRetriever``'s retrieval without the instrumentation nobody receives.

Each ``retriever.aretrieve(query)`` of LlamaIndex builds, whether or not anything
listens: three dispatcher spans (each binding the call's arguments with
``inspect.signature``), retrieval and embedding start/end events (pydantic objects,
the embedding model serialised for the payload), and callback-manager RETRIEVE and
EMBEDDING events with their traces. For the peers' index that is about 1.1 M of the
2.2 M instructions a retrieval takes; the matrix product and the docstore lookups
are the rest.

When nothing would receive any of it, :func:`aretrieve` / :func:`retrieve` run the
same steps as the retriever's own ``aretrieve`` / ``retrieve`` without it: the
embedding model's ``_aget_query_embedding``, the retriever's
``_aget_nodes_with_embeddings`` (the vector store query, docstore lookups) and its
recursive retrieval of ``IndexNode`` objects, so the nodes and scores are the same.
"Nothing would receive it" (:func:`unobserved`) means: the retriever is a plain
``VectorIndexRetriever`` (not a subclass, which may change any step), its embedding
model does not override the public embedding methods and has no embeddings cache or
rate limiter, neither has a callback handler, and no instrumentation event handler or
span handler (other than LlamaIndex's do-nothing ``NullSpanHandler`` and
``NullEventHandler``, and selfrag's own structured-output token counter) is reachable
from the dispatchers those calls report to. It is checked for each retrieval, so a
handler added at any time (a ``LlamaDebugHandler``, ``set_global_handler``, an
OpenTelemetry instrumentor) gets every event from the next retrieval on.
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
#: what a retrieval reports to: its spans and events, and its embedding's
_DISPATCHERS = tuple(
    instrument.get_dispatcher(cls.__module__)  # type: ignore[attr-defined]
    for cls in (BaseRetriever, VectorIndexRetriever, BaseEmbedding)
)
_EMBEDDING_API = (
    "get_query_embedding",
    "aget_query_embedding",
    "get_agg_embedding_from_queries",
    "aget_agg_embedding_from_queries",
)


def unobserved(retriever: Any) -> bool:
    """Whether nothing would receive the instrumentation of ``retriever``'s retrieval
    (and the steps can be run without it: see the module's docstring)."""
    if type(retriever) is not VectorIndexRetriever:
        return False
    embed = retriever._embed_model
    return (
        _plain_embedding(type(embed))
        and getattr(embed, "embeddings_cache", None) is None
        and getattr(embed, "rate_limiter", None) is None
        and retriever._needs_embedding()
        and not retriever.callback_manager.handlers
        and not embed.callback_manager.handlers
        and not any(_listening(d) for d in _DISPATCHERS)
    )


@lru_cache(maxsize=64)
def _plain_embedding(cls: type) -> bool:
    """``cls`` keeps ``BaseEmbedding``'s own query-embedding methods."""
    return all(next(k for k in cls.__mro__ if name in k.__dict__) is BaseEmbedding for name in _EMBEDDING_API)


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


def retrieve(retriever: VectorIndexRetriever, query: str) -> list[NodeWithScore]:
    """``retriever.retrieve(query)`` for an :func:`unobserved` retriever."""
    bundle = QueryBundle(query, embedding=_embedding(retriever._embed_model._get_query_embedding(query)))
    nodes = retriever._get_nodes_with_embeddings(bundle)
    return retriever._handle_recursive_retrieval(bundle, nodes)  # (sync LlamaIndex passes the embedding on)


async def aretrieve(retriever: VectorIndexRetriever, query: str) -> list[NodeWithScore]:
    """``await retriever.aretrieve(query)`` for an :func:`unobserved` retriever."""
    embedding = _embedding(await retriever._embed_model._aget_query_embedding(query))
    nodes = await retriever._aget_nodes_with_embeddings(QueryBundle(query, embedding=embedding))
    return await retriever._ahandle_recursive_retrieval(QueryBundle(query), nodes)  # (async does not)

"""A strategy's retrieval as a LlamaIndex retriever."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from selfrag_core import (
    RetrievalWatch,
    aretrieve_documents,
    check_strategy,
    observe_trace,
    retrieve_documents,
)
from selfrag_llamaindex import _events
from selfrag_llamaindex._convert import marked, node_from_doc, query_text


class StrategyRetriever(BaseRetriever):
    """``StrategyRetriever(strategy, *, top_k=None, context=None, callback_manager=None)``.

    Retrieves with a selfrag strategy: HyDE's fused ranking when the strategy offers
    ``retrieve_documents`` / ``aretrieve_documents`` (one LLM round, no answer), else
    the sources of the strategy's full answer. The nodes are the backend's own (ids,
    ``ref_doc_id`` and metadata kept) where the backend is a LlamaIndex one
    (:func:`as_backend`); the strategy's LLM calls are reported to this retriever's
    callback manager; ``_aretrieve`` is truly async. A ``QueryBundle``'s custom embedding
    strings are not used (the strategy retrieves with the query text; logged).

    An outage is not "nothing matched": when every retrieval of the run failed (the
    backend raised, timed out or returned nothing readable) ``retrieve`` raises
    ``RetrievalError``; when some failed, each node (a copy) has
    ``metadata["selfrag_partial_failure"]`` saying which (kept out of the LLM's text).
    """

    def __init__(
        self,
        strategy: Any,
        *,
        top_k: int | None = None,
        context: dict[str, Any] | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        check_strategy(strategy)  # TypeError for anything that is not a strategy
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
        self.strategy = strategy
        self.top_k = top_k
        self.context = context
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query, _ = query_text(query_bundle)  # what the bundle carries that is not used is logged
        watch = RetrievalWatch()
        with _events.observing(_events.Observation(self.callback_manager)) as seen, observe_trace(watch):
            docs = retrieve_documents(self.strategy, query, self.top_k, self.context)
        return marked([node_from_doc(d, seen.nodes) for d in docs], watch.failure(self.strategy, query))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query, _ = query_text(query_bundle)
        watch = RetrievalWatch()
        with _events.observing(_events.Observation(self.callback_manager)) as seen, observe_trace(watch):
            docs = await aretrieve_documents(self.strategy, query, self.top_k, self.context)
        return marked([node_from_doc(d, seen.nodes) for d in docs], watch.failure(self.strategy, query))

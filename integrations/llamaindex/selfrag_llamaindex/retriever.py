"""A strategy's retrieval as a LlamaIndex retriever."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from selfrag_llamaindex._convert import nodes_from_docs, query_text
from selfrag_llamaindex.query_engine import arun_strategy, entry_points, run_strategy


class StrategyRetriever(BaseRetriever):
    """``StrategyRetriever(strategy, *, top_k=None, context=None, callback_manager=None)``.

    Retrieves with a selfrag strategy: HyDE's fused ranking when the strategy offers
    ``retrieve_documents`` / ``aretrieve_documents`` (one LLM round, no answer), else
    the sources of the strategy's full answer. Nodes keep the backend's ids;
    ``_aretrieve`` is truly async. A ``QueryBundle``'s custom embedding strings are
    not used (the strategy retrieves with the query text; logged).
    """

    def __init__(
        self,
        strategy: Any,
        *,
        top_k: int | None = None,
        context: dict[str, Any] | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        entry_points(strategy)  # TypeError for anything that is not a strategy
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
        self.strategy = strategy
        self.top_k = top_k
        self.context = context
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query, _ = query_text(query_bundle)
        fused = getattr(self.strategy, "retrieve_documents", None)
        if callable(fused):
            return nodes_from_docs(fused(query, self.top_k, self.context))
        return self._nodes(run_strategy(self.strategy, query, self.context))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query, _ = query_text(query_bundle)
        fused = getattr(self.strategy, "aretrieve_documents", None)
        if callable(fused):
            return nodes_from_docs(await fused(query, self.top_k, self.context))
        return self._nodes(await arun_strategy(self.strategy, query, self.context))

    def _nodes(self, result: Any) -> list[NodeWithScore]:
        docs = list(getattr(result, "sources", None) or [])
        return nodes_from_docs(docs if self.top_k is None else docs[: self.top_k])

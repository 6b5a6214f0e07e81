"""A selfrag strategy as a LangChain retriever."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import set_config_context
from langchain_core.runnables.utils import coro_with_context
from pydantic import ConfigDict, Field, field_validator

from selfrag_core import (
    RetrievalWatch,
    RetrievedDoc,
    aretrieve_documents,
    check_strategy,
    observe_trace,
    retrieve_documents,
)
from selfrag_langchain._convert import to_documents


class StrategyRetriever(BaseRetriever):
    """The documents a strategy finds, as a retriever.

    With a strategy that offers ``retrieve_documents`` (``HyDERAG``: the fused ranking
    of the hypothetical documents' retrievals, one LLM round, no answer) that is used;
    otherwise the strategy answers the query and its result's ``sources`` are returned.
    ``k`` (constructor or ``invoke(query, k=...)``) caps the number of documents.
    Documents carry ``score`` / ``score_kind`` metadata where the backend gave scores.
    The strategy's model calls and retrievals are child runs of the retriever run.

    An outage is not "nothing matched": when every retrieval of the run failed (the
    backend raised, timed out or returned nothing readable) the retriever raises
    ``RetrievalError`` (LangChain reports it to the callbacks' ``on_retriever_error``);
    when some failed, each document's ``metadata["selfrag_partial_failure"]`` says which.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    strategy: Any
    k: int | None = Field(default=None, ge=1)

    _check = field_validator("strategy")(lambda cls, v: check_strategy(v))

    def _limit(self, k: int | None) -> int | None:
        limit = k if k is not None else self.k
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"k must be a positive int or None, got {limit!r}")
        return limit

    def _documents(self, query: str, limit: int | None, watch: RetrievalWatch) -> list[RetrievedDoc]:
        with observe_trace(watch):
            return retrieve_documents(self.strategy, query, limit)

    async def _adocuments(self, query: str, limit: int | None, watch: RetrievalWatch) -> list[RetrievedDoc]:
        with observe_trace(watch):
            return await aretrieve_documents(self.strategy, query, limit)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        limit, watch = self._limit(k), RetrievalWatch()
        with set_config_context(RunnableConfig(callbacks=run_manager.get_child())) as context:
            docs = context.run(self._documents, query, limit, watch)
        return to_documents(docs[:limit], watch.failure(self.strategy, query))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        limit, watch = self._limit(k), RetrievalWatch()
        with set_config_context(RunnableConfig(callbacks=run_manager.get_child())) as context:
            docs = await coro_with_context(self._adocuments(query, limit, watch), context)
        return to_documents(docs[:limit], watch.failure(self.strategy, query))

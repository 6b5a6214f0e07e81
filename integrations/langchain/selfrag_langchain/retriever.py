"""A selfrag strategy as a LangChain retriever."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, field_validator

from selfrag_core import check_strategy
from selfrag_core.types import RetrievedDoc
from selfrag_langchain._convert import to_document
from selfrag_langchain.runnable import ain_child_run, arun_strategy, in_child_run, run_strategy


class StrategyRetriever(BaseRetriever):
    """The documents a strategy finds, as a retriever.

    With a strategy that offers ``retrieve_documents`` (``HyDERAG``: the fused ranking
    of the hypothetical documents' retrievals, one LLM round, no answer) that is used;
    otherwise the strategy answers the query and its result's ``sources`` are returned.
    ``k`` (constructor or ``invoke(query, k=...)``) caps the number of documents.
    Documents carry ``score`` / ``score_kind`` metadata where the backend gave scores.
    The strategy's model calls and retrievals are child runs of the retriever run.
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

    def _documents(self, query: str, limit: int | None) -> list[RetrievedDoc]:
        if hasattr(self.strategy, "retrieve_documents"):
            docs: list[RetrievedDoc] = self.strategy.retrieve_documents(query, top_k=limit)
            return docs
        return list(run_strategy(self.strategy, query).sources)

    async def _adocuments(self, query: str, limit: int | None) -> list[RetrievedDoc]:
        if hasattr(self.strategy, "aretrieve_documents"):
            docs: list[RetrievedDoc] = await self.strategy.aretrieve_documents(query, top_k=limit)
            return docs
        return list((await arun_strategy(self.strategy, query)).sources)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        limit = self._limit(k)
        docs = in_child_run(run_manager, self._documents, query, limit)
        return [to_document(d) for d in docs[:limit]]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        limit = self._limit(k)
        docs = await ain_child_run(run_manager, self._adocuments, query, limit)
        return [to_document(d) for d in docs[:limit]]

"""HyDERAG: retrieve with hypothetical answer documents as well as the question.

One query costs two dependent LLM rounds while ``num_hypothetical_docs`` is at most the
query's concurrency limit (``ExecutionConfig.max_concurrency``, 8 by default): the N
hypothetical documents are generated together, then every retrieval (the original
query and one per document) runs together, then the final answer is generated.

Differences from the reference implementation, on purpose:

* With ``use_original_query`` the question is also prepended to every passage's
  search (the lexical analogue of averaging the question's embedding with the
  passages', as the HyDE paper does).
* Re-ranking never compares raw scores of different searches (a score from one
  query says nothing about a score from another, and backends mix similarities and
  distances). Rankings are fused by weighted reciprocal rank fusion; the original
  query's ranking weighs as much as all hypothetical rankings together, so a direct
  match is never outvoted by N passages the model invented.
* Each passage's ranking is further weighted by how much it agrees with the
  question's own ranking (the share of the question's top 10 it also finds,
  :func:`agreement`): a passage that drifted off the topic, the usual failure of a
  small model, finds other documents and loses its vote, while one that stays on
  the topic re-orders the question's documents.
* The fused documents are available on their own (:meth:`HyDERAG.retrieve_documents`),
  so HyDE can serve as a retriever in LangChain or LlamaIndex.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from selfrag_core.config import ExecutionConfig, HyDERAGConfig, config_from
from selfrag_core.engine import Generate, Note, Parallel, Plan, RetrieveMany
from selfrag_core.errors import RAGSystemError
from selfrag_core.prompts import Prompts, detect_language
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.retrieval import _deduplicate, _doc_key
from selfrag_core.runner import aretrieve_documents, retrieve_documents
from selfrag_core.strategies.base import (
    GENERATION_FAILED_ANSWER,
    Ranking,
    Strategy,
    grounded_answer,
    retrieval_options,
)
from selfrag_core.types import INSUFFICIENT_ANSWER as INSUFFICIENT_ANSWER  # its no-document answer
from selfrag_core.types import HyDEResult, RetrievedDoc, ScoreKind
from selfrag_core.validation import check_int, validate_context, validate_query

#: hypothetical documents shorter than this (characters) are discarded
MIN_DOC_CHARS = 40
#: documents of the fused ranking that go into the answer prompt
ANSWER_DOCS = 5
#: the usual reciprocal-rank-fusion constant
RRF_K = 60
#: how deep a passage's ranking is compared with the question's (see :func:`agreement`)
AGREEMENT_DEPTH = 10


def reciprocal_rank_fusion(
    rankings: list[tuple[list[RetrievedDoc], float]], *, k: int = RRF_K
) -> list[RetrievedDoc]:
    """Fuse ``(ranking, weight)`` pairs by weighted reciprocal rank.

    A document's fused score is the sum over rankings of ``weight / (k + rank)``;
    copies (same first 120 characters) are merged by ``_deduplicate``'s rule. The
    returned documents carry the fused score as a similarity; the backend's own
    score moves to ``metadata["retrieval_score"]`` / ``["retrieval_score_kind"]``.
    """
    fused: dict[str, float] = {}
    for docs, weight in rankings:
        for rank, doc in enumerate(docs, 1):
            key = _doc_key(doc)
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
    unique = _deduplicate(doc for docs, _ in rankings for doc in docs)
    unique.sort(key=lambda d: -fused[_doc_key(d)])  # stable: first appearance breaks ties
    return [
        dataclasses.replace(
            d,
            score=fused[_doc_key(d)],
            score_kind=ScoreKind.SIMILARITY,
            metadata={**d.metadata, "retrieval_score": d.score, "retrieval_score_kind": d.score_kind.value},
        )
        for d in unique
    ]


def agreement(
    reference: list[RetrievedDoc], ranking: list[RetrievedDoc], depth: int = AGREEMENT_DEPTH
) -> float:
    """The share of ``reference``'s top ``depth`` documents that ``ranking``'s top
    ``depth`` also holds (same document key as the fusion); 1.0 when ``reference``
    is empty (nothing to disagree with)."""
    top = {_doc_key(d) for d in reference[:depth]}
    if not top:
        return 1.0
    return len(top & {_doc_key(d) for d in ranking[:depth]}) / len(top)


@dataclass
class _Fused:
    """What the retrieval half of HyDE produced."""

    hypothetical_docs: list[str]
    documents: list[RetrievedDoc]  # fused ranking, every unique document
    searches: int
    failures: int


class HyDERAG(Strategy[HyDEResult]):
    """Hypothetical Document Embeddings over any backend and any LLM.

    ``HyDERAG(rag_system, llm, *, config=None, execution=None, prompts=None)``, the
    settings in a :class:`~selfrag_core.config.HyDERAGConfig`. The specification's
    arguments, positional or keyword (``num_hypothetical_docs=3, use_original_query=True,
    top_k=5, max_final_docs=10, llm_retries=2``), still build it (without a warning). The
    passages go out under the one concurrency limit, ``execution.max_concurrency``
    (default 8); the specification's ``max_workers`` is deprecated (a DeprecationWarning):
    it is that limit when no ``execution`` is given (an ``execution`` passed explicitly
    wins). Raises ``ValueError`` when ``llm`` is falsy. ``query`` / ``aquery`` never raise for backend
    or LLM failures: the fallback answer is returned and the failure is in
    ``result.trace``.
    """

    config: HyDERAGConfig
    #: each hypothetical passage is a step of its stream (a hypothesis)
    step_calls: ClassVar[Mapping[str, str]] = {"hyde_document": "hypothesis"}

    def __init__(
        self,
        rag_system: BackendLike,
        llm: LLMLike,
        num_hypothetical_docs: int | None = None,
        use_original_query: bool | None = None,
        top_k: int | None = None,
        max_final_docs: int | None = None,
        llm_retries: int | None = None,
        max_workers: int | None = None,
        *,
        config: HyDERAGConfig | None = None,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
    ) -> None:
        if max_workers is not None:
            check_int("max_workers", max_workers, 1)
            limited = config_from(
                ExecutionConfig, None, "HyDERAG", {"max_workers": max_workers}, parameter="execution",
                renamed={"max_workers": "max_concurrency"}, deprecated={"max_workers"},
            )  # fmt: skip
            execution = limited if execution is None else execution
        super().__init__(rag_system, llm, execution=execution, prompts=prompts)
        given = {
            "num_hypothetical_docs": num_hypothetical_docs,
            "use_original_query": use_original_query,
            "top_k": top_k,
            "max_final_docs": max_final_docs,
            "llm_retries": llm_retries,
        }
        self.config = config_from(HyDERAGConfig, config, "HyDERAG", given)

    # ------------------------------------------------------------------ retriever API
    def documents_plan(
        self, query: str, context: Mapping[str, Any] | None = None, top_k: int | None = None
    ) -> Plan[list[RetrievedDoc]]:
        """The plan of :meth:`retrieve_documents`, for composing (``yield from``)."""
        query, checked = validate_query(query), validate_context(context)
        strategy = self.for_call(checked)
        limit = check_int("top_k", strategy.config.max_final_docs if top_k is None else top_k, 1)
        # every search goes as deep as the ranking asked for: a fused ranking of 10 is not
        # the union of searches 5 deep
        fused = yield from strategy._retrieve_fused(query, checked, depth=max(limit, strategy.config.top_k))
        return fused.documents[:limit]

    def retrieve_documents(
        self, query: str, top_k: int | None = None, context: Mapping[str, Any] | None = None
    ) -> list[RetrievedDoc]:
        """The fused HyDE ranking for ``query`` (``top_k`` defaults to ``config.max_final_docs``),
        without generating an answer: one LLM round. Never raises for LLM or backend
        failures (an empty list when nothing could be retrieved)."""
        return retrieve_documents(self, query, top_k, context)

    async def aretrieve_documents(
        self, query: str, top_k: int | None = None, context: Mapping[str, Any] | None = None
    ) -> list[RetrievedDoc]:
        """Async :meth:`retrieve_documents`."""
        return await aretrieve_documents(self, query, top_k, context)

    # ------------------------------------------------------------------ its cost
    def ranking(self) -> Ranking:
        """Its fused ranking (:meth:`documents_plan`): one LLM round, its hypothetical documents."""
        return lambda query, k: self.documents_plan(query, None, k)

    def ranking_calls(self) -> float:
        """One call a hypothetical document."""
        return float(self.config.num_hypothetical_docs)

    def ranking_prompt(self, query: str) -> str:
        """The short prompt of a hypothetical document."""
        return self.prompts.render("hyde_document", detect_language(query), question=query)

    def estimated_calls(self, query: str) -> float:
        """One call a hypothetical document, and the answer."""
        return self.ranking_calls() + 1.0

    # ------------------------------------------------------------------ the plan
    def _plan(self, query: str, context: dict[str, Any]) -> Plan[HyDEResult]:
        fused = yield from self._retrieve_fused(query, context)
        ranked = fused.documents[: self.config.max_final_docs]
        result = HyDEResult(
            answer=INSUFFICIENT_ANSWER,
            hypothetical_docs=fused.hypothetical_docs,
            num_retrieved=len(fused.documents),
            num_ranked=len(ranked),
            sources=ranked,
        )
        if not ranked:
            why = "every retrieval failed" if fused.failures == fused.searches else "no documents retrieved"
            yield Note("insufficient_information", why, {"searches": fused.searches})
            return result
        try:
            answer_docs = ranked[:ANSWER_DOCS]
            result.answer = yield from grounded_answer(self, query, answer_docs, self.config.llm_retries)
        except RAGSystemError as e:
            yield Note("generation_failed", f"{type(e).__name__}: {e}")
            result.answer = GENERATION_FAILED_ANSWER
        return result

    def _retrieve_fused(
        self, query: str, context: Mapping[str, Any], depth: int | None = None
    ) -> Plan[_Fused]:
        hypothetical = yield from self._hypothetical_docs(query)
        # with use_original_query the question searches too, and leads every passage's search
        cfg = self.config
        lead = f"{query}\n" if cfg.use_original_query else ""
        texts = [lead + doc for doc in hypothetical]
        with_question = cfg.use_original_query or not texts
        if not texts:
            yield Note("no_hypothetical_docs", "searching with the original query instead")
        if with_question:
            texts.insert(0, query)
        options = retrieval_options(context)
        outcomes = yield RetrieveMany(self.rag_system, tuple(texts), depth or cfg.top_k, options)
        found: list[list[RetrievedDoc] | None] = []
        for text, outcome in zip(texts, outcomes, strict=True):
            if isinstance(outcome, Exception):
                yield Note("retrieval_failed", f"{type(outcome).__name__}: {outcome}", {"query": text[:200]})
                found.append(None)
            else:
                found.append(outcome)
        if with_question:
            # the question's ranking weighs as much as all passages' together; each passage
            # votes as far as its ranking agrees with the question's
            original, passages = found[0], found[1:]
            rankings = [] if original is None else [(original, 1.0)]
            rankings += [
                (docs, (1.0 if original is None else agreement(original, docs)) / len(passages))
                for docs in passages
                if docs is not None
            ]
        else:
            rankings = [(docs, 1.0 / len(found)) for docs in found if docs is not None]
        return _Fused(hypothetical, reciprocal_rank_fusion(rankings), len(texts), found.count(None))

    def _hypothetical_docs(self, query: str) -> Plan[list[str]]:
        prompt = self.ranking_prompt(query)
        cfg = self.config
        replies = yield Parallel(
            tuple(
                Generate(self.llm, prompt, "hyde_document", cfg.llm_retries)
                for _ in range(cfg.num_hypothetical_docs)
            )
        )
        docs: list[str] = []
        for reply in replies:
            if isinstance(reply, Exception):
                yield Note("hyde_document_failed", f"{type(reply).__name__}: {reply}")
            elif len(reply.text.strip()) < MIN_DOC_CHARS:
                detail = {"text": reply.text.strip()}
                yield Note("hyde_document_discarded", f"shorter than {MIN_DOC_CHARS} characters", detail)
            else:
                docs.append(reply.text.strip())
        return docs

"""PlainRAG: one retrieval, one answer. The baseline every strategy is measured
against (``selfrag eval``'s ``plain``), a strategy in its own right (the cheapest
grounded answer: one LLM round, with the same prompt, answer checks, trace and limits as
the others), and what the embedded store's ``RAG.query`` runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from selfrag_core.config import DraftsRAGConfig, ExecutionConfig, PlainRAGConfig, config_from
from selfrag_core.engine import Generate, Note, Plan, Retrieve
from selfrag_core.errors import RAGSystemError
from selfrag_core.llm import LLMReply
from selfrag_core.prompts import Prompts, detect_language
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.questions import is_multi_part
from selfrag_core.strategies.base import (
    GENERATION_FAILED_ANSWER,
    NOT_ENOUGH_ANSWER,
    Ranking,
    Strategy,
    checked_answer,
    format_context,
    retrieval_options,
    retrieve_or_empty,
)
from selfrag_core.strategies.drafts import drafted_answer
from selfrag_core.types import Answer, RetrievedDoc


class PlainRAG(Strategy[Answer]):
    """``PlainRAG(rag_system, llm, config=None, *, execution=None, prompts=None)``.

    Retrieves ``config.top_k`` documents (:class:`~selfrag_core.config.PlainRAGConfig`)
    for the question and answers from them with the ``grounded_answer`` prompt
    (:meth:`answer_prompt`). The keywords ``top_k`` and ``llm_retries`` still build the
    config, deprecated. By default ``query``/``aquery`` never raise for backend or LLM
    failures: the fallback answer is returned and the failure is in ``result.trace``
    (``config.raise_errors`` raises them instead). ``config.verifier`` (None: the LLM-free
    ``LexicalVerifier``) checks the citations and chooses among drafts.
    """

    config: PlainRAGConfig

    def __init__(
        self,
        rag_system: BackendLike,
        llm: LLMLike,
        config: PlainRAGConfig | None = None,
        *,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
        top_k: int | None = None,
        llm_retries: int | None = None,
    ) -> None:
        super().__init__(rag_system, llm, execution=execution, prompts=prompts)
        given = {"top_k": top_k, "llm_retries": llm_retries}
        self.config = config_from(PlainRAGConfig, config, "PlainRAG", given, deprecated=given)

    def answer_prompt(self, query: str, docs: list[RetrievedDoc]) -> str:
        """The prompt PlainRAG sends for ``query`` over ``docs``: ``grounded_answer``, its
        documents within ``config.max_context_chars``."""
        context = format_context(docs, max_chars=self.config.max_context_chars)
        return self.prompts.render("grounded_answer", detect_language(query), context=context, question=query)

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        cfg = self.config
        try:
            docs = yield from self._retrieve(query, context)
            if not docs and not cfg.allow_llm_on_empty:
                yield Note(
                    "not_enough_information", "retrieval returned no documents", {"query": query[:200]}
                )
                return Answer(NOT_ENOUGH_ANSWER)
            if cfg.drafts and docs:  # one round: the answer over all and the drafts (not streamed)
                text = yield from drafted_answer(
                    self, query, docs, cfg.drafts, cfg.llm_retries, max_chars=cfg.max_context_chars
                )
            else:
                prompt = self.answer_prompt(query, docs)
                reply: LLMReply = yield Generate(self.llm, prompt, "answer", cfg.llm_retries, stream=True)
                text = reply.text
            if not cfg.check_answer:
                return Answer(text, docs)
            answer = yield from checked_answer(text.strip(), query, docs, cfg.rules, cfg.quotes)
        except RAGSystemError as e:
            if cfg.raise_errors:
                raise
            yield Note("generation_failed", f"{type(e).__name__}: {e}")
            return Answer(GENERATION_FAILED_ANSWER)
        return Answer(answer, docs)

    def continue_answer(self, query: str, docs: list[RetrievedDoc], first: str) -> Plan[Answer]:
        """The answer this strategy gives from ``docs`` when ``first``, the reply to its
        prompt over all of them, is already written (AdaptiveRAG's plain answer): with
        drafts, only the drafts' calls (none when no draft could beat ``first``,
        :func:`~selfrag_core.strategies.drafts.drafted_answer`); without, ``first`` checked."""
        cfg = self.config
        text = first
        if cfg.drafts and docs:
            text = yield from drafted_answer(
                self, query, docs, cfg.drafts, cfg.llm_retries, first=first, max_chars=cfg.max_context_chars
            )
        if not cfg.check_answer:
            return Answer(text, docs)
        return Answer((yield from checked_answer(text.strip(), query, docs, cfg.rules, cfg.quotes)), docs)

    def ranking(self) -> Ranking | None:
        """One search of the backend, no LLM call (a subclass may search otherwise: None)."""
        return "search" if type(self) is PlainRAG else None

    def estimated_calls(self, query: str) -> float:
        """One call, and one a draft on a question of one part (drafts share its round)."""
        return 1.0 + (0.0 if is_multi_part(query) else float(self.config.drafts))

    def _retrieve(self, query: str, context: Mapping[str, Any]) -> Plan[list[RetrievedDoc]]:
        """The documents for ``query``; a failed retrieval raises with ``raise_errors``,
        else it is noted and no documents are found."""
        cfg, options = self.config, retrieval_options(context)
        if not cfg.raise_errors:
            return (yield from retrieve_or_empty(self.rag_system, query, cfg.top_k, options))
        docs: list[RetrievedDoc] = yield Retrieve(self.rag_system, query, cfg.top_k, options)
        return docs


class DraftsRAG(PlainRAG):
    """PlainRAG with drafts (:class:`~selfrag_core.config.DraftsRAGConfig`): the answer over
    all the retrieved documents and a draft over each of the first two alone, written in
    one round (three LLM calls, one dependent round), the best kept by the verifier."""

    config: DraftsRAGConfig

    def __init__(
        self,
        rag_system: BackendLike,
        llm: LLMLike,
        config: DraftsRAGConfig | None = None,
        *,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
    ) -> None:
        super().__init__(rag_system, llm, config or DraftsRAGConfig(), execution=execution, prompts=prompts)

"""PlainRAG: one retrieval, one answer. The baseline every strategy is measured
against (``selfrag eval``'s ``plain``), and a strategy in its own right: the cheapest
grounded answer (one LLM round), with the same prompt, answer checks, trace and
limits as the others."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from selfrag_core.config import ExecutionConfig
from selfrag_core.engine import Note, Plan
from selfrag_core.errors import RAGSystemError
from selfrag_core.prompts import Prompts
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.strategies.base import (
    GENERATION_FAILED_ANSWER,
    NOT_ENOUGH_ANSWER,
    Strategy,
    retrieve_and_answer,
)
from selfrag_core.types import Answer
from selfrag_core.validation import check_int


class PlainRAG(Strategy[Answer]):
    """``PlainRAG(rag_system, llm, *, top_k=5, llm_retries=2, execution=None, prompts=None)``.

    Retrieves ``top_k`` documents for the question and answers from them with the
    ``grounded_answer`` prompt. ``query``/``aquery`` never raise for backend or LLM
    failures: the fallback answer is returned and the failure is in ``result.trace``.
    """

    def __init__(
        self,
        rag_system: BackendLike,
        llm: LLMLike,
        *,
        top_k: int = 5,
        llm_retries: int = 2,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
    ) -> None:
        super().__init__(rag_system, llm, execution=execution, prompts=prompts)
        self.top_k = check_int("top_k", top_k, 1)
        self.llm_retries = check_int("llm_retries", llm_retries, 0)

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        try:
            answer, docs = yield from retrieve_and_answer(self, query, context, self.top_k, self.llm_retries)
        except RAGSystemError as e:
            yield Note("generation_failed", f"{type(e).__name__}: {e}")
            return Answer(GENERATION_FAILED_ANSWER)
        return Answer(NOT_ENOUGH_ANSWER if answer is None else answer, docs)

"""PlainRAG: one retrieval, one answer. The baseline every strategy is measured
against (``selfrag eval``'s ``plain``), and a strategy in its own right: the cheapest
grounded answer (one LLM round), with the same prompt, answer checks, trace and
limits as the others."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from selfrag_core.config import ExecutionConfig, PlainRAGConfig, config_from
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


class PlainRAG(Strategy[Answer]):
    """``PlainRAG(rag_system, llm, config=None, *, execution=None, prompts=None)``.

    Retrieves ``config.top_k`` documents (:class:`~selfrag_core.config.PlainRAGConfig`)
    for the question and answers from them with the ``grounded_answer`` prompt. The
    keywords ``top_k`` and ``llm_retries`` still build the config, deprecated.
    ``query``/``aquery`` never raise for backend or LLM failures: the fallback answer is
    returned and the failure is in ``result.trace``.
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

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        cfg = self.config
        try:
            answer, docs = yield from retrieve_and_answer(self, query, context, cfg.top_k, cfg.llm_retries)
        except RAGSystemError as e:
            yield Note("generation_failed", f"{type(e).__name__}: {e}")
            return Answer(GENERATION_FAILED_ANSWER)
        return Answer(NOT_ENOUGH_ANSWER if answer is None else answer, docs)

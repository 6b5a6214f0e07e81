"""The result of :meth:`RAG.query <selfrag_core.store.RAG.query>`.

A query is :class:`~selfrag_core.strategies.plain.PlainRAG` run on the library's engine
(its ``grounded_answer`` prompt, the reply unchecked, failures raised: see
``RAG.query``), so it has a trace (the search and the LLM call, their latency, the
tokens the model reports) and obeys an ``ExecutionConfig`` (LLM-call budget, timeouts)
like every strategy. Its answer is returned as the reference specification's
:class:`QueryResult`, with the trace added.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from selfrag_core.prompts import document_blocks
from selfrag_core.store.search import SearchHit
from selfrag_core.strategies.plain import PlainRAG
from selfrag_core.types import Answer, Result, RetrievedDoc


@dataclass
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class QueryResult(Result[str]):
    """The answer of :meth:`RAG.query` with what it was built from (the specification's
    fields: ``hits``, ``sources`` the deduplicated source names, ``prompt``, ``usage``,
    ``duration``, ``llm_called``), and what every result has (:class:`~selfrag_core.types.Result`:
    ``trace``, ``citations`` over the hits, ``no_answer``)."""

    hits: list[SearchHit] = field(default_factory=list)
    prompt: str = ""
    usage: Usage = field(default_factory=Usage)
    duration: float = 0.0
    llm_called: bool = True

    @property
    def documents(self) -> list[RetrievedDoc]:
        return list(self.hits)

    def own_fields(self) -> dict[str, Any]:
        return {
            "hits": [h.to_dict() for h in self.hits],
            "prompt": self.prompt,
            "usage": self.usage.to_dict(),
            "duration": round(self.duration, 6),
            "llm_called": self.llm_called,
        }


def format_hits(hits: list[SearchHit], max_chars: int | None = None) -> str:
    """Hits as a prompt's context block: each fenced with its source and relevance,
    within ``max_chars`` characters (:func:`~selfrag_core.prompts.document_blocks`). The
    specification's name; ``RAG.query`` shows its hits as every strategy shows documents."""
    scored = ((h, h.score if h.score is not None else 0.0) for h in hits)
    return document_blocks(((h.text, h.source, f'relevance="{score:.3f}"') for h, score in scored), max_chars)


def query_result(strategy: PlainRAG, question: str, answer: Answer) -> QueryResult:
    """``RAG.query``'s result from the finished ``answer`` of ``strategy``: the hits it
    answered from, its prompt over them, the usage of its LLM call (none, and an empty
    answer, when retrieval found nothing and the LLM was not asked), the run's wall time."""
    hits = [d for d in answer.documents if isinstance(d, SearchHit)]
    calls = [e for e in answer.trace.events if e.kind == "llm"]
    usage = Usage(calls[-1].input_tokens, calls[-1].output_tokens, calls[-1].attempts) if calls else Usage()
    return QueryResult(
        answer.answer if calls else "",
        hits,
        strategy.answer_prompt(question, answer.documents),
        usage,
        answer.trace.wall_s,
        llm_called=bool(calls),
        sources=list(dict.fromkeys(h.source for h in hits)),
        trace=answer.trace,
        citations=answer.citations if calls else [],
        no_answer=answer.no_answer,
    )

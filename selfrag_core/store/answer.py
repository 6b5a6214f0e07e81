"""Answering over the embedded backend.

:meth:`RAG.query <selfrag_core.store.RAG.query>` runs :class:`RetrieveThenAnswer`, a
strategy of one search and one LLM call, on the library's engine: a query has a trace
(the search and the LLM call, their latency, the tokens the model reports) and obeys
an ``ExecutionConfig`` (LLM-call budget, timeouts) like every strategy. Its result is
the reference specification's :class:`QueryResult`, with the trace added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from selfrag_core.config import ExecutionConfig
from selfrag_core.engine import Generate, Plan, Retrieve, Run
from selfrag_core.errors import ConfigurationError, RetrievalError
from selfrag_core.llm import LLMReply
from selfrag_core.prompts import detect_language, document_blocks
from selfrag_core.store.search import SearchHit
from selfrag_core.strategies.base import Strategy
from selfrag_core.types import Result, RetrievedDoc
from selfrag_core.validation import check_int


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
    """The context block of a prompt: each hit fenced with its source and relevance,
    within ``max_chars`` characters (:func:`~selfrag_core.prompts.document_blocks`)."""
    scored = ((h, h.score if h.score is not None else 0.0) for h in hits)
    return document_blocks(((h.text, h.source, f'relevance="{score:.3f}"') for h, score in scored), max_chars)


def answer_prompts(prompt_template: str | None) -> dict[str, str] | None:
    """``RAG.query``'s ``prompt_template`` as the strategy's ``answer`` prompt, checked."""
    if prompt_template is None:
        return None
    if not isinstance(prompt_template, str):
        raise TypeError("prompt_template must be a str")
    absent = [v for v in ("context", "question") if "{" + v + "}" not in prompt_template]
    if absent:
        raise ConfigurationError(f"prompt_template must contain the placeholders {absent}")
    return {"answer": prompt_template}


class _SearchFailed(RetrievalError):
    """The search raised ``error``: carried through the engine to the plan, which
    raises it as it was (the engine would read a ``TypeError`` as a misconfigured
    backend, a ``ValueError`` as a failed retrieval)."""

    def __init__(self, error: Exception, query: str) -> None:
        super().__init__(f"{type(error).__name__}: {error}", query=query)
        self.error = error


class RAGSearch:
    """One query's search of a RAG, as the engine's backend. It keeps the hits as the
    search ranked them: the engine's reading of a backend's output merges documents
    whose first 120 characters are the same, and chunks may share a long heading."""

    def __init__(self, rag: Any, filters: Mapping[str, Any]) -> None:
        self.rag = rag
        self.filters = dict(filters)
        self.hits: list[SearchHit] = []

    def retrieve(self, query: str, top_k: int) -> list[SearchHit]:
        try:
            self.hits = self.rag.search(query, top_k, **self.filters)
        except Exception as e:
            raise _SearchFailed(e, query) from e
        return self.hits

    async def aretrieve(self, query: str, top_k: int) -> list[SearchHit]:
        try:
            self.hits = await self.rag.asearch(query, top_k, **self.filters)
        except Exception as e:
            raise _SearchFailed(e, query) from e
        return self.hits


class RetrieveThenAnswer(Strategy[QueryResult]):
    """:meth:`RAG.query` as a strategy: one search of a :class:`~selfrag_core.store.RAG`
    (``filters``, and the query context's ``metadata_filter`` and ``filters``), then one
    LLM call whose ``answer`` prompt holds the ``top_k`` hits (:func:`format_hits`, within
    ``max_context_chars``). With ``allow_llm_on_empty=False`` and no hits, the LLM is not
    called. There is no fallback: a failed search or LLM call raises as it was raised.
    """

    def __init__(
        self,
        rag: Any,
        llm: Any,
        *,
        top_k: int = 5,
        max_context_chars: int | None = None,
        allow_llm_on_empty: bool = True,
        llm_retries: int = 2,
        filters: Mapping[str, Any] | None = None,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(rag, llm, execution=execution, prompts=prompts)
        self.top_k = check_int("top_k", top_k, 1)
        self.llm_retries = check_int("llm_retries", llm_retries, 0)
        self.max_context_chars = max_context_chars
        self.allow_llm_on_empty = allow_llm_on_empty
        self.filters = dict(filters or {})

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[QueryResult]:
        options = {**self.filters, **dict(context.get("filters") or {})}
        if context.get("metadata_filter") is not None:
            options["metadata_filter"] = context["metadata_filter"]
        search = RAGSearch(self.rag_system, options)
        error = None
        try:
            yield Retrieve(search, query, self.top_k)
        except _SearchFailed as e:
            error = e.error
        if error is not None:
            raise error  # as the search raised it (outside the except: its own cause and context)
        hits = search.hits
        context_block = format_hits(hits, self.max_context_chars)
        prompt = self.prompts.render("answer", detect_language(query), context=context_block, question=query)
        sources = list(dict.fromkeys(h.source for h in hits))
        if not hits and not self.allow_llm_on_empty:
            return QueryResult("", hits, prompt, llm_called=False, sources=sources)
        reply: LLMReply = yield Generate(self.llm, prompt, "rag_answer", self.llm_retries, stream=True)
        usage = Usage(reply.input_tokens, reply.output_tokens, reply.attempts)
        return QueryResult(reply.text, hits, prompt, usage, sources=sources)

    def finish(self, result: QueryResult, run: Run) -> QueryResult:
        """The run's trace, and its wall time as the result's ``duration``."""
        result = Strategy.finish_trace(result, run)
        result.duration = run.trace.wall_s
        return result

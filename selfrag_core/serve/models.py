"""Typed request and response bodies (they generate the OpenAPI schema). Requests are
strict (no "5" for 5, no unknown fields: 422); responses declare the fields every result
shares and let each strategy's own ``to_dict()`` fields through."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

logger = logging.getLogger("selfrag.serve")

Scalar = str | int | float | bool


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class StrategyOptions(BaseModel):
    """The options that are strategy settings, by their names in the strategies' configs
    (``selfrag_core.config``): a query's per-call overrides. Each applies only to the
    strategies whose config has it (422 otherwise). ``max_iterations`` and ``threshold``,
    the old names of two, are still accepted for one release (deprecated: the server logs a
    warning naming the new name, once per old name)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for old in sorted(OLD_NAMES.keys() & data.keys()):
                _deprecated(old)
        return data

    top_k: int | None = Field(None, ge=1, description="documents retrieved per search")
    max_refinement_iterations: int | None = Field(
        None, ge=1, le=10, validation_alias=AliasChoices("max_refinement_iterations", "max_iterations"),
        description="SelfIRAG refinement iterations (`max_iterations`: its deprecated old name)",
    )  # fmt: skip
    confidence_threshold: float | None = Field(
        None, ge=0.0, le=1.0, validation_alias=AliasChoices("confidence_threshold", "threshold"),
        description="the score at which SelfIRAG or SelfHealingRAG accepts an answer "
        "(`threshold`: its deprecated old name)",
    )  # fmt: skip
    max_depth: int | None = Field(None, ge=0, le=5, description="RecursiveRAG decomposition depth")


#: the deprecated old name of an option -> its name
OLD_NAMES = {
    old: name
    for name, option in StrategyOptions.model_fields.items()
    if isinstance(option.validation_alias, AliasChoices)
    for old in option.validation_alias.choices
    if isinstance(old, str) and old != name
}


@functools.cache
def _deprecated(old: str) -> None:
    """Log, once per process, that a request used an option's deprecated old name."""
    logger.warning("selfrag serve: the query option %r is deprecated; send %r", old, OLD_NAMES[old])


class QueryOptions(StrategyOptions):
    """Per-request options: the strategy settings, and the query's limits and form."""

    max_llm_calls: int | None = Field(None, ge=1, description="LLM-call budget (may only lower the server's)")
    timeout: float | None = Field(None, gt=0, description="seconds (may only lower the server's)")
    stream: bool = Field(False, description="answer as server-sent events (trace, answer tokens, result)")


class QueryParams(QueryOptions):
    """GET ``/query/{strategy}?q=...``: the question and the options as query parameters."""

    q: str = Field(description="the question")


class QueryRequest(QueryOptions):
    """POST ``/query/{strategy}``: the question and the options as a JSON object."""

    model_config = ConfigDict(strict=True, extra="forbid")
    question: str = Field(description="the question (non-empty; length-limited by the server)")
    metadata_filter: dict[str, Scalar] | None = Field(
        None, description="passed to backends that accept a metadata filter"
    )


#: the request fields that are /query options (the OpenAI endpoint's ``selfrag`` extension
#: takes them too), and with them the deprecated old names some still take (``threshold``)
OPTIONS = frozenset(QueryRequest.model_fields) - {"question", "stream"}
OPTIONS_ACCEPTED = OPTIONS | frozenset(OLD_NAMES)


class ErrorBody(BaseModel):
    type: str
    message: str
    status: int


class ErrorResponse(BaseModel):
    """Every error: ``{"error": {"type", "message", "status"}}``; a 504 adds the partial
    ``trace`` (and the fallback ``result`` when the strategy produced one)."""

    model_config = ConfigDict(extra="allow")
    error: ErrorBody


class SourceOut(BaseModel):
    id: str | None
    text: str
    score: float | None
    score_kind: str
    metadata: dict[str, Any]


class TraceEventOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: str
    name: str
    start_s: float
    latency_s: float
    attempts: int


class TraceOut(BaseModel):
    wall_s: float
    llm_calls: int
    retrievals: int
    input_tokens: int
    output_tokens: int
    fallbacks: int
    events: list[TraceEventOut]


class QueryResponse(BaseModel):
    """A strategy result's ``to_dict()``: the shared fields below plus the strategy's own."""

    model_config = ConfigDict(extra="allow")
    answer: str
    sources: list[SourceOut]
    citations: list[dict[str, Any]] = Field(default_factory=list)
    no_answer: str | None = Field(
        None,
        description=(
            "null when `answer` is an answer; else why there is none (`answer` is then a placeholder): "
            "no_documents, not_in_documents, unusable_answer (a 200), generation_failed, "
            "retrieval_failed (a 502, type no_answer, with the result), timeout, budget_exceeded "
            "(a 504 with the result)"
        ),
    )
    trace: TraceOut


class DocumentIn(_Request):
    text: str = Field(description="the document's text (UTF-8, non-empty, not binary)")
    source: str | None = Field(
        None, min_length=1, max_length=1000, description="identifier used by DELETE; default: a content hash"
    )
    metadata: dict[str, Scalar] = Field(default_factory=dict)


class DocumentBatch(_Request):
    documents: list[DocumentIn] = Field(min_length=1)


class IngestResponse(BaseModel):
    indexed: int = Field(description="documents indexed")
    chunks: int | None = Field(description="chunks created, where the backend reports it")
    sources: list[str]
    count: int | None = Field(description="the backend's size after ingestion, where it reports one")
    persisted: bool


class DeleteResponse(BaseModel):
    source: str
    deleted: int | None = Field(description="chunks removed, where the backend reports it")
    count: int | None
    persisted: bool


class HealthResponse(BaseModel):
    status: str
    strategies: list[str]
    documents: int | None


class ReadyResponse(BaseModel):
    status: str = Field(description="ready, not_ready or shutting_down")
    checks: dict[str, str] = Field(
        default_factory=dict, description="each check (backend, llm): ok, unchecked or failed"
    )
    errors: dict[str, str] = Field(default_factory=dict, description="what each failed check raised")


class StatsResponse(BaseModel):
    strategies: dict[str, dict[str, Any]]
    documents: int | None
    queries: dict[str, int]
    limits: dict[str, Any]
    worker: int = Field(description="process id of the worker that answered (see --workers)")

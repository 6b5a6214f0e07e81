"""Configuration: frozen dataclasses validated at construction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.validation import check_int, check_positive_or_none, check_unit

DEFAULT_COMPLEXITY_KEYWORDS: tuple[str, ...] = (
    # Arabic
    "و", "أو", "ثم", "بعد", "قبل", "أسباب", "نتائج", "مقارنة", "الفرق", "العلاقة",
    "التأثير", "كيف", "لماذا", "متى", "أين",
    # English
    "and", "or", "causes", "effects", "compare", "difference", "relationship", "impact",
    "how", "why", "when",
)  # fmt: skip


@dataclass(frozen=True)
class ExecutionConfig:
    """How a query runs, shared by every strategy (and down a composed tree).

    max_concurrency: independent LLM calls and retrievals of one query that may run
        at once (hypothetical documents, sub-questions, their retrievals).
    max_llm_calls: cap on LLM calls (attempts included) per query; None for no cap.
        Calls past the cap fail with BudgetExceededError and the strategy's fallback
        applies.
    llm_timeout: seconds one LLM attempt may take (default 60; None for no limit); a
        timed-out attempt counts as a failed attempt and is retried per policy. A sync
        LLM's abandoned call runs on in a daemon thread of the library's own, so it
        never holds up the interpreter's exit nor another query's threads.
    retrieval_timeout: seconds one retrieval may take (default 30; None for no limit);
        a timed-out retrieval fails with ``RetrievalTimeoutError`` and the strategy's
        retrieval fallback applies.
    query_timeout: seconds a whole query may take; past it, calls fail fast and the
        fallbacks produce the result. Every LLM attempt, retrieval, wait for the
        concurrency limit and retry back-off is bounded by what is left of it.
    retry_initial_wait / retry_max_wait: exponential back-off between attempts.
    max_reply_chars: characters of one LLM reply the library processes (default
        100,000, about 25,000 tokens: far beyond a real answer or judgement, and what
        the JSON parser reads); the rest of a longer reply is cut off, with a
        ``reply_truncated`` fallback note (the reply's length and what was kept) in the
        trace and the log. It bounds the work after each call (parsing, grounding,
        citations) whatever the model sends.
    misconfiguration: what a programming or configuration error of the LLM or the
        backend does (a ``TypeError``/``AttributeError`` from it, rejected credentials,
        a model that does not exist; see ``errors.misconfiguration_hint``): "raise"
        (default) stops the query with a ``ConfigurationError`` naming the component
        and the fix; "fallback" treats it as any other failure (fallback answer, the
        error in the trace).
    record_content: keep each LLM call's prompt and reply and the retrieved documents'
        text in the trace's events (``detail["prompt"]``, ``detail["reply"]``, the
        documents' ``text``), for OpenTelemetry spans that capture content
        (``selfrag_core.otel``). Off by default: they are large and may hold personal data.
    sleep / async_sleep: injectable for tests (instant retries).
    knobs: what the user sets a limit by in the interface in use, by field name (the CLI
        sets ``{"query_timeout": "--timeout", ...}``); timeout and budget messages name it,
        and ``ExecutionConfig.<field>`` for a limit it does not name.
    """

    max_concurrency: int = 4
    max_llm_calls: int | None = None
    llm_timeout: float | None = 60.0
    query_timeout: float | None = None
    retry_initial_wait: float = 0.5
    retry_max_wait: float = 8.0
    retrieval_timeout: float | None = 30.0
    misconfiguration: str = "raise"
    max_reply_chars: int = 100_000
    record_content: bool = False
    sleep: Callable[[float], None] | None = field(default=None, compare=False)
    async_sleep: Callable[[float], Awaitable[None]] | None = field(default=None, compare=False)
    knobs: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_int("max_concurrency", self.max_concurrency, 1)
        if self.max_llm_calls is not None:
            check_int("max_llm_calls", self.max_llm_calls, 1)
        check_positive_or_none("llm_timeout", self.llm_timeout)
        check_positive_or_none("query_timeout", self.query_timeout)
        check_positive_or_none("retrieval_timeout", self.retrieval_timeout)
        check_int("max_reply_chars", self.max_reply_chars, 1)
        if not isinstance(self.record_content, bool):
            raise ConfigurationError(f"record_content must be True or False, got {self.record_content!r}")
        if self.misconfiguration not in ("raise", "fallback"):
            raise ConfigurationError(
                f"misconfiguration must be 'raise' or 'fallback', got {self.misconfiguration!r}"
            )
        if self.retry_initial_wait < 0 or self.retry_max_wait < 0:
            raise ConfigurationError("retry waits must be >= 0")
        unknown = sorted(set(self.knobs) - {f.name for f in fields(self)})
        if unknown:
            raise ConfigurationError(f"knobs names no field {', '.join(unknown)} of ExecutionConfig")


@dataclass(frozen=True)
class GroundingConfig:
    """LLM-free grounding checks applied to every SelfIRAG evaluation.

    enabled: when False, best-step selection uses the judge's confidence alone (as the
        reference specification does).
    min_token_support: the verifier's score at which an answer counts as supported (the
        default verifier's threshold; the name is the specification's).
    verifier: what decides support (``selfrag_core.verify.Verifier``: ``verify(sentences,
        passages, question)``), e.g. a ``CrossEncoderVerifier`` over an NLI model; None:
        the LLM-free ``LexicalVerifier``. Used for the grounding and the citations.
    """

    enabled: bool = True
    min_token_support: float = 0.5
    verifier: Any = None

    def __post_init__(self) -> None:
        check_unit("min_token_support", self.min_token_support)
        if self.verifier is not None and not callable(getattr(self.verifier, "verify", None)):
            raise TypeError(
                "verifier must have verify(sentences, passages, question), "
                f"got {type(self.verifier).__name__}"
            )


@dataclass(frozen=True)
class SelfRAGConfig:
    """SelfIRAG's settings (the specification's, plus ``grounding`` and
    ``stop_when_supported``).

    stop_when_supported: stop at the first answer whose sentences are mostly supported
        by the retrieved documents, without asking the judge (one LLM call): for a model
        whose judge cannot be trusted to improve on a supported answer (the small
        model profile sets it). False keeps the judge in charge, as specified.
    """

    max_refinement_iterations: int = 3
    confidence_threshold: float = 0.80
    enable_answer_refinement: bool = True
    enable_retrieval_refinement: bool = True
    llm_retries: int = 2
    fast_mode: bool = True
    skip_refinement_on_high_confidence: bool = True
    top_k: int = 5
    grounding: GroundingConfig = field(default_factory=GroundingConfig)
    stop_when_supported: bool = False
    #: answer the parts of a question of several parts that the chosen answer leaves out
    #: (one more retrieval and answer per part, in one parallel round; none when it covers all)
    complete_parts: bool = True

    def __post_init__(self) -> None:
        check_int("max_refinement_iterations", self.max_refinement_iterations, 1)
        check_unit("confidence_threshold", self.confidence_threshold)
        check_int("llm_retries", self.llm_retries, 0)
        check_int("top_k", self.top_k, 1)


@dataclass(frozen=True)
class RecursiveRAGConfig:
    max_depth: int = 3
    max_sub_questions: int = 4
    min_query_length: int = 40
    complexity_keywords: tuple[str, ...] = DEFAULT_COMPLEXITY_KEYWORDS
    llm_retries: int = 2
    top_k: int = 5
    #: how a question is split: "llm" (the specification's: the LLM splits every complex
    #: question), "rules" (only a question of several parts, by rule, without a call: for
    #: a model that cannot write JSON) or "auto" (by rule when that finds parts, else by
    #: the LLM)
    decomposition: str = "llm"
    #: whether the sub-answers are merged by the LLM (else joined, with their citations)
    merge: bool = True

    def __post_init__(self) -> None:
        if self.decomposition not in ("auto", "rules", "llm"):
            raise ConfigurationError(
                f"decomposition must be 'auto', 'rules' or 'llm', got {self.decomposition!r}"
            )
        if not isinstance(self.merge, bool):
            raise TypeError(f"merge must be True or False, got {self.merge!r}")
        check_int("max_depth", self.max_depth, 0)
        check_int("max_sub_questions", self.max_sub_questions, 1)
        check_int("min_query_length", self.min_query_length, 0)
        check_int("llm_retries", self.llm_retries, 0)
        check_int("top_k", self.top_k, 1)
        if isinstance(self.complexity_keywords, str):
            raise ConfigurationError("complexity_keywords must be a list of words, not a string")
        object.__setattr__(self, "complexity_keywords", tuple(self.complexity_keywords))

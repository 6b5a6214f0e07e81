"""Result types. Every public result is a dataclass with ``to_dict()`` (JSON-safe)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ScoreKind(str, Enum):
    """What a retrieval score means. Raw scores of different kinds are never compared."""

    SIMILARITY = "similarity"  # higher is better
    DISTANCE = "distance"  # lower is better
    UNKNOWN = "unknown"  # a number whose direction is not known, or no score at all


@dataclass
class RetrievedDoc:
    """One retrieved document or chunk, whatever backend it came from."""

    text: str
    score: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    score_kind: ScoreKind = ScoreKind.UNKNOWN

    @property
    def similarity(self) -> float | None:
        """The score as "higher is better", or None where that cannot be known."""
        if self.score is None:
            return None
        if self.score_kind is ScoreKind.SIMILARITY:
            return self.score
        if self.score_kind is ScoreKind.DISTANCE:
            return -self.score
        return None

    def to_dict(self) -> dict[str, Any]:
        known = self.score is None or math.isfinite(self.score)  # JSON has no NaN or Infinity
        return {
            "id": self.id,
            "text": self.text,
            "score": self.score if known else None,
            "score_kind": (self.score_kind if known else ScoreKind.UNKNOWN).value,
            "metadata": _json_safe(self.metadata),
        }


@dataclass
class Citation:
    """One sentence of an answer: the sources it cites (1-based, in the order of the
    result's ``sources``), those that support it, the best support, and what is odd."""

    sentence: str
    start: int  # offsets of the sentence in the answer
    end: int
    cited: list[int] = field(default_factory=list)
    supported_by: list[int] = field(default_factory=list)
    support: float = 0.0
    attributed: bool = False  # the model cited nothing: the library chose supported_by
    flags: list[str] = field(default_factory=list)
    #: the LLM judge's verdict on the claims of this sentence (``citations.check_with_claims``):
    #: None when unchecked, True when every claim mapped to it is supported, else False
    llm_supported: bool | None = None

    @property
    def supported(self) -> bool:
        return bool(self.supported_by)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sentence": self.sentence,
            "start": self.start,
            "end": self.end,
            "cited": list(self.cited),
            "supported_by": list(self.supported_by),
            "support": round(self.support, 4),
            "attributed": self.attributed,
            "flags": list(self.flags),
            "llm_supported": self.llm_supported,
        }


# ----------------------------------------------------------------------------- trace


@dataclass
class TraceEvent:
    """One LLM call, retrieval or absorbed failure of a query."""

    kind: str  # "llm" | "retrieval" | "fallback"
    name: str  # purpose of the call ("evaluate", "hyde_doc", ...) or what fell back
    start_s: float = 0.0  # seconds since the query started
    latency_s: float = 0.0
    attempts: int = 1
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "start_s": round(self.start_s, 6),
            "latency_s": round(self.latency_s, 6),
            "attempts": self.attempts,
        }
        if self.input_tokens is not None or self.output_tokens is not None:
            out["input_tokens"] = self.input_tokens
            out["output_tokens"] = self.output_tokens
        if self.error is not None:
            out["error"] = self.error
        if self.detail:
            out["detail"] = _json_safe(self.detail)
        return out


#: the version of the JSON shape of a trace (``Trace.to_dict``), the same in every result,
#: both adapters and the HTTP service; it changes when a field changes meaning
TRACE_SCHEMA = "selfrag.trace/1"


@dataclass
class Trace:
    """Everything that happened during one query, in the order it finished."""

    events: list[TraceEvent] = field(default_factory=list)
    started_at: float = field(default_factory=time.perf_counter)
    wall_s: float = 0.0
    #: told about every event as it is added (from the thread that adds it), in the trace's order
    listener: Callable[[TraceEvent], None] | None = field(default=None, repr=False, compare=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def add(self, event: TraceEvent) -> None:
        with self._lock:  # held while the listener hears it, so that it hears the events in order
            self.events.append(event)
            if self.listener is not None:
                self.listener(event)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started_at

    @property
    def llm_calls(self) -> int:
        """LLM calls made (attempts included)."""
        return sum(e.attempts for e in self.events if e.kind == "llm")

    @property
    def retrievals(self) -> int:
        return sum(1 for e in self.events if e.kind == "retrieval")

    @property
    def fallbacks(self) -> list[TraceEvent]:
        return [e for e in self.events if e.kind == "fallback"]

    @property
    def errors(self) -> list[TraceEvent]:
        return [e for e in self.events if e.error is not None]

    @property
    def input_tokens(self) -> int:
        return sum(e.input_tokens or 0 for e in self.events if e.kind == "llm")

    @property
    def output_tokens(self) -> int:
        return sum(e.output_tokens or 0 for e in self.events if e.kind == "llm")

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 6),
            "llm_calls": self.llm_calls,
            "retrievals": self.retrievals,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "fallbacks": [e.name for e in self.fallbacks],
            "events": [e.to_dict() for e in self.events],
            "schema": TRACE_SCHEMA,
        }


# ------------------------------------------------------------------------- SelfIRAG


@dataclass
class Grounding:
    """Cheap, LLM-free signals of whether an answer is supported by its context.

    ``token_support``: share of the answer's content tokens found in the context.
    ``span_supported``: the answer (normalised) occurs in the context as one span.
    ``degenerate``: why the answer is unusable ("empty", "bare_yes_no", "echo",
    "refusal_with_evidence", ...), or None.
    """

    token_support: float = 0.0
    span_supported: bool = False
    degenerate: str | None = None
    supported: bool = False
    #: the share of the answer's sentences some source supports (``citations.supported_share``),
    #: where the sources were at hand (SelfIRAG's steps), else None
    sentence_support: float | None = None
    #: the verifier's score of the answer in [0, 1] (``verify.verify_answer``: each sentence
    #: against one passage at a time), None for an answer with no sentence to check
    support_score: float | None = None
    #: the citations ``sentence_support`` was computed from (the result's, when this
    #: answer is chosen: computed once), else None; not part of ``to_dict``
    citations: list[Citation] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "token_support": round(self.token_support, 4),
            "span_supported": self.span_supported,
            "degenerate": self.degenerate,
            "supported": self.supported,
            "sentence_support": None if self.sentence_support is None else round(self.sentence_support, 4),
            "support_score": None if self.support_score is None else round(self.support_score, 4),
        }


@dataclass
class EvaluationResult:
    """The judge's four scores in [0, 1], their geometric mean, and grounding signals."""

    relevance: float
    accuracy: float
    completeness: float
    clarity: float
    confidence: float
    issues: list[str] = field(default_factory=list)
    suggestions: list[str] = field(default_factory=list)
    grounding: Grounding = field(default_factory=Grounding)
    parsed: bool = True  # False when the judge's output could not be read
    #: why the judge's scores carry no information and were ignored (they walk the schema,
    #: repeat for answers the grounding tells apart, or contradict it), or None
    ignored: str | None = None

    @property
    def known_confidence(self) -> float | None:
        """The confidence, or None when the judge's output could not be read or carries no
        information (the number that stands in for it then is not a score)."""
        return self.confidence if self.parsed and self.ignored is None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "relevance": self.relevance,
            "accuracy": self.accuracy,
            "completeness": self.completeness,
            "clarity": self.clarity,
            "confidence": self.known_confidence,
            "issues": list(self.issues),
            "suggestions": list(self.suggestions),
            "grounding": self.grounding.to_dict(),
            "parsed": self.parsed,
            "ignored": self.ignored,
        }


@dataclass
class RefinementStep:
    """One retrieve-generate-evaluate cycle of SelfIRAG."""

    iteration: int
    answer: str
    evaluation: EvaluationResult
    confidence: float
    query: str = ""
    action: str = ""
    reason: str = ""
    sources: list[RetrievedDoc] = field(default_factory=list)

    @property
    def step(self) -> int:
        return self.iteration

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "query": self.query,
            "answer": self.answer,
            "confidence": self.evaluation.known_confidence,
            "action": self.action,
            "reason": self.reason,
            "evaluation": self.evaluation.to_dict(),
        }


@dataclass
class SelfRAGResult:
    answer: str
    confidence: float
    iterations: int
    history: list[RefinementStep]
    sources: list[RetrievedDoc] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)
    best_iteration: int = 0
    #: each sentence of the answer with the sources it cites and those that support it
    citations: list[Citation] = field(default_factory=list)

    @property
    def final_answer(self) -> str:
        return self.answer

    @property
    def refinement_steps(self) -> int:
        return self.iterations

    @property
    def initial_quality(self) -> float:
        return self.history[0].confidence if self.history else 0.0

    @property
    def final_quality(self) -> float:
        return self.history[-1].confidence if self.history else 0.0

    @property
    def steps(self) -> list[RefinementStep]:
        return list(self.history)

    @property
    def known_confidence(self) -> float | None:
        """``confidence``, or None when the chosen step's judge output could not be read,
        carried no information or was not asked for (``evaluation.ignored`` says why)."""
        best = self.history[self.best_iteration - 1] if 0 < self.best_iteration <= len(self.history) else None
        return self.confidence if best is None or best.evaluation.known_confidence is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "confidence": self.known_confidence,
            "iterations": self.iterations,
            "best_iteration": self.best_iteration,
            "initial_quality": self.initial_quality,
            "final_quality": self.final_quality,
            "history": [s.to_dict() for s in self.history],
            "sources": [d.to_dict() for d in self.sources],
            "citations": [c.to_dict() for c in self.citations],
            "trace": self.trace.to_dict(),
        }


# -------------------------------------------------------------------------- HyDERAG


@dataclass
class HyDEResult:
    answer: str
    hypothetical_docs: list[str]
    num_retrieved: int
    num_ranked: int
    sources: list[RetrievedDoc] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)
    #: each sentence of the answer with the sources it cites and those that support it
    citations: list[Citation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "hypothetical_docs_generated": len(self.hypothetical_docs),
            "num_retrieved": self.num_retrieved,
            "num_ranked": self.num_ranked,
            "hypothetical_docs": list(self.hypothetical_docs),
            "sources": [d.to_dict() for d in self.sources],
            "citations": [c.to_dict() for c in self.citations],
            "trace": self.trace.to_dict(),
        }


# ----------------------------------------------------------------- your own strategy


@dataclass
class Answer:
    """The result of a strategy of your own (see ``Strategy``): the answer, the documents
    it came from, anything else worth reporting in ``details`` (JSON-safe values), and
    the trace the engine fills in. Every runner, the CLI, the HTTP service and both
    adapters read a result through ``answer``, ``sources``, ``trace`` and ``to_dict()``."""

    answer: str
    sources: list[RetrievedDoc] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    trace: Trace = field(default_factory=Trace)
    #: each sentence of the answer with the sources it cites and those that support it
    citations: list[Citation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            **_json_safe(self.details),
            "sources": [d.to_dict() for d in self.sources],
            "citations": [c.to_dict() for c in self.citations],
            "trace": self.trace.to_dict(),
        }


# --------------------------------------------------------------------- RecursiveRAG


@dataclass
class SubAnswer:
    question: str
    answer: str
    depth: int
    error: str | None = None
    result: RecursiveRAGResult | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"question": self.question, "answer": self.answer, "depth": self.depth}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class RecursiveRAGResult:
    answer: str
    depth: int
    decomposed: bool
    sub_questions: list[str]
    sub_answers: list[SubAnswer]
    sources: list[RetrievedDoc] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)
    reason: str = ""
    #: each sentence of the answer with the sources it cites and those that support it
    citations: list[Citation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "decomposed": self.decomposed,
            "depth": self.depth,
            "sub_questions": list(self.sub_questions),
            "sub_answers": [s.to_dict() for s in self.sub_answers],
            "reason": self.reason,
            "sources": [d.to_dict() for d in self.sources],
            "citations": [c.to_dict() for c in self.citations],
            "trace": self.trace.to_dict(),
        }


# ------------------------------------------------------------------- SelfHealingRAG


@dataclass
class HealingAttempt:
    """One attempt of SelfHealingRAG. ``score`` is what the threshold is compared with:
    the metric's score (``metric_score``) blended with the LLM-free ``evidence`` (see
    ``SelfHealingRAG``'s ``evidence_weight``)."""

    strategy: str
    answer: str
    score: float
    sources: list[RetrievedDoc] = field(default_factory=list)
    error: str | None = None
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    #: the metric's own score (the faithfulness judge's, by default), before the blend
    metric_score: float | None = None
    #: LLM-free evidence in [0, 1]: support of the answer's sentences by the sources
    #: times the coverage of the question's content words (geometric mean); 0 for a
    #: degenerate answer
    evidence: float | None = None
    #: the claims the metric judged, as (claim, supported) (the faithfulness judge's;
    #: empty for a metric that gives a number only, or when the judge failed)
    claims: list[tuple[str, bool]] = field(default_factory=list)
    #: the citations of the answer, computed once for its evidence (the report's when it
    #: is chosen); not part of ``to_dict``
    citations: list[Citation] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "answer": self.answer,
            "score": self.score,
            "metric_score": self.metric_score,
            "evidence": None if self.evidence is None else round(self.evidence, 4),
            "error": self.error,
            "llm_calls": self.llm_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "latency_s": round(self.latency_s, 6),
            "num_sources": len(self.sources),
            "claims": [{"claim": c, "supported": s} for c, s in self.claims],
        }


@dataclass
class SelfHealingReport:
    success: bool
    attempts: int
    retries: int
    strategy: str | None
    scores: list[float] = field(default_factory=list)
    threshold: float = 0.0
    answer: str = ""
    attempt_details: list[HealingAttempt] = field(default_factory=list)
    sources: list[RetrievedDoc] = field(default_factory=list)
    trace: Trace = field(default_factory=Trace)
    #: each sentence of the answer with the sources it cites and those that support it
    citations: list[Citation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "success": self.success,
            "attempts": self.attempts,
            "retries": self.retries,
            "strategy": self.strategy,
            "scores": list(self.scores),
            "threshold": self.threshold,
            "attempt_details": [a.to_dict() for a in self.attempt_details],
            "sources": [d.to_dict() for d in self.sources],
            "citations": [c.to_dict() for c in self.citations],
            "trace": self.trace.to_dict(),
        }


def _json_safe(value: Any) -> Any:
    """Best-effort conversion of metadata to JSON-safe values."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # NaN and Infinity are not JSON
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_safe(v) for v in value]
    if isinstance(value, Enum):
        return _json_safe(value.value)
    return str(value)

"""Result types. Every strategy's result is a :class:`Result`: the answer, its sources,
citations and trace, why there is no answer (``no_answer``), one ``to_dict()`` (JSON-safe)
and one ``summary()`` line; each strategy's own fields come on top."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar


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
    def source(self) -> str | None:
        """What the document is called: its ``source`` metadata, else its id (None: neither)."""
        name = self.metadata.get("source") or self.id
        return None if name is None else str(name)

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


# ------------------------------------------------------------- summary wording


#: what names a strategy's class in the summaries: the registry's ``name_of``, which
#: ``strategies.registry`` hands in when it is imported (:func:`name_strategies_by`); the
#: strategies are built on these results, so this module does not import them
_strategy_namer: list[Callable[[str], str | None]] = []


def name_strategies_by(namer: Callable[[str], str | None]) -> None:
    """Name strategy classes in the summaries with ``namer`` (a class's name in, its
    built-in name or None out): ``strategies.registry`` calls it with its ``name_of``."""
    _strategy_namer[:] = [namer]


def attempt_name(strategy: str) -> str:
    """A SelfHealingRAG attempt's strategy (its class's name) as the CLI names it: ``hyde``
    for ``HyDERAG`` (the built-in strategies' names: ``strategies.registry.BUILT_IN``),
    ``plain retrieval`` for any other class, a backend searched directly (the embedded
    ``RAG``, say)."""
    return next((name for namer in _strategy_namer if (name := namer(strategy))), "plain retrieval")


def recursive_reason(reason: str) -> str:
    """RecursiveRAG's ``reason`` for answering directly, in words: what decided it and what
    it means, e.g. "decomposition is off for this model (max_depth 0)" for
    ``decomposition is off: answered``."""
    if reason.startswith("a comparison"):
        found = "; no documents found" if reason.endswith("no documents") else ""
        return f"a comparison: each alternative searched, then answered from their passages{found}"
    why, _, outcome = reason.partition(": ")
    depth = re.fullmatch(r"max_depth (\d+) reached", why)
    if why == "decomposition is off":
        why = "decomposition is off for this model (max_depth 0)"
    elif depth:
        why = f"the deepest level of sub-questions (max_depth {depth.group(1)}) was reached"
    elif why == "one question":
        why = "one question, nothing to split (this model's preset splits only by rule, no LLM decomposition)"
    elif why == "simple query":
        why = "the question looked simple (fewer than two complexity keywords), so it was not decomposed"
    elif why.startswith("junk decomposition"):
        why = f"the model's sub-questions were unusable ({why.partition(': ')[2]})"
    elif why == "decomposition failed":
        why = "the decomposition call failed"
    elif not why:
        why = "not decomposed"
    tail = {"leaf strategy": "; answered by the leaf strategy", "no documents": "; no documents found"}
    return why + tail.get(outcome, "")


#: AdaptiveRAG's stages in words
_STAGES = {"before_answer": "before answering", "after_answer": "after the first answer"}


def route_line(trace: Trace) -> str:
    """The router's decisions (the trace's ``route`` decisions, AdaptiveRAG's), each with
    its stage, choice and reason, e.g. ``routed before answering: plain (answer plainly
    first); after the first answer: healing (the first answer covers 43% of the
    question)``; "" for a trace without any."""
    routes = [e.detail for e in trace.events if e.kind == "decision" and e.name == "route"]
    parts = [
        f"{_STAGES.get(str(d.get('stage')), str(d.get('stage')))}: {d.get('choice')} ({d.get('reason')})"
        for d in routes
    ]
    return f"routed {'; '.join(parts)}" if parts else ""


# --------------------------------------------------------------------------- results

#: the reasons a result holds no answer (``Result.no_answer``); its ``answer`` is then a
#: placeholder ("error in generating answer", "There is not enough information.", ...)
NO_ANSWER_REASONS: dict[str, str] = {
    "no_documents": "retrieval found no document to answer from",
    "not_in_documents": "the documents found do not hold the answer",
    "retrieval_failed": "the retrieval backend failed",
    "generation_failed": "the LLM failed (after its retries)",
    "unusable_answer": "every reply of the model was unusable and no source sentence answers",
    "timeout": "the query ran out of time",
    "budget_exceeded": "the query used up its LLM-call budget",
}

#: the answer when no acceptable answer could be generated (as in the reference specification)
GENERATION_FAILED_ANSWER = "error in generating answer"
#: the answer when retrieval finds nothing (as in the reference specification)
NOT_ENOUGH_ANSWER = "There is not enough information."
#: HyDERAG's answer when no document could be retrieved (as in the reference specification)
INSUFFICIENT_ANSWER = "There is insufficient information."
#: SelfHealingRAG's answer of an attempt whose retrieval found nothing (no LLM call is made)
NO_CONTEXT_ANSWER = "The context does not contain the answer."
#: the strategies' answers when nothing could be found to answer from
NO_INFORMATION_ANSWERS = frozenset({NOT_ENOUGH_ANSWER, INSUFFICIENT_ANSWER, NO_CONTEXT_ANSWER})

S = TypeVar("S")


@dataclass
class Result(Generic[S]):
    """What every strategy answers with: ``answer``, the ``sources`` it came from (the
    documents, numbered as its ``[n]`` markers count them), ``citations`` (each sentence
    with the sources that support it), the ``trace`` of what happened, and ``no_answer``:
    None when ``answer`` is one, else why not (a key of :data:`NO_ANSWER_REASONS`; the
    answer is then a placeholder, not an answer). The CLI, the HTTP service, the
    evaluation harness and both adapters read every result through these, ``to_dict()``
    and ``summary()``; a strategy's own fields come from :meth:`own_fields`.

    The shared fields but ``answer`` are keyword-only, so each result's own fields keep
    the reference specification's positions (``SelfRAGResult(answer, confidence, ...)``).
    """

    answer: str
    sources: list[S] = field(default_factory=list, kw_only=True)
    trace: Trace = field(default_factory=Trace, kw_only=True)
    #: each sentence of the answer with the sources it cites and those that support it
    citations: list[Citation] = field(default_factory=list, kw_only=True)
    #: None when ``answer`` is an answer, else why there is none (:data:`NO_ANSWER_REASONS`)
    no_answer: str | None = field(default=None, kw_only=True)

    #: what the strategy is called in a summary line ("" for none)
    label: ClassVar[str] = ""

    @property
    def documents(self) -> list[RetrievedDoc]:
        """The documents the answer was built from, as its ``[n]`` markers number them."""
        return [d for d in self.sources if isinstance(d, RetrievedDoc)]

    def own_fields(self) -> dict[str, Any]:
        """The strategy's own fields, JSON-safe: what :meth:`to_dict` adds to the shared ones."""
        return {}

    def summary(self) -> str:
        """One line for people on how the answer came about: what the CLI prints under the
        answer. A result without an answer says why; else each strategy's result says what
        it did; here, the router's decisions (the trace's ``route`` decisions, AdaptiveRAG's:
        :func:`route_line`); "" when there is nothing to say beyond the answer."""
        if self.no_answer is not None:
            return f"no answer: {NO_ANSWER_REASONS.get(self.no_answer, self.no_answer)}"
        return route_line(self.trace)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``answer``, the strategy's own fields, ``sources``, ``citations``,
        ``no_answer`` and ``trace``."""
        return {
            "answer": self.answer,
            **self.own_fields(),
            "sources": [d.to_dict() if isinstance(d, RetrievedDoc) else d for d in self.sources],
            "citations": [c.to_dict() for c in self.citations],
            "no_answer": self.no_answer,
            "trace": self.trace.to_dict(),
        }


def no_answer_reason(answer: str, documents: list[RetrievedDoc], trace: Trace) -> str | None:
    """Why ``answer`` is no answer (a key of :data:`NO_ANSWER_REASONS`),
    or None when it is one: it is empty or a placeholder (:data:`GENERATION_FAILED_ANSWER`,
    a strategy's "not enough information" answer), and the trace says why: the query's
    time or LLM-call budget ran out, the LLM or the backend failed, every reply was
    unusable, or no document was found (or those found do not hold the answer)."""
    text = answer.strip()
    if text and text != GENERATION_FAILED_ANSWER and text not in NO_INFORMATION_ANSWERS:
        return None
    failure = _failure(trace)
    if failure is not None:
        return failure
    if text == GENERATION_FAILED_ANSWER:
        rejected = any(e.name == "answer_rejected" for e in trace.fallbacks)
        return "unusable_answer" if rejected else "generation_failed"
    return "not_in_documents" if documents else "no_documents"


def _failure(trace: Trace) -> str | None:
    """What failed in a run, as its trace tells (a key of :data:`NO_ANSWER_REASONS`): its
    time or its LLM-call budget ran out, an LLM call or a retrieval failed; or None."""
    errors = [e.error or "" for e in trace.events]
    reasons = [str(e.detail.get("reason", "")) for e in trace.fallbacks]
    timed_out = any(e.startswith(("QueryTimeoutError", "LLMTimeoutError")) for e in errors)
    if timed_out or "query_timeout" in reasons:
        return "timeout"
    if any(e.startswith("BudgetExceededError") for e in errors):
        return "budget_exceeded"
    if any(e.kind == "llm" and e.error for e in trace.events):
        return "generation_failed"
    if any(e.kind == "retrieval" and e.error for e in trace.events):
        return "retrieval_failed"
    return None


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
    #: the fitted answering check's probability that the answer answers the question
    #: (``verify.informativeness``), None when unknown
    informativeness: float | None = None
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
            "informativeness": None if self.informativeness is None else round(self.informativeness, 4),
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
class SelfRAGResult(Result[RetrievedDoc]):
    confidence: float
    iterations: int
    history: list[RefinementStep]
    best_iteration: int = 0

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

    def own_fields(self) -> dict[str, Any]:
        return {
            "confidence": self.known_confidence,
            "iterations": self.iterations,
            "best_iteration": self.best_iteration,
            "initial_quality": self.initial_quality,
            "final_quality": self.final_quality,
            "history": [s.to_dict() for s in self.history],
        }

    def summary(self) -> str:
        if self.no_answer is not None:
            return super().summary()
        known = self.known_confidence
        if known is None:  # the judge's reply was unreadable, carried no information or was not asked for
            best = self.history[self.best_iteration - 1] if self.history else None
            why = (best.evaluation.ignored if best else None) or "the judge's reply could not be read"
            return f"confidence unknown ({why}) after {self.iterations} iteration(s)"
        return f"confidence {known:.2f} after {self.iterations} iteration(s)"


# -------------------------------------------------------------------------- HyDERAG


@dataclass
class HyDEResult(Result[RetrievedDoc]):
    hypothetical_docs: list[str]
    num_retrieved: int
    num_ranked: int

    def own_fields(self) -> dict[str, Any]:
        return {
            "hypothetical_docs_generated": len(self.hypothetical_docs),
            "num_retrieved": self.num_retrieved,
            "num_ranked": self.num_ranked,
            "hypothetical_docs": list(self.hypothetical_docs),
        }

    def summary(self) -> str:
        if self.no_answer is not None:
            return super().summary()
        n_docs = len(self.hypothetical_docs)
        return (
            f"{n_docs} hypothetical document(s), {self.num_retrieved} passage(s) retrieved "
            "(sources ranked by fused rank)"
        )


# ----------------------------------------------------------------- your own strategy


@dataclass
class Answer(Result[RetrievedDoc]):
    """The result of a strategy of your own (see ``Strategy``): the answer, the documents
    it came from, anything else worth reporting in ``details`` (JSON-safe values), and
    the trace the engine fills in: ``Answer(answer, sources, details)``. A result of
    your own with more fields subclasses :class:`Result` (overriding ``own_fields``)."""

    sources: list[RetrievedDoc] = field(default_factory=list)  # positional here, as it was
    details: dict[str, Any] = field(default_factory=dict)

    def own_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = _json_safe(self.details)
        return out


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
class RecursiveRAGResult(Result[RetrievedDoc]):
    depth: int
    decomposed: bool
    sub_questions: list[str]
    sub_answers: list[SubAnswer]
    reason: str = ""

    def own_fields(self) -> dict[str, Any]:
        return {
            "decomposed": self.decomposed,
            "depth": self.depth,
            "sub_questions": list(self.sub_questions),
            "sub_answers": [s.to_dict() for s in self.sub_answers],
            "reason": self.reason,
        }

    def summary(self) -> str:
        """How many sub-questions, or why it answered directly (:func:`recursive_reason`)."""
        if self.no_answer is not None:
            return super().summary()
        if self.decomposed:
            return f"decomposed into {len(self.sub_questions)} sub-question(s)"
        return f"answered directly: {recursive_reason(self.reason or '')}"


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
    #: the fitted answering check's probability that the answer answers the question
    #: (``verify.informativeness``), None when unknown
    informativeness: float | None = None
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
            "informativeness": None if self.informativeness is None else round(self.informativeness, 4),
            "error": self.error,
            "llm_calls": self.llm_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "latency_s": round(self.latency_s, 6),
            "num_sources": len(self.sources),
            "claims": [{"claim": c, "supported": s} for c, s in self.claims],
        }


@dataclass
class SelfHealingReport(Result[RetrievedDoc]):
    success: bool
    attempts: int
    retries: int
    strategy: str | None
    scores: list[float] = field(default_factory=list)
    threshold: float = 0.0
    answer: str = field(default="", kw_only=True)
    attempt_details: list[HealingAttempt] = field(default_factory=list)

    def own_fields(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "attempts": self.attempts,
            "retries": self.retries,
            "strategy": self.strategy,
            "scores": list(self.scores),
            "threshold": self.threshold,
            "attempt_details": [a.to_dict() for a in self.attempt_details],
        }

    def summary(self) -> str:
        """Each attempt's score by strategy, the threshold, and whose answer is shown, e.g.
        ``faithfulness per attempt: plain retrieval 0.60, hyde 0.50; none reached the
        threshold 0.75: the best attempt's answer (plain retrieval)``."""
        if self.no_answer is not None:
            return super().summary()
        if self.attempt_details:
            parts = [
                f"{attempt_name(a.strategy)} {'failed' if a.error else f'{a.score:.2f}'}"
                for a in self.attempt_details
            ]
        else:
            parts = [f"attempt {i} {s:.2f}" for i, s in enumerate(self.scores, 1)]
        scores = ", ".join(parts) or "no attempt"
        used = attempt_name(self.strategy) if self.strategy else None
        if self.success:
            verdict = f"{used} reached the threshold {self.threshold:.2f}"
        elif used:
            verdict = f"none reached the threshold {self.threshold:.2f}: the best attempt's answer ({used})"
        else:
            verdict = f"none reached the threshold {self.threshold:.2f} and none answered"
        return f"faithfulness per attempt: {scores}; {verdict}"


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

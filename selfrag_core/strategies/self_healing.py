"""SelfHealingRAG: try strategies in order until an answer is faithful enough.

Each attempt retrieves with one strategy and answers, then the answer is scored
(default: :class:`~selfrag_core.metrics.FaithfulnessMetric`, one LLM call) and the
score is blended with LLM-free evidence (the share of the answer's sentences a source
supports, and how far the answer and the place it comes from cover the question's
content words), so that an off-topic answer cannot pass and a judge that says the
same thing of every answer does not decide (the reference specification trusts the
metric alone: ``evidence_weight=0``). The first answer scoring at least
``confidence_threshold`` (the specification's ``quality_threshold``) is returned;
otherwise the first attempt's (the plain retrieve-and-answer, with the default
strategies) unless a later one scores higher with at least as much evidence. A
strategy is either

* a retrieval backend (anything ``_retrieve_safe`` accepts: sync or async
  ``retrieve``, with or without ``metadata_filter``, which is passed only where
  accepted): the answer is generated here from ``system_prompt``, the conversation
  memory and the retrieved context; or
* a strategy of this library (``HyDERAG``, ``RecursiveRAG``, ``SelfIRAG``, another
  ``SelfHealingRAG``): its plan runs inside this query (one LLM-call budget, one
  concurrency limit) and its ``answer`` and ``sources`` are scored.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from selfrag_core.citations import check_with_claims, cite, supported_share
from selfrag_core.config import (
    DEFAULT_SYSTEM_PROMPT,
    ExecutionConfig,
    SelfHealingRAGConfig,
    config_from,
)
from selfrag_core.engine import Deadline, Generate, Note, Plan, Retrieve, Run, without_streaming
from selfrag_core.errors import QueryTimeoutError, RAGSystemError, StrategyError
from selfrag_core.grounding import assess, question_coverage
from selfrag_core.llm import LLMReply
from selfrag_core.memory import ConversationMemory
from selfrag_core.metrics import FaithfulnessMetric, check_metric, metric_plan
from selfrag_core.prompts import Prompts, detect_language
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.runner import finish_trace
from selfrag_core.strategies.base import (
    GENERATION_FAILED_ANSWER,
    Strategy,
    answer_text,
    checked_answer,
    context_text,
    format_context,
)
from selfrag_core.types import (
    NO_CONTEXT_ANSWER,
    Citation,
    HealingAttempt,
    RetrievedDoc,
    SelfHealingReport,
    Trace,
)
from selfrag_core.verify import answers_as_well, informativeness

if TYPE_CHECKING:
    from selfrag_core.verify import Verifier

__all__ = ["DEFAULT_SYSTEM_PROMPT", "NO_CONTEXT_ANSWER", "SelfHealingRAG", "evidence"]
_ATTEMPT = "attempt"  # trace marker kind that opens each attempt


class SelfHealingRAG(Strategy[SelfHealingReport]):
    """``SelfHealingRAG(llm, strategies, *, config=None, memory=None, tracer=None,
    metric=None, execution=None, prompts=None)``, the settings in a
    :class:`~selfrag_core.config.SelfHealingRAGConfig`. The specification's keywords
    ``max_retries`` and ``system_prompt`` still build it, without a warning;
    ``quality_threshold`` (the config's ``confidence_threshold``), ``retrieval_top_k`` (its
    ``top_k``) and ``evidence_weight`` too, deprecated (a DeprecationWarning naming the
    config's setting).

    A :class:`Strategy` like the others: ``query``/``aquery``/``stream``/``astream``
    answer with a :class:`SelfHealingReport`; ``context`` may carry any setting of the
    config (``top_k``, ``confidence_threshold``, ...), ``metadata_filter`` and
    ``memory``. The specification's ``ask`` (async), ``ask_sync``, ``ask_with_report``
    and ``ask_with_report_sync`` are thin aliases.

    ``max_retries``: strategies tried after the first (at most ``max_retries + 1``
    attempts). ``memory``: a :class:`ConversationMemory` for follow-up questions, or
    None (the default: no conversation history). A conversation belongs to its caller,
    not to a strategy object that many requests share, so pass one per conversation
    (``ask*(..., memory=...)``, or ``context["memory"]``); one given here is the default
    for calls that pass none, shared by every such call. Each returned answer is added
    to the memory used, and its history goes into the answer prompt of backend
    attempts.
    ``tracer``: an object with ``record(attempt: HealingAttempt)`` (or a callable),
    told each attempt's strategy, score, LLM calls, tokens and latency. ``metric``: see
    ``selfrag_core.metrics`` (default ``FaithfulnessMetric(llm)``). ``evidence_weight``:
    the weight of the LLM-free evidence in each attempt's score (0: the metric alone,
    as the specification scores; 1: the evidence alone, no metric call is saved).
    ``config.verifier`` (None: the LLM-free ``LexicalVerifier``) checks each attempt's
    sentences for its evidence and the report's citations; a strategy among
    ``strategies`` answers with its own config's verifier.

    A query never raises for a failure one attempt can absorb; when every attempt
    raises it raises :class:`StrategyError` (``.report`` holds the report) from the
    last error.
    """

    config: SelfHealingRAGConfig
    conversational = True  # a query's context["memory"] goes into the answer prompts

    def __init__(
        self,
        llm: LLMLike,
        strategies: Sequence[BackendLike | Strategy[Any]],
        *,
        config: SelfHealingRAGConfig | None = None,
        quality_threshold: float | None = None,
        max_retries: int | None = None,
        system_prompt: str | None = None,
        retrieval_top_k: int | None = None,
        memory: ConversationMemory | None = None,
        tracer: Any = None,
        metric: Any = None,
        evidence_weight: float | None = None,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
    ) -> None:
        self._configure(llm, execution, prompts)
        if isinstance(strategies, (str, bytes)) or not isinstance(strategies, Sequence):
            raise TypeError("strategies must be a list of retrieval backends or selfrag strategies")
        if not strategies or any(s is None for s in strategies):
            raise ValueError("strategies is empty (or holds None): pass at least one retrieval strategy")
        self.strategies = list(strategies)
        self.rag_system = None  # several backends: documents are added to each directly
        given = {
            "quality_threshold": quality_threshold,
            "max_retries": max_retries,
            "system_prompt": system_prompt,
            "retrieval_top_k": retrieval_top_k,
            "evidence_weight": evidence_weight,
        }
        renamed = {"quality_threshold": "confidence_threshold", "retrieval_top_k": "top_k"}
        deprecated = {"quality_threshold", "retrieval_top_k", "evidence_weight"}
        self.config = config_from(
            SelfHealingRAGConfig, config, "SelfHealingRAG", given, renamed=renamed, deprecated=deprecated
        )
        self.memory = memory
        if tracer is not None and not (callable(getattr(tracer, "record", None)) or callable(tracer)):
            raise TypeError("tracer must have record(attempt) or be callable")
        self.tracer = tracer
        self.metric = check_metric(metric) if metric is not None else FaithfulnessMetric(llm, prompts=prompts)
        self._last: contextvars.ContextVar[SelfHealingReport | None] = contextvars.ContextVar(
            f"selfhealing_last_report_{id(self)}", default=None
        )

    # ------------------------------------------------------------------ public API
    @property
    def memory(self) -> ConversationMemory | None:
        """The default conversation memory of calls that pass none (None: no history)."""
        return self._memory

    @memory.setter
    def memory(self, memory: ConversationMemory | None) -> None:
        self._memory = _check_memory(memory)

    @property
    def last_report(self) -> SelfHealingReport | None:
        """The report of the last query made *in this context* (thread or asyncio task),
        or None. A best-effort convenience: concurrent callers never see each other's
        report, but a report set inside ``asyncio.gather``'s tasks is not visible to the
        caller of ``gather``. Use the report ``query`` returns for certainty."""
        return self._last.get()

    async def ask(
        self,
        query: str,
        *,
        top_k: int | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        memory: ConversationMemory | None = None,
    ) -> str:
        """The specification's entry point: ``(await aquery(...)).answer``."""
        report = await self.aquery(query, _context(top_k, metadata_filter, memory))
        return report.answer

    def ask_sync(
        self,
        query: str,
        *,
        top_k: int | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        memory: ConversationMemory | None = None,
    ) -> str:
        """Sync ``ask``: ``query(...).answer``; safe inside a running event loop."""
        return self.query(query, _context(top_k, metadata_filter, memory)).answer

    async def ask_with_report(
        self,
        query: str,
        *,
        top_k: int | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        memory: ConversationMemory | None = None,
    ) -> SelfHealingReport:
        """Like ``ask``, returning the whole :class:`SelfHealingReport` (``aquery``)."""
        return await self.aquery(query, _context(top_k, metadata_filter, memory))

    def ask_with_report_sync(
        self,
        query: str,
        *,
        top_k: int | None = None,
        metadata_filter: Mapping[str, Any] | None = None,
        memory: ConversationMemory | None = None,
    ) -> SelfHealingReport:
        """Sync ``ask_with_report`` (``query``)."""
        return self.query(query, _context(top_k, metadata_filter, memory))

    def estimated_calls(self, query: str) -> float:
        """Its first attempt and the metric, and half of the others' (a backend's attempt: one call)."""
        tried = self.strategies[: self.config.max_retries + 1]
        metric = 1.0 if self.config.evidence_weight < 1 else 0.0
        each = [(s.estimated_calls(query) if isinstance(s, Strategy) else 1.0) + metric for s in tried]
        return each[0] + 0.5 * sum(each[1:])

    def finish(self, result: SelfHealingReport, run: Run) -> SelfHealingReport:
        """The trace, the citations checked against the claims the metric judged for the
        chosen attempt (no extra call), each attempt's calls, tokens and latency, the
        tracer, ``last_report``."""
        report = finish_trace(result, run, verifier=self.verifier, citing=cite)
        chosen = _chosen(report.attempt_details, report.threshold, self.verifier)
        if chosen is not None and chosen.claims and chosen.answer == report.answer:
            report.citations = check_with_claims(report.citations, chosen.claims)
        _attempt_usage(report.attempt_details, run.trace)
        if self.tracer is not None:
            record = getattr(self.tracer, "record", None) or self.tracer
            for attempt in report.attempt_details:
                record(attempt)
        self._last.set(report)
        return report

    # ------------------------------------------------------------------ the plan
    def _plan(self, query: str, context: dict[str, Any]) -> Plan[SelfHealingReport]:
        cfg = self.config
        metadata_filter = context.get("metadata_filter")
        if metadata_filter is not None and not isinstance(metadata_filter, Mapping):
            raise TypeError("metadata_filter must be a dict or None")
        memory = context.get("memory")
        memory = _check_memory(memory) if memory is not None else self._memory
        history = "" if memory is None else memory.history_text()
        threshold = cfg.confidence_threshold
        attempts: list[HealingAttempt] = []
        last_error: BaseException | None = None
        for strategy in self.strategies[: cfg.max_retries + 1]:
            name = type(strategy).__name__
            yield Note(name, kind=_ATTEMPT, detail={"attempt": len(attempts) + 1})
            attempt = HealingAttempt(strategy=name, answer="", score=0.0)
            attempts.append(attempt)
            try:
                attempt.answer, attempt.sources = yield from self._attempt(
                    strategy, query, history, cfg.top_k, metadata_filter
                )
            except (RAGSystemError, ValueError, TypeError) as e:
                last_error = e
                attempt.error = f"{type(e).__name__}: {e}"
                yield Note("attempt_failed", attempt.error, {"strategy": name, "then": "next strategy"})
                continue
            attempt.score, reason = yield from self._score(query, attempt)
            verdict = {"strategy": name, "score": attempt.score, "threshold": threshold}
            yield Note("verdict", None, {**verdict, "passed": attempt.score >= threshold}, kind="progress")
            if attempt.score >= threshold:
                break
            why = f"{name} scored {attempt.score:.2f} < {threshold:.2f}"
            yield Note("below_threshold", why, {"reason": reason}, kind="decision")

        report = _report(attempts, threshold, self.verifier)
        if report.strategy is not None and report.answer != GENERATION_FAILED_ANSWER:
            checked = yield from checked_answer(report.answer, query, report.sources, self.rules, self.quotes)
            if checked != report.answer:  # no attempt gave a usable answer
                report.answer, report.success, report.citations = checked, False, []
        if report.strategy is None:
            raise StrategyError(
                f"every attempt failed ({len(attempts)} strategies tried); the last error: {last_error}. "
                "Check the backends and the LLM; report.attempt_details holds each error.",
                report=report,
            ) from last_error
        if memory is not None:
            memory.add(query, report.answer)
        return report

    def _attempt(
        self,
        strategy: Any,
        query: str,
        history: str,
        top_k: int,
        metadata_filter: Mapping[str, Any] | None,
    ) -> Plan[tuple[str, list[RetrievedDoc]]]:
        context = {"metadata_filter": dict(metadata_filter)} if metadata_filter else {}
        if isinstance(strategy, Strategy):  # composed through its plan, not called as a backend
            result = yield from without_streaming(strategy.plan(query, context))
            if result.answer == GENERATION_FAILED_ANSWER:
                raise StrategyError(f"{type(strategy).__name__} could not generate an answer (see the trace)")
            return str(result.answer), list(result.sources)
        docs: list[RetrievedDoc] = yield Retrieve(strategy, query, top_k, context)
        if not docs:
            yield Note("nothing_retrieved", f"{type(strategy).__name__} returned no documents")
            return NO_CONTEXT_ANSWER, []
        prompt = self.prompts.render(
            "healing_answer", detect_language(query), system_prompt=self.config.system_prompt,
            history=history, context=format_context(docs), question=query,
        )  # fmt: skip
        reply: LLMReply = yield Generate(self.llm, prompt, "answer")
        return answer_text(reply.text), docs

    def _score(self, query: str, attempt: HealingAttempt) -> Plan[tuple[float, str]]:
        """The attempt's score: the metric's blended with the evidence (both recorded on
        the attempt), and why."""
        contexts = [d.text for d in attempt.sources]
        weight = self.config.evidence_weight
        try:
            yield Deadline("scoring the answer")
        except QueryTimeoutError as e:
            yield Note("metric_failed", f"{type(e).__name__}: {e}", {"then": "score 0"})
            return 0.0, "the query ran out of time"
        attempt.citations = cite(attempt.answer, attempt.sources, verifier=self.verifier, question=query)
        attempt.evidence = evidence(query, attempt.answer, attempt.sources, attempt.citations)
        attempt.informativeness = informativeness(attempt.answer, query, contexts, self.verifier)
        try:
            scored = yield from metric_plan(self.metric, query, attempt.answer, contexts)
        except (RAGSystemError, ValueError, TypeError) as e:
            yield Note("metric_failed", f"{type(e).__name__}: {e}", {"then": "score 0"})
            return weight * attempt.evidence, "the metric failed"
        attempt.metric_score, attempt.claims = scored.score, list(scored.claims)
        score = (1 - weight) * scored.score + weight * attempt.evidence
        return score, f"{scored.reason}; evidence {attempt.evidence:.2f}"


def evidence(
    question: str,
    answer: str,
    sources: Sequence[RetrievedDoc],
    citations: Sequence[Citation] | None = None,
    *,
    verifier: Verifier | None = None,
) -> float:
    """LLM-free evidence for an answer, in [0, 1]: the geometric mean of the share of its
    sentences a source supports (:func:`~selfrag_core.citations.supported_share`) and the
    coverage of the question's content words by the answer and the place in the context
    it comes from (:func:`~selfrag_core.grounding.question_coverage`). 0 for a degenerate
    answer or one without sources. ``citations``: the answer's, when they are already
    computed (``cite(answer, sources, verifier=verifier)``); else they are, checked by
    ``verifier`` (None: the default :class:`~selfrag_core.verify.LexicalVerifier`)."""
    context = context_text(list(sources))
    if not context or assess(answer, question, context).degenerate is not None:
        return 0.0
    if citations is None:
        citations = cite(answer, list(sources), verifier=verifier, question=question)
    share = supported_share(citations) or 0.0
    return math.sqrt(share * question_coverage(answer, question, context))


def _context(
    top_k: int | None, metadata_filter: Mapping[str, Any] | None, memory: ConversationMemory | None
) -> dict[str, Any]:
    options = {"top_k": top_k, "metadata_filter": metadata_filter, "memory": memory}
    return {k: v for k, v in options.items() if v is not None}


def _check_memory(memory: object) -> ConversationMemory | None:
    if memory is None or isinstance(memory, ConversationMemory):
        return memory
    raise TypeError("memory must be a ConversationMemory or None")


def _chosen(
    attempts: list[HealingAttempt], threshold: float, verifier: Verifier | None = None
) -> HealingAttempt | None:
    """The first attempt that cleared the threshold; else the first answered one unless a
    later one scores higher with at least as much evidence (never on the metric alone)
    and answers the question as well (:func:`~selfrag_core.verify.answers_as_well` by the
    checks of ``verifier``: a restatement is easier to support than an answer, and says
    nothing)."""
    answered = [a for a in attempts if a.error is None]
    chosen = next((a for a in answered if a.score >= threshold), None)
    if chosen is None and answered:
        chosen = answered[0]
        for attempt in answered[1:]:
            if (
                attempt.score > chosen.score
                and (attempt.evidence or 0.0) >= (chosen.evidence or 0.0)
                and answers_as_well(attempt.informativeness, chosen.informativeness, verifier)
            ):
                chosen = attempt
    return chosen


def _report(
    attempts: list[HealingAttempt], threshold: float, verifier: Verifier | None = None
) -> SelfHealingReport:
    """The report of the :func:`_chosen` attempt."""
    chosen = _chosen(attempts, threshold, verifier)
    return SelfHealingReport(
        success=chosen is not None and chosen.score >= threshold,
        attempts=len(attempts),
        retries=max(len(attempts) - 1, 0),
        strategy=None if chosen is None else chosen.strategy,
        scores=[a.score for a in attempts],
        threshold=threshold,
        answer="" if chosen is None else chosen.answer,
        attempt_details=attempts,
        sources=[] if chosen is None else chosen.sources,
        citations=[] if chosen is None else list(chosen.citations or []),
    )


def _attempt_usage(attempts: list[HealingAttempt], trace: Trace) -> None:
    """Fill each attempt's calls, tokens and latency from the trace: attempts run one
    after another, so the events between two attempt markers belong to the first."""
    spans: list[list[Any]] = []
    for event in trace.events:
        if event.kind == _ATTEMPT:
            spans.append([event.start_s])
        elif spans and event.kind == "llm":
            spans[-1].append(event)
    ends = [s[0] for s in spans[1:]] + [trace.wall_s or time.perf_counter() - trace.started_at]
    for attempt, span, end in zip(attempts, spans, ends, strict=False):
        events = span[1:]
        attempt.llm_calls = sum(e.attempts for e in events)
        attempt.input_tokens = sum(e.input_tokens or 0 for e in events)
        attempt.output_tokens = sum(e.output_tokens or 0 for e in events)
        attempt.latency_s = end - span[0]

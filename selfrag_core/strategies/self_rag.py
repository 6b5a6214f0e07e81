"""SelfIRAG: retrieve, generate, self-evaluate, refine answer and query, repeat.

Differences from the reference implementation, on purpose:

* The refined answer is not thrown away: the next iteration evaluates it (against
  the documents it was written from, so its [n] markers name the documents they
  meant) instead of generating a fresh answer, so refinement can actually win. The
  expanded query's new documents are shown to its next refinement.
* A refinement is shown the whole context only when something may be missing (the
  judge gave search keywords, or scored completeness below the threshold); otherwise
  the documents the answer used (cited or supporting its sentences) suffice beside
  the judge's issues.
* Beside the judge's confidence (kept exactly as specified: the geometric mean of
  relevance, accuracy, completeness and clarity, each clamped to [0, 1]) every
  evaluation carries LLM-free grounding signals (``selfrag_core.grounding``) and the
  share of the answer's sentences a source supports (``selfrag_core.citations``).
* Plain first, improve only on evidence: the first answer is the plain
  retrieve-and-answer (the ``grounded_answer`` prompt over the first retrieval, what
  ``PlainRAG`` answers; in ``fast_mode`` the combined answer-and-judge call's answer).
  It is the reference; a later step replaces it only when it is better grounded, or
  as well grounded and both the judge and the sentence support say so, never on the
  judge's score alone. When no step is supported, the best-supported one is kept.
* A judge whose scores carry no information (they walk the schema: 1, 2, 3, 4; every
  criterion has the same score in two evaluations; every criterion at the schema's
  bound against the grounding signals) is recorded as ignored in the trace, and the
  query makes no further judge call. A first answer whose sentences are mostly
  supported then stops the loop: the question costs two LLM calls.
  ``steps[i].reason`` says why each decision was taken.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from selfrag_core.citations import cite, supported_share
from selfrag_core.config import ExecutionConfig, SelfRAGConfig
from selfrag_core.engine import Deadline, Generate, Note, Plan
from selfrag_core.errors import ParseError, QueryTimeoutError, RAGSystemError
from selfrag_core.grounding import assess, degenerate_reason
from selfrag_core.llm import LLMReply
from selfrag_core.parsing import parse_json_object
from selfrag_core.prompts import (
    ANSWER_EVALUATION_SCHEMA,
    EVALUATION_SCHEMA,
    Prompts,
    detect_language,
)
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.retrieval import _deduplicate, _doc_key
from selfrag_core.strategies.base import (
    GENERATION_FAILED_ANSWER,
    NOT_ENOUGH_ANSWER,
    Strategy,
    answer_text,
    complete_parts,
    context_text,
    format_context,
    quoted_answer,
    retrieval_options,
    retrieve_or_empty,
    usable_answer,
)
from selfrag_core.strategies.drafts import drafted_answer
from selfrag_core.types import EvaluationResult, Grounding, RefinementStep, RetrievedDoc, SelfRAGResult

_DIMENSIONS = ("relevance", "accuracy", "completeness", "clarity")
#: a score written as text: a number, then optionally "/10" or "out of 10" (see _unit)
_SCORE_TEXT = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(\s*(?:/|out\s+of)\s*10)?", re.IGNORECASE)


def _unit(value: Any) -> float | None:
    """A judge's score as a number in [0, 1], or None when it cannot be read.

    One rule: a score is on the 0-10 scale the schemas ask for, clamped to [0, 10] and
    divided by 10 (7 -> 0.7, 11 or a 400-digit number -> 1.0, -3 -> 0.0). A float
    (a number written with a decimal point) from 0 to 1 is the one exception: it is
    read as already in [0, 1] (0.85 -> 0.85, 1.0 -> 1.0; the integer 1 is 0.1). A
    string is read as the number it spells, which may be followed by "/10" or "out of
    10" ("9/10", "9 out of 10" -> 0.9, always on the 0-10 scale). Unreadable: booleans,
    non-finite numbers (NaN, Infinity), any other text or type. Never raises.
    """
    if isinstance(value, str):
        match = _SCORE_TEXT.fullmatch(value.strip())
        if match is None:
            return None
        number, out_of_ten = match.group(1), match.group(2) is not None
        x: float = float(number)  # digits only: never raises, a huge number is inf (clamped below)
        fraction = "." in number and not out_of_ten
    elif (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value)
    ):
        x, fraction = value, isinstance(value, float)  # an int stays exact: 10**400 is never a float
    else:
        return None
    if fraction and 0.0 <= x <= 1.0:
        return float(x)
    return min(max(x, 0), 10) / 10


def geometric_mean(values: list[float]) -> float:
    if any(v <= 0.0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _strings(value: Any, limit: int = 5) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [str(v).strip() for v in value if str(v).strip()][:limit]


def evaluation_from(data: Mapping[str, Any], raw: str) -> EvaluationResult:
    """Build an EvaluationResult from the judge's parsed JSON. Raises ParseError."""
    scores = {d: _unit(data.get(d)) for d in _DIMENSIONS}
    if all(v is None for v in scores.values()):
        raise ParseError("the evaluation holds none of relevance/accuracy/completeness/clarity", raw=raw)
    dims = {d: (0.5 if v is None else v) for d, v in scores.items()}
    return EvaluationResult(
        relevance=dims["relevance"],
        accuracy=dims["accuracy"],
        completeness=dims["completeness"],
        clarity=dims["clarity"],
        confidence=geometric_mean(list(dims.values())),
        issues=_strings(data.get("issues")),
        suggestions=_strings(data.get("suggestions")),
        parsed=not any(v is None for v in scores.values()),
    )


def unparsed_evaluation() -> EvaluationResult:
    """Neutral scores used when the judge's output could not be read."""
    return EvaluationResult(0.5, 0.5, 0.5, 0.5, 0.5, parsed=False)


def _points(evaluation: EvaluationResult) -> list[int]:
    """The four scores on the schema's 0-10 scale."""
    return [round(getattr(evaluation, d) * 10) for d in _DIMENSIONS]


def uninformative(evaluation: EvaluationResult, earlier: list[EvaluationResult]) -> str | None:
    """Why the judge's scores carry no information, or None. Small models fill the
    schema instead of judging: their four scores walk it (1, 2, 3, 4 or 0, 1, 2, 3, in
    the order the schema lists the criteria or shuffled: 1, 0, 2, 3), repeat one number on every criterion for
    answers the grounding signals tell apart (one supported by the context, one not),
    or sit at the schema's bound against them (10 everywhere for an answer the context
    does not support, 0 everywhere for one the context holds word for word).
    ``evaluation.grounding`` must be set."""
    if not evaluation.parsed:
        return None
    points = _points(evaluation)
    steps = {b - a for a, b in itertools.pairwise(points)}
    walked = len(steps) == 1 and abs(next(iter(steps))) == 1
    if walked or sorted(points) in ([0, 1, 2, 3], [1, 2, 3, 4]):  # the first steps, shuffled
        return f"the scores walk the schema ({', '.join(map(str, points))})"
    if len(set(points)) > 1:
        return None
    g = evaluation.grounding
    if any(e.parsed and _points(e) == points and e.grounding.supported != g.supported for e in earlier):
        return f"the same score ({points[0]}) on every criterion for a supported and an unsupported answer"
    if points[0] == 10 and not g.supported:
        return "every criterion at the schema's maximum for an answer the context does not support"
    if points[0] == 0 and g.span_supported:
        return "every criterion at the schema's minimum for an answer the context holds word for word"
    return None


@dataclass
class _Judge:
    """The judge's record in one query: its evaluations, and why it was switched off."""

    evaluations: list[EvaluationResult] = field(default_factory=list)
    off: str | None = None


def _tier(g: Grounding) -> int:
    """How strong the LLM-free evidence for an answer is (an index of ``_TIERS``)."""
    if g.degenerate is not None:
        return 0
    if not g.supported:
        return 1
    return 3 if (g.sentence_support or 0.0) >= 0.5 else 2


#: evidence tiers of a step, weakest first (see _tier)
_TIERS = ("degenerate", "unsupported", "grounded", "grounded with mostly supported sentences")


class SelfIRAG(Strategy[SelfRAGResult]):
    """Iterative self-evaluation and refinement over any backend and any LLM.

    ``SelfIRAG(rag_system, llm, config=None, *, execution=None, prompts=None)``;
    raises ``ValueError`` when ``llm`` is falsy. ``query`` / ``aquery`` never raise for
    backend or LLM failures: the fallback answer is returned and the failure is in
    ``result.trace``. ``config.verifier`` (or ``config.grounding.verifier``; None: the
    LLM-free ``LexicalVerifier``) decides each step's grounding, ``stop_when_supported``,
    the choice among drafts and the citations.
    """

    config: SelfRAGConfig

    def __init__(
        self,
        rag_system: BackendLike,
        llm: LLMLike,
        config: SelfRAGConfig | None = None,
        *,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
    ) -> None:
        super().__init__(rag_system, llm, execution=execution, prompts=prompts)
        if config is not None and not isinstance(config, SelfRAGConfig):
            raise TypeError("config must be a SelfRAGConfig")
        self.config = config or SelfRAGConfig()

    def get_stats(self) -> dict[str, Any]:
        c = self.config
        return {
            "max_refinement_iterations": c.max_refinement_iterations,
            "confidence_threshold": c.confidence_threshold,
            "enable_answer_refinement": c.enable_answer_refinement,
            "enable_retrieval_refinement": c.enable_retrieval_refinement,
            "llm_retries": c.llm_retries,
            "fast_mode": c.fast_mode,
        }

    # ------------------------------------------------------------------ the loop
    def estimated_calls(self, query: str) -> float:
        """An answer and its evaluation."""
        return 2.0

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[SelfRAGResult]:
        cfg = self.config
        lang = detect_language(query)
        options = retrieval_options(context)
        history: list[RefinementStep] = []
        judge = _Judge()
        current_query = query
        candidate: str | None = None  # the refined answer carried into the next iteration
        written_from: list[RetrievedDoc] = []  # the documents the refinement was shown

        for iteration in range(1, cfg.max_refinement_iterations + 1):
            docs = yield from retrieve_or_empty(self.rag_system, current_query, cfg.top_k, options)
            if not docs and iteration == 1:  # nothing to answer from: no LLM call, as PlainRAG
                why, detail = "retrieval returned no documents", {"query": query[:200]}
                yield Note("not_enough_information", why, detail)
                return SelfRAGResult(NOT_ENOUGH_ANSWER, confidence=0.0, iterations=0, history=[])
            fresh: list[RetrievedDoc] = []
            if candidate is not None:  # judged on what it was written from; new documents wait
                known = {_doc_key(d) for d in written_from}
                fresh = [d for d in _deduplicate(docs) if _doc_key(d) not in known]
                docs = written_from
            ctx = format_context(docs)
            if candidate is None:
                generated = yield from self._answer_and_evaluate(query, ctx, docs, lang, judge, iteration)
                if generated is None:  # the LLM is unreachable: stop, nothing to refine
                    if not history:
                        history.append(self._failed_step(iteration, current_query, docs))
                    break
                answer, evaluation = generated
                action = "generate" if iteration == 1 else "regenerate"
            else:
                answer, action = candidate, "evaluate_refined"
                evaluation = yield from self._evaluate(query, ctx, docs, answer, lang, judge)
            step = RefinementStep(
                iteration, answer, evaluation, evaluation.confidence,
                query=current_query, action=action, sources=docs,
            )  # fmt: skip
            history.append(step)

            stop, step.reason = self._stop_decision(
                step, judge, last=iteration == cfg.max_refinement_iterations
            )
            if stop:
                break
            candidate = None
            if cfg.enable_answer_refinement:
                written_from = _refinement_documents(step, cfg.confidence_threshold) + fresh
                candidate = yield from self._refine(query, written_from, answer, evaluation, lang)
            if cfg.enable_retrieval_refinement and evaluation.suggestions and judge.off is None:
                current_query = _expand(current_query, evaluation.suggestions[:2])

        return (yield from self._finish(query, history, options))

    def _finish(
        self, query: str, history: list[RefinementStep], options: dict[str, Any]
    ) -> Plan[SelfRAGResult]:
        """The result of the loop's ``history``: the selected step's answer, a quote or the
        fallback answer when it is unusable, its parts completed when the config asks."""
        cfg = self.config
        best = self._select(history)
        answer, confidence = best.answer, best.confidence
        unusable = best.evaluation.grounding.degenerate if self.config.grounding.enabled else None
        if unusable is not None and answer != GENERATION_FAILED_ANSWER:  # every step is unusable
            quote = quoted_answer(query, best.sources) if unusable != "query_timeout" else None
            then = "a quote" if quote else "fallback answer"
            detail = {"reason": unusable, "answer": answer[:200], "then": then}
            yield Note("answer_rejected", f"no usable answer: the best step's is {unusable}", detail)
            answer, confidence = quote or GENERATION_FAILED_ANSWER, 0.0
        sources, citations = best.sources, list(best.evaluation.grounding.citations or [])
        if cfg.complete_parts and answer != GENERATION_FAILED_ANSWER:
            completed, sources = yield from complete_parts(
                self, query, answer, sources, cfg.top_k, cfg.llm_retries, options
            )
            if completed != answer:
                answer, citations = completed, []  # cited anew when the result is finished
        return SelfRAGResult(
            answer=answer,
            confidence=confidence,
            iterations=len(history),
            history=history,
            sources=sources,
            best_iteration=best.iteration,
            citations=citations,  # computed once, as it was graded
        )

    # ------------------------------------------------------------------ decisions
    def _stop_decision(self, step: RefinementStep, judge: _Judge, *, last: bool) -> tuple[bool, str]:
        cfg, g = self.config, step.evaluation.grounding
        known = step.evaluation.known_confidence
        if cfg.grounding.enabled and known is None and _tier(g) == 3:
            why = judge.off or "the judge's reply could not be read"
            return True, f"{_TIERS[3]} and no judge score to improve on ({why}): stop"
        conf = f"confidence {step.confidence:.2f}" if known is not None else "no judge score"
        if known is not None and known >= cfg.confidence_threshold:
            if self._acceptable(step) and cfg.skip_refinement_on_high_confidence:
                return True, f"{conf} >= threshold {cfg.confidence_threshold:.2f}: stop"
            if self._acceptable(step):  # the user asked for every iteration
                verdict = f"{conf} >= threshold, refining anyway (skip_refinement_on_high_confidence=False)"
                return (True, f"{verdict}; iteration cap reached") if last else (False, verdict)
            why = g.degenerate or f"token support {g.token_support:.2f}"
            verdict = f"judge confident ({conf}) but the answer is not grounded ({why})"
        elif known is not None:
            verdict = f"{conf} < threshold {cfg.confidence_threshold:.2f}"
        else:
            verdict = f"{conf}, the answer is {_TIERS[_tier(g)]}"
        if last:
            return True, f"{verdict}; iteration cap reached"
        plans = []
        if cfg.enable_answer_refinement:
            plans.append("refine the answer")
        if cfg.enable_retrieval_refinement and step.evaluation.suggestions and judge.off is None:
            plans.append(f"expand the query with {step.evaluation.suggestions[:2]}")
        return False, f"{verdict}: " + (" and ".join(plans) or "retry")

    def _acceptable(self, step: RefinementStep) -> bool:
        return step.evaluation.grounding.supported if self.config.grounding.enabled else True

    def _select(self, history: list[RefinementStep]) -> RefinementStep:
        """The first step (the plain answer) unless a later one is better on evidence
        (:meth:`_better`); with grounding disabled, the highest confidence (as the
        specification selects). The earliest wins a tie."""
        if not self.config.grounding.enabled:
            best = max(history, key=lambda s: s.confidence)  # max keeps the first maximum
            best.reason += " | selected: highest confidence"
            return best
        best, why = history[0], "the first answer, no later one better on evidence"
        for step in history[1:]:
            verdict = self._better(step, best)
            if verdict is not None:
                best, why = step, verdict
        if _tier(best.evaluation.grounding) <= 1:
            why += "; no step is supported by the context: the best-supported one"
        best.reason += f" | selected: {why}"
        return best

    def _better(self, step: RefinementStep, reference: RefinementStep) -> str | None:
        """Why ``step`` is better than ``reference`` on evidence, or None: a higher tier;
        in the same unsupported tier, clearly more of its words in the context; in the
        same grounded tier, a higher readable judge confidence AND at least the same
        share of supported sentences (two independent signals agree)."""
        g, ref = step.evaluation.grounding, reference.evaluation.grounding
        tier, ref_tier = _tier(g), _tier(ref)
        if tier < ref_tier:
            return None
        if tier > ref_tier:
            return f"step {step.iteration} is {_TIERS[tier]}, step {reference.iteration} {_TIERS[ref_tier]}"
        if tier <= 1:
            if g.token_support > ref.token_support + 0.1:
                support = f"{g.token_support:.2f} > {ref.token_support:.2f}"
                return f"step {step.iteration} is better supported (token support {support})"
            return None
        conf, ref_conf = step.evaluation.known_confidence, reference.evaluation.known_confidence
        if conf is None or ref_conf is None or conf <= ref_conf:
            return None
        if (g.sentence_support or 0.0) < (ref.sentence_support or 0.0):
            return None
        return (
            f"step {step.iteration}: the judge ({conf:.2f} > {ref_conf:.2f}) and the sentence support "
            f"({g.sentence_support or 0.0:.2f} >= {ref.sentence_support or 0.0:.2f}) agree"
        )

    def _failed_step(self, iteration: int, query: str, docs: list[RetrievedDoc]) -> RefinementStep:
        evaluation = EvaluationResult(0.0, 0.0, 0.0, 0.0, 0.0, parsed=False)
        evaluation.grounding.degenerate = "generation_failed"
        return RefinementStep(
            iteration, GENERATION_FAILED_ANSWER, evaluation, 0.0,
            query=query, action="generate", reason="the LLM call failed; see the trace", sources=docs,
        )  # fmt: skip

    # ------------------------------------------------------------------ LLM steps
    def _gen(self, purpose: str, prompt: str, schema: Mapping[str, Any] | None = None) -> Generate:
        return Generate(self.llm, prompt, purpose, self.config.llm_retries, schema)

    def _grounding(self, answer: str, query: str, docs: list[RetrievedDoc]) -> Plan[Grounding]:
        """The answer's LLM-free grounding signals, its citations among them (computed once
        per answer). Past the query's deadline none are computed: the answer counts as
        unusable (``degenerate="query_timeout"``), with the QueryTimeoutError in the trace."""
        try:
            yield Deadline("grounding the answer")
        except QueryTimeoutError as e:
            yield Note(
                "grounding_skipped", f"{type(e).__name__}: {e}", {"then": "the answer counts as unusable"}
            )
            return Grounding(degenerate="query_timeout")
        grounding = assess(
            answer,
            query,
            context_text(docs),
            min_token_support=self.config.grounding.min_token_support,
            passages=[d.text for d in docs],
            verifier=self.config.verifier,
        )
        if grounding.supported:
            grounding.citations = cite(answer, docs, verifier=self.config.verifier, question=query)
            grounding.sentence_support = supported_share(grounding.citations)
        return grounding

    def _answer_and_evaluate(
        self, query: str, ctx: str, docs: list[RetrievedDoc], lang: str, judge: _Judge, iteration: int
    ) -> Plan[tuple[str, EvaluationResult] | None]:
        """Generate and evaluate: one call in fast mode (two-step on a parse failure);
        two-step, the first answer is the plain one (the ``grounded_answer`` prompt)."""
        if self.config.fast_mode and judge.off is None:
            prompt = self.prompts.render("answer_and_evaluate", lang, context=ctx, question=query)
            try:
                reply: LLMReply = yield self._gen("answer_and_evaluate", prompt, ANSWER_EVALUATION_SCHEMA)
                data = parse_json_object(reply.text)
                answer = data.get("answer")
                if not isinstance(answer, str) or not answer.strip():
                    raise ParseError("the reply has no 'answer' string", raw=reply.text)
                answer = answer_text(answer)
                evaluation = evaluation_from(data, reply.text)
                evaluation.grounding = yield from self._grounding(answer, query, docs)
                return answer, (yield from self._read(evaluation, judge))
            except ParseError as e:
                yield Note("fast_mode_parse_failed", str(e), {"raw": e.raw[:500], "then": "two-step"})
            except RAGSystemError as e:
                yield Note("generation_failed", f"{type(e).__name__}: {e}")
                return None
        template = "grounded_answer" if iteration == 1 else "answer"
        try:
            reply = yield self._gen(
                "answer", self.prompts.render(template, lang, context=ctx, question=query)
            )
            answer = answer_text(reply.text)
            if iteration == 1:
                # PlainRAG's answer, checked as PlainRAG checks it (an unusable one with no
                # quote to take its place is kept, for the next step to refine); then the
                # drafts, written only when the verifier doubts it, may beat it
                answer = yield from usable_answer(answer, query, docs, self.quotes, otherwise=answer)
                if self.config.drafts:
                    answer = yield from drafted_answer(
                        self, query, docs, self.config.drafts, self.config.llm_retries, first=answer
                    )
        except RAGSystemError as e:
            yield Note("generation_failed", f"{type(e).__name__}: {e}")
            return None
        grounding = None
        if self.config.stop_when_supported and self.config.grounding.enabled:
            grounding = yield from self._grounding(answer, query, docs)
            if _tier(grounding) == 3:  # well supported: nothing the judge says would change it
                evaluation = unparsed_evaluation()
                evaluation.grounding = grounding
                evaluation.ignored = "not asked: the answer is well supported (stop_when_supported)"
                return answer, evaluation
        evaluation = yield from self._evaluate(query, ctx, docs, answer, lang, judge, grounding)
        return answer, evaluation

    def _evaluate(
        self,
        query: str,
        ctx: str,
        docs: list[RetrievedDoc],
        answer: str,
        lang: str,
        judge: _Judge,
        grounding: Grounding | None = None,
    ) -> Plan[EvaluationResult]:
        """The judge's evaluation of ``answer`` with its grounding signals (``grounding``,
        when they are already known); no LLM call once the judge was found to carry no
        information in this query."""
        if grounding is None:
            grounding = yield from self._grounding(answer, query, docs)
        if judge.off is not None:
            evaluation = unparsed_evaluation()
            evaluation.grounding, evaluation.ignored = grounding, f"judge off for this query: {judge.off}"
            return evaluation
        prompt = self.prompts.render("evaluate", lang, context=ctx, question=query, answer=answer)
        try:
            reply: LLMReply = yield self._gen("evaluate", prompt, EVALUATION_SCHEMA)
            evaluation = evaluation_from(parse_json_object(reply.text), reply.text)
        except ParseError as e:
            yield Note("evaluation_parse_failed", str(e), {"raw": e.raw[:500], "then": "neutral scores"})
            evaluation = unparsed_evaluation()
        except RAGSystemError as e:
            yield Note("evaluation_failed", f"{type(e).__name__}: {e}", {"then": "neutral scores"})
            evaluation = unparsed_evaluation()
        evaluation.grounding = grounding
        return (yield from self._read(evaluation, judge))

    def _read(self, evaluation: EvaluationResult, judge: _Judge) -> Plan[EvaluationResult]:
        """Record the judge's evaluation; when it carries no information, mark it ignored,
        say so in the trace and switch the judge off for the rest of the query. The
        verdict is a ``verdict`` note (its confidence None when the reply was unreadable
        or ignored)."""
        if self.config.grounding.enabled:  # else the specification's behaviour: the judge decides
            reason = uninformative(evaluation, judge.evaluations)
            judge.evaluations.append(evaluation)
            if reason is not None:
                evaluation.ignored = judge.off = reason
                detail = {"scores": _points(evaluation), "then": "no more judge calls in this query"}
                # expected of a small model, not a failure: a decision, with no WARNING line
                yield Note("judge_uninformative", reason, detail, kind="decision")
        verdict = {"confidence": evaluation.known_confidence, "scores": _points(evaluation)}
        yield Note("verdict", None, verdict if evaluation.parsed else {"confidence": None}, kind="progress")
        return evaluation

    def _refine(
        self, query: str, docs: list[RetrievedDoc], answer: str, evaluation: EvaluationResult, lang: str
    ) -> Plan[str | None]:
        prompt = self.prompts.render(
            "refine", lang, context=format_context(docs), question=query, answer=answer,
            issues="; ".join(evaluation.issues) or "-", suggestions=", ".join(evaluation.suggestions) or "-",
        )  # fmt: skip
        try:
            reply: LLMReply = yield self._gen("refine", prompt)
        except RAGSystemError as e:
            yield Note("refinement_failed", f"{type(e).__name__}: {e}", {"then": "regenerate"})
            return None
        refined = answer_text(reply.text)
        reason = degenerate_reason(refined, query, context_text(docs))
        if reason is not None:
            yield Note("refinement_discarded", reason, {"refined": refined[:200], "then": "regenerate"})
            return None
        return refined


def _refinement_documents(step: RefinementStep, threshold: float) -> list[RetrievedDoc]:
    """The documents a refinement of ``step``'s answer is shown: all the step's when
    something may be missing (the judge gave search keywords, or scored completeness
    below ``threshold``: an unreadable judge's neutral 0.5 included) or the answer's
    sources are not known (no citations: grounding off, or the answer unsupported); else
    the documents the answer used (cited, or supporting one of its sentences), in their
    order: with the judge's issues, they are what the refinement needs."""
    docs, citations, evaluation = step.sources, step.evaluation.grounding.citations, step.evaluation
    if evaluation.suggestions or evaluation.completeness < threshold or not citations:
        return list(docs)
    used = {n for c in citations for n in (*c.cited, *c.supported_by) if 1 <= n <= len(docs)}
    return [docs[n - 1] for n in sorted(used)] or list(docs)


def _expand(query: str, keywords: list[str]) -> str:
    words = set(query.casefold().split())
    extra = [k for k in keywords if k.casefold() not in words and k.strip()]
    return f"{query} {' '.join(extra)}" if extra else query

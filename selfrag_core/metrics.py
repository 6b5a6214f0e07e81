"""Answer-quality metrics. ``FaithfulnessMetric``: the share of an answer's claims
that its context supports, judged by the LLM in one call.

A metric is anything with one of (checked in this order):

* ``plan(question, answer, contexts)`` returning an engine plan (like this module's
  metric): it runs inside the query, sharing its budget and concurrency limit;
* ``ascore(question, answer, contexts)`` and/or ``score(question, answer, contexts)``
  returning a number in [0, 1] (clamped): called through the engine as one step
  named "metric" (async code prefers ``ascore``, sync code ``score``; the other is
  bridged), so it is timed, traced and counted like an LLM call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from selfrag_core.config import ExecutionConfig
from selfrag_core.engine import Generate, Note, Plan, Run, run_async, run_sync
from selfrag_core.errors import ParseError, RAGSystemError
from selfrag_core.grounding import assess, degenerate_reason, is_refusal
from selfrag_core.llm import LLMReply, run_coroutine_sync
from selfrag_core.parsing import parse_json
from selfrag_core.prompts import FAITHFULNESS_SCHEMA, Prompts, detect_language, document_block
from selfrag_core.protocols import LLMLike
from selfrag_core.validation import check_int


@dataclass
class FaithfulnessScore:
    """A score in [0, 1], the judged claims as (claim, supported), and why."""

    score: float
    claims: list[tuple[str, bool]] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "claims": [{"claim": c, "supported": s} for c, s in self.claims],
            "reason": self.reason,
        }


#: claims of one judge reply that are read (the prompt asks for at most eight)
MAX_CLAIMS = 100


_VERDICTS = {"true": True, "yes": True, "supported": True, "false": False, "no": False, "unsupported": False}


def _supported(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    return _VERDICTS.get(value.strip().lower()) if isinstance(value, str) else None


def parse_claims(text: str) -> list[tuple[str, bool]]:
    """Read ``{"claims": [{"claim", "supported"}, ...]}`` (or a bare list): the first
    ``MAX_CLAIMS`` items. Raises ParseError, and nothing else."""
    data = parse_json(text)
    items = data.get("claims") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ParseError("the reply holds no 'claims' list", raw=text)
    items = items[:MAX_CLAIMS]
    verdicts = [(item, _supported(item.get("supported"))) for item in items if isinstance(item, dict)]
    claims = [(str(item.get("claim", "")).strip(), v) for item, v in verdicts if v is not None]
    if items and not claims:
        raise ParseError("no claim carries a true/false 'supported' verdict", raw=text)
    return claims


class FaithfulnessMetric:
    """``FaithfulnessMetric(llm, *, retries=2, prompts=None, execution=None)``.

    ``score`` / ``ascore`` / ``plan`` give a continuous score in [0, 1]: supported
    claims / claims, from ONE LLM call; ``judge`` / ``ajudge`` the whole
    :class:`FaithfulnessScore`, the judged claims included. LLM-free guards from
    ``selfrag_core.grounding`` come first: a degenerate answer (empty, echo of the question or prompt, bare
    yes/no to a wh-question, refusal despite evidence) or a refusal scores 0 with no
    call, and so does an answer with no context; none can clear any threshold. When
    the judge fails or its reply cannot be read, the score falls back to the
    answer's token support in the context (recorded as a fallback).
    """

    def __init__(
        self,
        llm: LLMLike,
        *,
        retries: int = 2,
        prompts: Mapping[str, str] | Prompts | None = None,
        execution: ExecutionConfig | None = None,
    ) -> None:
        if not llm:
            raise ValueError("llm is required: FaithfulnessMetric judges claims with an LLM")
        self.llm = llm
        self.retries = check_int("retries", retries, 0)
        self.prompts = Prompts(prompts)
        self.execution = execution or ExecutionConfig()

    def plan(self, question: str, answer: str, contexts: Sequence[str]) -> Plan[FaithfulnessScore]:
        texts = [c.strip() for c in contexts if c and c.strip()]
        context = "\n\n".join(texts)
        degenerate = degenerate_reason(answer, question, context)
        if degenerate is not None:
            return FaithfulnessScore(0.0, reason=f"degenerate answer: {degenerate}")
        if is_refusal(answer):
            return FaithfulnessScore(0.0, reason="the answer is a refusal")
        if not context:
            return FaithfulnessScore(0.0, reason="no context to support the answer")
        fenced = "\n".join(document_block(i, text) for i, text in enumerate(texts, 1))
        prompt = self.prompts.render("faithfulness", detect_language(answer), context=fenced, answer=answer)
        try:
            reply: LLMReply = yield Generate(
                self.llm, prompt, "faithfulness", self.retries, FAITHFULNESS_SCHEMA
            )
            claims = parse_claims(reply.text)
        except (ParseError, RAGSystemError) as e:
            raw = {"raw": e.raw[:500]} if isinstance(e, ParseError) else {}
            yield Note(
                "faithfulness_judge_failed", f"{type(e).__name__}: {e}", {**raw, "then": "token support"}
            )
            support = assess(answer, question, context).token_support
            return FaithfulnessScore(support, reason="judge unavailable: token support in the context")
        if not claims:
            return FaithfulnessScore(0.0, reason="the judge found no claims")
        supported = sum(1 for _, ok in claims if ok)
        return FaithfulnessScore(
            supported / len(claims), claims, f"{supported}/{len(claims)} claims supported"
        )

    def judge(self, question: str, answer: str, contexts: Sequence[str]) -> FaithfulnessScore:
        """The whole verdict: the score, the judged claims and why (``score`` is its number).
        The claims can check an answer's citations sentence by sentence
        (:func:`~selfrag_core.citations.check_with_claims`)."""
        return run_sync(self.plan(question, answer, contexts), Run(self.execution))

    async def ajudge(self, question: str, answer: str, contexts: Sequence[str]) -> FaithfulnessScore:
        """Async :meth:`judge`."""
        return await run_async(self.plan(question, answer, contexts), Run(self.execution))

    def score(self, question: str, answer: str, contexts: Sequence[str]) -> float:
        return self.judge(question, answer, contexts).score

    async def ascore(self, question: str, answer: str, contexts: Sequence[str]) -> float:
        return (await self.ajudge(question, answer, contexts)).score


# --------------------------------------------------------------------- any metric


def _unit_score(value: Any) -> str:
    score = float(value)
    if score != score:
        raise ValueError("the metric returned NaN")
    return repr(min(1.0, max(0.0, score)))


class _MetricCall:
    """One call of a custom ``score``/``ascore`` metric, shaped as an LLM for the engine."""

    def __init__(self, metric: Any, question: str, answer: str, contexts: list[str]) -> None:
        self.metric, self.args = metric, (question, answer, contexts)

    def generate(self, prompt: str) -> str:
        if callable(getattr(self.metric, "score", None)):
            return _unit_score(self.metric.score(*self.args))
        return _unit_score(run_coroutine_sync(lambda: self.metric.ascore(*self.args)))

    async def agenerate(self, prompt: str) -> str:
        if callable(getattr(self.metric, "ascore", None)):
            return _unit_score(await self.metric.ascore(*self.args))
        return await asyncio.to_thread(self.generate, prompt)


def check_metric(metric: Any) -> Any:
    if not any(callable(getattr(metric, name, None)) for name in ("plan", "score", "ascore")):
        raise TypeError(
            f"{type(metric).__name__} is not a metric: give it score(question, answer, contexts) "
            "-> float, an async ascore(...), or plan(...)"
        )
    return metric


def metric_plan(metric: Any, question: str, answer: str, contexts: list[str]) -> Plan[FaithfulnessScore]:
    """Score with any metric inside a plan. Raises the metric's failure."""
    if callable(getattr(metric, "plan", None)):
        result = yield from metric.plan(question, answer, contexts)
        return result if isinstance(result, FaithfulnessScore) else FaithfulnessScore(float(result))
    call = _MetricCall(metric, question, answer, contexts)
    reply: LLMReply = yield Generate(call, "", "metric", 0)
    return FaithfulnessScore(float(reply.text), reason=type(metric).__name__)

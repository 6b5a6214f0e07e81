"""SelfHealingRAG and FaithfulnessMetric: thresholds, fallbacks, memory, reports, concurrency."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from selfrag_core import (
    ConversationMemory,
    ExecutionConfig,
    FaithfulnessMetric,
    HealingAttempt,
    LLMOutput,
    SelfHealingRAG,
    SelfHealingRAGConfig,
    StrategyError,
)
from selfrag_core.errors import ConfigurationError
from selfrag_core.metrics import parse_claims
from selfrag_core.strategies.self_healing import DEFAULT_SYSTEM_PROMPT, NO_CONTEXT_ANSWER
from selfrag_core.testing import FakeLLM, FakeRetriever, FakeStructuredLLM

QUESTION = "What does the SLA say about uptime?"
GOOD_DOC = "The SLA guarantees 99.9 percent uptime every month."
OFF_DOC = "The company office is located in Berlin near the river."


def claims(*supported: bool) -> str:
    return json.dumps({"claims": [{"claim": f"claim {i}", "supported": s} for i, s in enumerate(supported)]})


def judge_llm(verdicts: dict[str, str], answer: str = "The SLA guarantees 99.9 percent uptime.") -> FakeLLM:
    """Answers every question with ``answer``; the judge replies by which context it sees."""

    def reply(prompt: str) -> str:
        if "factual claims" in prompt:
            return next((v for k, v in verdicts.items() if k in prompt), claims(False))
        return answer

    return FakeLLM(reply)


# ---------------------------------------------------------------------- metric


def test_metric_scores_the_share_of_supported_claims_in_one_call() -> None:
    llm = FakeStructuredLLM(claims(True, True, False, True))
    score = FaithfulnessMetric(llm).score(QUESTION, "The SLA guarantees 99.9 percent uptime.", [GOOD_DOC])
    assert score == pytest.approx(0.75)
    assert (
        llm.n_calls == 1 and llm.calls[0].schema is not None and "claims" in llm.calls[0].schema["properties"]
    )


async def test_metric_async_matches_sync() -> None:
    metric = FaithfulnessMetric(FakeLLM(claims(True, False)))
    assert await metric.ascore(QUESTION, "Uptime is 99.9 percent.", [GOOD_DOC]) == 0.5


@pytest.mark.parametrize(
    ("answer", "contexts", "reason"),
    [
        ("", [GOOD_DOC], "degenerate"),
        ("Yes", [GOOD_DOC], "degenerate"),  # bare yes/no to a wh-question
        (QUESTION, [GOOD_DOC], "degenerate"),  # echo of the question
        ("The information is not available in the context.", [OFF_DOC], "refusal"),
        ("Uptime is 99.9 percent.", [], "no context"),
    ],
)
def test_degenerate_answers_score_zero_without_a_call(answer: str, contexts: list[str], reason: str) -> None:
    llm = FakeLLM(claims(True))  # a judge that would approve anything
    metric = FaithfulnessMetric(llm)
    result = _run_plan(metric.plan(QUESTION, answer, contexts))
    assert result.score == 0.0 and reason in result.reason
    assert llm.n_calls == 0


def _run_plan(plan: Any) -> Any:
    from selfrag_core.engine import Run, run_sync

    return run_sync(plan, Run(ExecutionConfig()))


def test_metric_falls_back_to_token_support_when_the_judge_fails() -> None:
    metric = FaithfulnessMetric(FakeLLM("I think it is fine."), retries=0)
    result = _run_plan(metric.plan(QUESTION, "The SLA guarantees 99.9 percent uptime.", [GOOD_DOC]))
    assert 0.5 < result.score <= 1.0 and "token support" in result.reason


def test_parse_claims_tolerates_fences_strings_and_rejects_unreadable() -> None:
    text = (
        '```json\n{"claims": [{"claim": "a", "supported": "yes"}, {"claim": "b", "supported": false}]}\n```'
    )
    assert parse_claims(text) == [("a", True), ("b", False)]
    assert parse_claims('[{"claim": "a", "supported": true}]') == [("a", True)]
    from selfrag_core.errors import ParseError

    with pytest.raises(ParseError):
        parse_claims('{"claims": [{"claim": "a", "supported": "maybe"}]}')


# ---------------------------------------------------------------------- healing loop


def test_first_strategy_clearing_the_threshold_wins_without_trying_others() -> None:
    llm = judge_llm({GOOD_DOC: claims(True, True)})
    second = FakeRetriever([OFF_DOC])
    rag = SelfHealingRAG(llm, [FakeRetriever([GOOD_DOC]), second])
    report = rag.ask_with_report_sync(QUESTION)
    assert report.success and report.attempts == 1 and report.retries == 0
    assert report.scores == [1.0] and report.strategy == "FakeRetriever"
    assert second.queries == [] and llm.n_calls == 2  # answer + judge
    assert DEFAULT_SYSTEM_PROMPT in llm.prompts[0] and GOOD_DOC in llm.prompts[0]


class KeywordBackend(FakeRetriever):
    pass


def test_heals_with_the_next_strategy_and_reports_each_attempt() -> None:
    llm = judge_llm({OFF_DOC: claims(True, False, False), GOOD_DOC: claims(True, True)})
    rag = SelfHealingRAG(llm, [FakeRetriever([OFF_DOC]), KeywordBackend([GOOD_DOC])])
    report = rag.ask_with_report_sync(QUESTION)
    assert report.success and report.attempts == 2 and report.retries == 1
    # the metric's score blended with the evidence: the answer is in no sentence of OFF_DOC
    assert [a.metric_score for a in report.attempt_details] == [pytest.approx(1 / 3), 1.0]
    assert [a.evidence for a in report.attempt_details] == [0.0, 1.0]
    assert report.scores == [pytest.approx(1 / 6), 1.0]
    assert report.strategy == "KeywordBackend" and report.threshold == 0.75
    assert [a.llm_calls for a in report.attempt_details] == [2, 2]
    assert report.sources[0].text == GOOD_DOC
    d = report.to_dict()
    assert {"success", "attempts", "retries", "strategy", "scores", "threshold"} <= d.keys()
    assert d["attempt_details"][0]["strategy"] == "FakeRetriever"


def test_no_strategy_clears_the_threshold_returns_the_best() -> None:
    llm = judge_llm({OFF_DOC: claims(True, False), GOOD_DOC: claims(True, True, False)})
    rag = SelfHealingRAG(
        llm,
        [FakeRetriever([OFF_DOC]), KeywordBackend([GOOD_DOC])],
        config=SelfHealingRAGConfig(confidence_threshold=0.9),
    )
    report = rag.ask_with_report_sync(QUESTION)
    assert not report.success and report.attempts == 2
    assert report.strategy == "KeywordBackend"
    assert report.scores == [pytest.approx(0.25), pytest.approx(5 / 6)]


def test_the_metric_alone_does_not_replace_the_first_answer() -> None:
    """A later attempt that the judge likes better but the evidence supports less loses
    to the first (the plain retrieve-and-answer)."""
    answers = iter(
        ["The SLA guarantees 99.9 percent uptime.", "The office is in Berlin, and its uptime is monitored."]
    )

    def reply(prompt: str) -> str:
        if "factual claims" in prompt:
            return claims(True, False) if "99.9" in prompt.split("Answer:")[-1] else claims(True, True)
        return next(answers)

    # the second answer is supported (by a document on another subject) but covers less of the question
    monitored = "The company office is located in Berlin near the river, and its uptime is monitored."
    backends = [FakeRetriever([GOOD_DOC]), FakeRetriever([monitored])]
    report = SelfHealingRAG(
        FakeLLM(reply), backends, config=SelfHealingRAGConfig(confidence_threshold=0.95)
    ).ask_with_report_sync(QUESTION)
    first, second = report.attempt_details
    assert (first.metric_score, second.metric_score) == (0.5, 1.0)
    assert first.evidence is not None and second.evidence is not None and first.evidence > second.evidence
    assert second.score > first.score  # blended, the second scores higher ...
    assert report.answer == first.answer and report.strategy == "FakeRetriever"  # ... but has less evidence


def test_an_off_topic_answer_cannot_pass_on_a_perfect_judge_score() -> None:
    """From the local model's runs: "Frank has made significant contributions to
    world-systems theory" for a question on Dadaism, which the judge scored 1.0."""
    docs = [
        "Dada was an art movement of the European avant-garde, founded in Zurich in 1916.",
        "Frank has made significant contributions to world-systems theory.",
    ]
    answer = "Frank has made significant contributions to world-systems theory."
    llm = judge_llm({"Dada": claims(True)}, answer=answer)
    report = SelfHealingRAG(llm, [FakeRetriever(docs)], max_retries=0).ask_with_report_sync(
        "What movement was Dadaism part of?"
    )
    attempt = report.attempt_details[0]
    assert attempt.metric_score == 1.0 and attempt.evidence == 0.0
    assert attempt.score == 0.5 and not report.success


def test_max_retries_limits_the_attempts() -> None:
    backends = [FakeRetriever([OFF_DOC]) for _ in range(4)]
    rag = SelfHealingRAG(judge_llm({}), backends, max_retries=1)
    report = rag.ask_with_report_sync(QUESTION)
    assert report.attempts == 2 and [len(b.queries) for b in backends] == [1, 1, 0, 0]


def test_empty_retrieval_scores_zero_without_llm_calls() -> None:
    llm = judge_llm({GOOD_DOC: claims(True)})
    report = SelfHealingRAG(llm, [FakeRetriever([]), FakeRetriever([GOOD_DOC])]).ask_with_report_sync(
        QUESTION
    )
    first = report.attempt_details[0]
    assert first.answer == NO_CONTEXT_ANSWER and first.score == 0.0 and first.llm_calls == 0
    assert report.success and report.attempts == 2


def test_a_failing_strategy_is_skipped() -> None:
    llm = judge_llm({GOOD_DOC: claims(True)})
    broken = FakeRetriever([GOOD_DOC], fail=OSError("index down"))
    report = SelfHealingRAG(llm, [broken, KeywordBackend([GOOD_DOC])]).ask_with_report_sync(QUESTION)
    assert report.success and report.strategy == "KeywordBackend"
    assert "index down" in (report.attempt_details[0].error or "")


def test_every_attempt_raising_raises_strategy_error_with_the_report() -> None:
    backends = [FakeRetriever(fail=OSError("down 1")), FakeRetriever(fail=OSError("down 2"))]
    rag = SelfHealingRAG(judge_llm({}), backends)
    with pytest.raises(StrategyError) as info:
        rag.ask_sync(QUESTION)
    report = info.value.report
    assert report.attempts == 2 and report.strategy is None and not report.success
    assert all(a.error for a in report.attempt_details)
    assert "down 2" in str(info.value.__cause__)
    assert rag.last_report is report


def test_answer_llm_failure_is_an_attempt_error() -> None:
    llm = FakeLLM([ConnectionError("llm down")])
    rag = SelfHealingRAG(llm, [FakeRetriever([GOOD_DOC])], execution=ExecutionConfig(retry_initial_wait=0))
    with pytest.raises(StrategyError, match="every attempt failed"):
        rag.ask_sync(QUESTION)


def test_metadata_filter_is_passed_only_where_accepted() -> None:
    seen: list[Any] = []

    class Filtered:
        async def retrieve(self, query: str, top_k: int = 5, metadata_filter: Any = None) -> list[str]:
            seen.append((top_k, metadata_filter))
            return [OFF_DOC]

    llm = judge_llm({GOOD_DOC: claims(True)})
    rag = SelfHealingRAG(llm, [Filtered(), FakeRetriever([GOOD_DOC])])
    report = rag.ask_with_report_sync(QUESTION, top_k=3, metadata_filter={"team": "ops"})
    assert seen == [(3, {"team": "ops"})] and report.success
    # the second strategy, which took no filter, answered: the trace says its results were unfiltered
    ignored = [e.detail for e in report.trace.fallbacks if e.name == "retrieval_options_ignored"]
    assert ignored == [{"backend": "FakeRetriever", "options": ["metadata_filter"]}]


def test_custom_metric_objects() -> None:
    class Sync:
        def score(self, question: str, answer: str, contexts: list[str]) -> float:
            return 0.9 if GOOD_DOC in contexts else 0.1

    class Async:
        async def ascore(self, question: str, answer: str, contexts: list[str]) -> float:
            return 2.0  # clamped to 1.0

    backends = [FakeRetriever([OFF_DOC]), FakeRetriever([GOOD_DOC])]
    llm = FakeLLM("The SLA guarantees 99.9 percent uptime.")
    report = SelfHealingRAG(llm, backends, metric=Sync()).ask_with_report_sync(QUESTION)
    assert [a.metric_score for a in report.attempt_details] == [0.1, 0.9]
    assert report.scores == [0.05, 0.95]  # blended with the evidence: 0 in OFF_DOC, 1 in GOOD_DOC
    assert [e.name for e in report.trace.events if e.kind == "llm"].count("metric") == 2
    report = SelfHealingRAG(llm, backends, metric=Async()).ask_with_report_sync(QUESTION)
    assert [a.metric_score for a in report.attempt_details] == [1.0, 1.0]  # clamped
    assert report.scores == [0.5, 1.0]  # 1.0 passes only where the evidence is there too
    with pytest.raises(TypeError):
        SelfHealingRAG(llm, backends, metric=object())


def test_failing_metric_scores_zero_and_keeps_the_answer() -> None:
    class Broken:
        def score(self, question: str, answer: str, contexts: list[str]) -> float:
            raise RuntimeError("judge crashed")

    report = SelfHealingRAG(
        FakeLLM("answer text"), [FakeRetriever([GOOD_DOC])], metric=Broken()
    ).ask_with_report_sync("uptime SLA")
    assert report.scores == [0.0] and report.answer == "answer text" and not report.success
    assert "metric_failed" in [e.name for e in report.trace.fallbacks]


def test_validation() -> None:
    llm = FakeLLM()
    with pytest.raises(ValueError, match="empty"):
        SelfHealingRAG(llm, [])
    with pytest.raises(ValueError):
        SelfHealingRAG(None, [FakeRetriever()])
    with pytest.raises(ConfigurationError), pytest.warns(DeprecationWarning):
        SelfHealingRAG(llm, [FakeRetriever()], quality_threshold=1.5)
    with pytest.raises(ConfigurationError):
        SelfHealingRAG(llm, [FakeRetriever()], max_retries=-1)
    with pytest.raises(TypeError):
        SelfHealingRAG(llm, [FakeRetriever()], tracer=object())
    with pytest.raises(ValueError):
        SelfHealingRAG(llm, [FakeRetriever()]).ask_sync("  ")


def test_arabic_question_uses_arabic_prompts() -> None:
    def reply(prompt: str) -> str:
        return claims(True) if "ادعاءاتها" in prompt else "يضمن الاتفاق توفر الخدمة بنسبة 99.9 بالمئة."

    llm = FakeLLM(reply)
    doc = "يضمن اتفاق مستوى الخدمة توفر الخدمة بنسبة 99.9 بالمئة شهريًا."
    report = SelfHealingRAG(llm, [FakeRetriever([doc])]).ask_with_report_sync("ماذا يضمن اتفاق مستوى الخدمة؟")
    assert report.success and "الوثائق" in llm.prompts[0] and "ادعاءاتها" in llm.prompts[1]


# ---------------------------------------------------------------------- memory, tracer, reports


def test_memory_is_bounded_and_feeds_follow_ups() -> None:
    memory = ConversationMemory(max_turns=2)
    llm = judge_llm({GOOD_DOC: claims(True)})
    rag = SelfHealingRAG(llm, [FakeRetriever([GOOD_DOC])], memory=memory)
    assert rag.memory is memory
    rag.ask_sync("What does the SLA say about uptime?")
    rag.ask_sync("And per month?")
    assert (
        "What does the SLA say about uptime?" in llm.prompts[-2] and "Conversation so far" in llm.prompts[-2]
    )
    rag.ask_sync("Anything else on uptime?")
    assert len(memory) == 2 and memory.turns[0][0] == "And per month?"
    with pytest.raises(ConfigurationError):
        ConversationMemory(max_turns=0)


def test_memory_can_be_replaced_but_only_by_a_memory() -> None:
    llm = judge_llm({GOOD_DOC: claims(True)})
    rag = SelfHealingRAG(llm, [FakeRetriever([GOOD_DOC])])
    rag.ask_sync("What does the SLA say about uptime?")
    fresh = ConversationMemory()
    rag.memory = fresh  # e.g. one conversation per client
    rag.ask_sync("And per month?")
    assert "Conversation so far" not in llm.prompts[-2] and len(fresh) == 1
    with pytest.raises(TypeError, match="ConversationMemory"):
        rag.memory = ["not", "a", "memory"]  # type: ignore[assignment]
    with pytest.raises(TypeError, match="ConversationMemory"):
        SelfHealingRAG(llm, [FakeRetriever([GOOD_DOC])], memory={})  # type: ignore[arg-type]


def test_tracer_receives_tokens_and_calls_per_attempt() -> None:
    recorded: list[HealingAttempt] = []

    class Tracer:
        def record(self, attempt: HealingAttempt) -> None:
            recorded.append(attempt)

    def reply(prompt: str) -> LLMOutput:
        if "factual claims" in prompt:
            return LLMOutput(claims(OFF_DOC not in prompt), input_tokens=50, output_tokens=5)
        return LLMOutput("The SLA guarantees 99.9 percent uptime.", input_tokens=100, output_tokens=10)

    rag = SelfHealingRAG(
        FakeLLM(reply), [FakeRetriever([OFF_DOC]), KeywordBackend([GOOD_DOC])], tracer=Tracer()
    )
    rag.ask_sync(QUESTION)
    assert [(a.strategy, a.llm_calls, a.input_tokens, a.output_tokens) for a in recorded] == [
        ("FakeRetriever", 2, 150, 15),
        ("KeywordBackend", 2, 150, 15),
    ]
    assert all(a.latency_s >= 0 for a in recorded)


async def test_async_ask_and_last_report() -> None:
    rag = SelfHealingRAG(judge_llm({GOOD_DOC: claims(True)}), [FakeRetriever([GOOD_DOC])])
    assert rag.last_report is None
    answer = await rag.ask(QUESTION)
    assert answer == "The SLA guarantees 99.9 percent uptime." and rag.last_report is not None
    assert rag.last_report.success


async def test_concurrent_asks_get_their_own_reports() -> None:
    docs = [f"Service {i} has an uptime of {i}9 percent per month." for i in range(16)]

    def reply(prompt: str) -> str:
        if "factual claims" in prompt:
            return claims(True)
        return "Service " + prompt.split("Question: Service ", 1)[1].split()[0] + " uptime from context."

    rag = SelfHealingRAG(FakeLLM(reply, latency=0.01), [FakeRetriever(docs, latency=0.01)])

    async def one(i: int) -> tuple[int, Any, Any]:
        report = await rag.ask_with_report(f"Service {i} uptime?", top_k=1)
        return i, report, rag.last_report

    for i, report, last in await asyncio.gather(*(one(i) for i in range(16))):
        assert report.answer == f"Service {i} uptime from context."
        assert report.sources[0].text == docs[i]
        assert last is report


# ---------------------------------------------------------------------- one contract


def test_self_healing_is_a_strategy_and_streams() -> None:
    from selfrag_core import SelfHealingReport, Strategy

    healer = SelfHealingRAG(judge_llm({GOOD_DOC: claims(True)}), [FakeRetriever([GOOD_DOC])])
    assert isinstance(healer, Strategy)
    events = [e for e in healer.stream(QUESTION, {"top_k": 1}) if e.kind != "step"]
    assert [e.kind for e in events] == ["token", "result"]  # chosen after judging: one piece
    report = events[-1].result
    assert isinstance(report, SelfHealingReport) and report.success
    assert events[0].text == report.answer and report.trace.llm_calls == 2
    assert report.attempt_details[0].llm_calls == 2  # filled by its finish step, streamed too


async def test_self_healing_streams_async_and_its_aliases_are_query() -> None:
    healer = SelfHealingRAG(judge_llm({GOOD_DOC: claims(True)}), [FakeRetriever([GOOD_DOC])])
    events = [e async for e in healer.astream(QUESTION)]
    assert events[-1].kind == "result" and events[-1].result.success
    assert (await healer.aquery(QUESTION)).answer == await healer.ask(QUESTION) == healer.ask_sync(QUESTION)
    with pytest.raises(TypeError, match="metadata_filter"):
        healer.query(QUESTION, {"metadata_filter": "not a dict"})


def test_every_attempt_failing_raises_with_the_report_finished_from_every_entry_point() -> None:
    healer = SelfHealingRAG(FakeLLM([ConnectionError("down")]), [FakeRetriever([GOOD_DOC])], max_retries=0,
                            execution=ExecutionConfig(sleep=lambda _: None))  # fmt: skip
    for call in (healer.query, healer.ask_with_report_sync, lambda q: list(healer.stream(q))):
        with pytest.raises(StrategyError) as caught:
            call(QUESTION)
        report = caught.value.report
        assert report.trace.wall_s > 0 and report.attempt_details[0].llm_calls == 3

"""Strategies composed into one query: one trace, one LLM-call budget, one concurrency limit."""

from __future__ import annotations

import json
import time

import pytest
from test_recursive import COMPLEX, DOCS, SUBS  # the same question and corpus

from selfrag_core import (
    ExecutionConfig,
    HyDERAG,
    RecursiveRAG,
    SelfHealingRAG,
    SelfIRAG,
)
from selfrag_core.testing import FakeLLM, FakeRetriever, first_document


def confident(prompt: str) -> str:
    """SelfIRAG's fast-mode reply: the first context passage as the answer, judged 9/10."""
    passage = first_document(prompt)
    scores = dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), 9)
    return json.dumps({"answer": passage, **scores, "issues": [], "suggestions": []})


def script(prompt: str) -> str:
    if "SUBQUESTIONS:" in prompt:
        return json.dumps({"items": SUBS})
    if "then judge your own answer" in prompt:  # SelfIRAG's fast-mode prompt
        return confident(prompt)
    return "merged answer" if "Combine the answers" in prompt else "plain leaf"


def test_recursive_with_a_self_rag_leaf() -> None:
    llm = FakeLLM(script)
    backend = FakeRetriever(list(DOCS))
    rec = RecursiveRAG(backend, llm, leaf=SelfIRAG(backend, llm))
    result = rec.query(COMPLEX)
    assert result.decomposed and result.answer == "merged answer"
    assert [s.answer for s in result.sub_answers] == DOCS
    assert llm.n_calls == 1 + 3 + 1  # SelfIRAG stops after one confident fast-mode call per leaf
    assert result.trace.llm_calls == 5  # the leaves' calls are in the parent's trace
    assert result.sources  # the leaves' sources are gathered
    assert "leaf strategy" in (result.sub_answers[0].result.reason if result.sub_answers[0].result else "")


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_composed_tree_keeps_three_rounds(mode: str) -> None:
    llm = FakeLLM(script, latency=0.3)
    backend = FakeRetriever(list(DOCS))
    rec = RecursiveRAG(backend, llm, leaf=SelfIRAG(backend, llm))
    start = time.perf_counter()
    result = rec.query(COMPLEX) if mode == "sync" else await rec.aquery(COMPLEX)
    assert time.perf_counter() - start < 1.2
    assert result.decomposed and llm.rounds() == 3


def test_the_llm_call_budget_is_shared_down_the_tree() -> None:
    llm = FakeLLM(script)
    backend = FakeRetriever(list(DOCS))
    budget = ExecutionConfig(max_llm_calls=3, max_concurrency=1)
    rec = RecursiveRAG(backend, llm, leaf=SelfIRAG(backend, llm), execution=budget)
    result = rec.query(COMPLEX)
    assert llm.n_calls == 3  # decompose + two leaves; then the budget stops every call
    assert result.trace.llm_calls == 3  # the refused calls are in the trace, but not counted
    # which leaf comes last under the one slot is up to the scheduler
    answers = [s.answer for s in result.sub_answers]
    assert answers.count("error in generating answer") == 1
    assert all(a in (doc, "error in generating answer") for a, doc in zip(answers, DOCS, strict=True))
    names = [e.name for e in result.trace.fallbacks]
    assert "merge_failed" in names and "generation_failed" in names
    assert result.answer == "\n\n".join(answers)


def test_the_concurrency_limit_is_shared_down_the_tree() -> None:
    llm = FakeLLM(script, latency=0.05)
    backend = FakeRetriever(list(DOCS))
    rec = RecursiveRAG(
        backend, llm, leaf=SelfIRAG(backend, llm), execution=ExecutionConfig(max_concurrency=1)
    )
    rec.query(COMPLEX)
    assert llm.rounds() == 5  # one call at a time


def healing_script(good_marker: str) -> FakeLLM:
    passage = "A long hypothetical passage about the service level agreement and uptime."

    def reply(prompt: str) -> str:
        if "Write a passage" in prompt:
            return passage
        if "factual claims" in prompt:
            ok = good_marker in prompt.split("Answer:", 1)[0]
            return json.dumps({"claims": [{"claim": "c", "supported": ok}]})
        return "The SLA guarantees 99.9 percent uptime."

    return FakeLLM(reply)


async def test_self_healing_over_hyde_then_a_plain_backend() -> None:
    off = FakeRetriever(["The office is in Berlin, near the service entrance."])
    good = FakeRetriever(["The SLA guarantees 99.9 percent uptime every month."])
    llm = healing_script(good_marker="99.9 percent uptime every month")
    hyde = HyDERAG(off, llm, num_hypothetical_docs=2)
    rag = SelfHealingRAG(llm, [hyde, good])
    report = await rag.ask_with_report("What does the SLA say about uptime?")
    assert report.success and report.strategy == "FakeRetriever" and report.attempts == 2
    hyde_attempt, plain_attempt = report.attempt_details
    assert hyde_attempt.strategy == "HyDERAG" and hyde_attempt.score == 0.0
    # passages + answer; the office documents do not speak to the SLA question, so its
    # answer is "not in the documents" (the relevance check) and no judge is asked of it
    assert hyde_attempt.llm_calls == 2 + 1
    assert hyde_attempt.answer == "There is not enough information."
    assert plain_attempt.llm_calls == 2 and report.trace.llm_calls == 5
    assert len(off.queries) == 3  # HyDE searched with the question and two passages


def test_self_healing_shares_its_budget_with_a_composed_strategy() -> None:
    # documents that speak to the question (the SLA) without holding the answer: answered
    off = FakeRetriever(["The SLA says uptime is reported by the office in Berlin."])
    good = FakeRetriever(["The SLA guarantees 99.9 percent uptime every month."])
    llm = healing_script(good_marker="never")
    hyde = HyDERAG(off, llm, num_hypothetical_docs=3)
    rag = SelfHealingRAG(llm, [hyde, good], execution=ExecutionConfig(max_llm_calls=4))
    report = rag.ask_with_report_sync("What does the SLA say about uptime?")
    # HyDE: 3 passages + 1 answer = 4 calls; then the budget is used up
    assert llm.n_calls == 4
    first, second = report.attempt_details
    assert first.answer == "The SLA guarantees 99.9 percent uptime." and first.score < 0.75
    assert "faithfulness_judge_failed" in [e.name for e in report.trace.fallbacks]  # LLM-free fallback score
    assert second.error is not None and "budget" in second.error.lower()
    assert report.strategy == "HyDERAG" and not report.success


def test_self_healing_as_the_leaf_of_recursive() -> None:
    good = FakeRetriever(list(DOCS))

    def reply(prompt: str) -> str:
        if "SUBQUESTIONS:" in prompt:
            return json.dumps({"items": SUBS[:2]})
        if "Combine the answers" in prompt:
            return "merged"
        if "factual claims" in prompt:
            return json.dumps({"claims": [{"claim": "c", "supported": True}]})
        return "Greenhouse gas emissions cause climate change."

    llm = FakeLLM(reply)
    rec = RecursiveRAG(good, llm, leaf=SelfHealingRAG(llm, [good]))
    result = rec.query(COMPLEX)
    assert result.answer == "merged" and len(result.sub_answers) == 2
    assert llm.n_calls == 1 + 2 * 2 + 1  # decompose, (answer + judge) per leaf, merge


def test_a_composed_strategy_that_cannot_answer_is_a_failed_attempt() -> None:
    docs = FakeRetriever(list(DOCS))

    def reply(prompt: str) -> str:
        if "Write a passage" in prompt:
            return "A long enough hypothetical passage about greenhouse gas emissions."
        if "these documents only" in prompt:
            raise ConnectionError("answer model down")
        if "factual claims" in prompt:
            return json.dumps({"claims": [{"claim": "c", "supported": True}]})
        return "Greenhouse gas emissions cause climate change."

    hyde = HyDERAG(docs, FakeLLM(reply), llm_retries=0)
    report = SelfHealingRAG(FakeLLM(reply), [hyde, docs]).ask_with_report_sync("What causes climate change?")
    assert "could not generate an answer" in (report.attempt_details[0].error or "")
    assert report.success and report.attempts == 2

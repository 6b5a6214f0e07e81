"""The optional LLM check of citations: the faithfulness judge's claims, sentence by sentence."""

from __future__ import annotations

import json
from typing import Any

import pytest

from selfrag_core import FaithfulnessMetric, RetrievedDoc, SelfHealingRAG
from selfrag_core.citations import check_with_claims, cite
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.types import Citation

EN_SOURCES = [
    RetrievedDoc("The SLA guarantees 99.9 percent uptime every month."),
    RetrievedDoc("Support is available on weekdays from nine to five."),
]
EN_ANSWER = "The SLA guarantees 99.9 percent uptime [1]. Support is available on weekdays [2]."

AR_SOURCES = [RetrievedDoc("باريس هي عاصمة فرنسا. يبلغ عدد سكان باريس حوالي مليوني نسمة.")]
AR_ANSWER = "عاصمة فرنسا هي باريس [1]. يبلغ عدد سكان باريس مليوني نسمة [1]."


def judged(*claims: tuple[str, bool]) -> str:
    return json.dumps({"claims": [{"claim": c, "supported": s} for c, s in claims]}, ensure_ascii=False)


# ---------------------------------------------------------------------- check_with_claims


def test_each_claim_checks_the_sentence_it_overlaps_most() -> None:
    citations = cite(EN_ANSWER, EN_SOURCES)
    checked = check_with_claims(
        citations,
        [
            ("The SLA guarantees 99.9% uptime", True),
            ("Support is available on weekends", False),
            ("The moon orbits the planet", True),  # shares no word with any sentence: ignored
        ],
    )
    assert [c.llm_supported for c in checked] == [True, False]
    assert "llm_unsupported" not in checked[0].flags and checked[1].flags[-1] == "llm_unsupported"
    # the LLM-free fields and flags are kept; the input is not modified
    assert [c.supported_by for c in checked] == [[1], [2]]
    assert [c.llm_supported for c in citations] == [None, None] and citations[1].flags == []


def test_arabic_claims_map_to_their_sentences() -> None:
    citations = cite(AR_ANSWER, AR_SOURCES)
    assert len(citations) == 2
    checked = check_with_claims(
        citations, [("باريس عاصمة فرنسا", True), ("عدد سكان باريس عشرة ملايين نسمة", False)]
    )
    assert [c.llm_supported for c in checked] == [True, False]
    assert "llm_unsupported" in checked[1].flags and "llm_unsupported" not in checked[0].flags


def test_arabic_claim_with_a_proclitic_still_maps() -> None:
    """ "وعاصمة"/"والعاصمة" are the same word as "عاصمة" once the proclitics are stripped."""
    checked = check_with_claims(cite(AR_ANSWER, AR_SOURCES), [("والعاصمة الفرنسية لفرنسا باريس", False)])
    assert [c.llm_supported for c in checked] == [False, None]


def test_a_claim_overlapping_no_sentence_leaves_it_unchecked() -> None:
    checked = check_with_claims(cite(EN_ANSWER, EN_SOURCES), [("Bananas grow in tropical climates", False)])
    assert [c.llm_supported for c in checked] == [None, None]
    assert all("llm_unsupported" not in c.flags for c in checked)


def test_one_unsupported_claim_among_several_fails_the_sentence() -> None:
    checked = check_with_claims(
        cite(EN_ANSWER, EN_SOURCES),
        [
            ("The SLA guarantees uptime", True),
            ("The guaranteed uptime is 99.9 percent", False),
            ("Support is available on weekdays", True),
        ],
    )
    assert [c.llm_supported for c in checked] == [False, True]
    assert checked[0].flags == ["llm_unsupported"]


def test_no_claims_change_nothing() -> None:
    citations = cite(EN_ANSWER, EN_SOURCES)
    assert check_with_claims(citations, []) == citations
    assert all(c.llm_supported is None for c in citations)
    assert check_with_claims([], [("The SLA guarantees uptime", True)]) == []


def test_the_flag_is_added_once_and_llm_free_flags_are_kept() -> None:
    citation = Citation("Refunds are paid within one hour.", 0, 33, flags=["unsupported"])
    checked = check_with_claims([citation], [("Refunds are paid within an hour", False)])
    twice = check_with_claims(checked, [("Refunds are paid within an hour", False)])
    assert twice[0].flags == ["unsupported", "llm_unsupported"] and twice[0].llm_supported is False


def test_to_dict_appends_llm_supported_after_the_existing_keys() -> None:
    checked = check_with_claims(cite(EN_ANSWER, EN_SOURCES), [("Support is available on weekends", False)])
    keys = ["sentence", "start", "end", "cited", "supported_by", "support", "attributed", "flags"]
    assert list(checked[0].to_dict()) == [*keys, "llm_supported"]
    assert [c.to_dict()["llm_supported"] for c in checked] == [None, False]
    assert checked[1].to_dict()["flags"] == ["llm_unsupported"]


# ---------------------------------------------------------------------- FaithfulnessMetric.judge


def test_judge_returns_the_claims_score_returns_their_share() -> None:
    llm = FakeLLM(judged(("The SLA guarantees 99.9 percent uptime", True), ("Support works weekends", False)))
    metric = FaithfulnessMetric(llm)
    verdict = metric.judge("What does the SLA say?", EN_ANSWER, [d.text for d in EN_SOURCES])
    assert verdict.claims == [
        ("The SLA guarantees 99.9 percent uptime", True),
        ("Support works weekends", False),
    ]
    assert verdict.score == 0.5 and llm.n_calls == 1
    assert metric.score("What does the SLA say?", EN_ANSWER, [d.text for d in EN_SOURCES]) == 0.5


async def test_ajudge_returns_the_claims() -> None:
    llm = FakeLLM(judged(("باريس عاصمة فرنسا", True), ("عدد سكان باريس عشرة ملايين", False)))
    metric = FaithfulnessMetric(llm)
    verdict = await metric.ajudge("ما عاصمة فرنسا؟", AR_ANSWER, [d.text for d in AR_SOURCES])
    assert [ok for _, ok in verdict.claims] == [True, False] and verdict.score == 0.5
    assert "ادعاءات" in llm.prompts[0]  # the Arabic judge prompt
    assert await metric.ascore("ما عاصمة فرنسا؟", AR_ANSWER, [d.text for d in AR_SOURCES]) == 0.5
    # the documented recipe for any result
    checked = check_with_claims(cite(AR_ANSWER, AR_SOURCES), verdict.claims)
    assert [c.llm_supported for c in checked] == [True, False]


# ---------------------------------------------------------------------- SelfHealingRAG

QUESTION = "What does the SLA say about uptime?"
GOOD_DOC = "The SLA guarantees 99.9 percent uptime every month."
OFF_DOC = "The company office is located in Berlin near the river."
ANSWER = "The SLA guarantees 99.9 percent uptime [1]. Refunds are paid within one hour [1]."
UPTIME_CLAIM = "The SLA guarantees 99.9 percent uptime"
REFUND_CLAIM = "Refunds are paid within one hour"


def healing_llm(verdicts: dict[str, str]) -> FakeLLM:
    """Answers ``ANSWER``; the judge replies by which context it sees."""

    def reply(prompt: str) -> str:
        if "factual claims" in prompt:
            return next((v for k, v in verdicts.items() if k in prompt), judged())
        return ANSWER

    return FakeLLM(reply)


async def _ask(rag: SelfHealingRAG, driver: str) -> Any:
    return rag.query(QUESTION) if driver == "sync" else await rag.aquery(QUESTION)


@pytest.mark.parametrize("driver", ["sync", "async"])
async def test_self_healing_checks_the_chosen_attempts_citations_without_an_extra_call(driver: str) -> None:
    llm = healing_llm(
        {
            # the first attempt's judge rejects both claims: used for the citations, it would fail the test
            OFF_DOC: judged((UPTIME_CLAIM, False), (REFUND_CLAIM, False)),
            GOOD_DOC: judged((UPTIME_CLAIM, True), (REFUND_CLAIM, False)),
        }
    )
    rag = SelfHealingRAG(llm, [FakeRetriever([OFF_DOC]), FakeRetriever([GOOD_DOC])])
    report = await _ask(rag, driver)
    assert report.attempts == 2 and report.sources[0].text == GOOD_DOC  # the second attempt is returned
    assert [c.llm_supported for c in report.citations] == [True, False]
    assert report.citations[1].flags == ["unsupported", "llm_unsupported"]
    # answer + one judge call per attempt, as before the check: it reuses the judge's call
    assert report.trace.llm_calls == 4 and llm.n_calls == 4
    assert [a.claims for a in report.attempt_details] == [
        [(UPTIME_CLAIM, False), (REFUND_CLAIM, False)],
        [(UPTIME_CLAIM, True), (REFUND_CLAIM, False)],
    ]
    d = report.to_dict()
    assert [c["llm_supported"] for c in d["citations"]] == [True, False]
    assert d["attempt_details"][1]["claims"] == [
        {"claim": UPTIME_CLAIM, "supported": True},
        {"claim": REFUND_CLAIM, "supported": False},
    ]


def test_self_healing_first_attempt_passing_is_checked_in_two_calls() -> None:
    llm = healing_llm({GOOD_DOC: judged((UPTIME_CLAIM, True), (REFUND_CLAIM, True))})
    report = SelfHealingRAG(llm, [FakeRetriever([GOOD_DOC])], evidence_weight=0).query(QUESTION)
    assert report.success and report.attempts == 1
    assert [c.llm_supported for c in report.citations] == [True, True]
    assert report.trace.llm_calls == 2 and llm.n_calls == 2


def test_a_metric_without_claims_leaves_the_citations_unchecked() -> None:
    class Constant:
        def score(self, question: str, answer: str, contexts: list[str]) -> float:
            return 1.0

    llm = healing_llm({})
    report = SelfHealingRAG(llm, [FakeRetriever([GOOD_DOC])], metric=Constant()).query(QUESTION)
    assert report.citations and all(c.llm_supported is None for c in report.citations)
    assert report.attempt_details[0].claims == [] and llm.n_calls == 1

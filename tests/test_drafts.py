"""Drafts over single documents, in the answer's round, kept only when the verifier prefers them."""

from __future__ import annotations

import dataclasses
from typing import Any

from selfrag_core.engine import Run, run_sync
from selfrag_core.strategies.drafts import drafted_answer
from selfrag_core.strategies.plain import PlainRAG
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.types import RetrievedDoc

QUESTION = "What was the Apollo program's budget?"
DOCS = [
    RetrievedDoc("The Apollo program cost $25.4 billion.", 0.9),
    RetrievedDoc("Apollo 11 landed on the Moon in 1969.", 0.8),
    RetrievedDoc("The Saturn V was a rocket.", 0.7),
]


def script(everything: str, first: str, second: str) -> Any:
    """Replies by the documents a prompt holds: all three, the first alone, the second alone."""

    def reply(prompt: str) -> str:
        if "Saturn" in prompt:
            return everything
        return first if "25.4" in prompt else second

    return reply


def drafted(llm: FakeLLM, drafts: int = 2) -> tuple[str, Run]:
    strategy = PlainRAG(FakeRetriever([]), llm)
    run = Run(strategy.execution)
    return run_sync(drafted_answer(strategy, QUESTION, DOCS, drafts, 0), run), run


def test_a_draft_over_one_document_wins_when_the_verifier_prefers_it() -> None:
    llm = FakeLLM(
        script("The program cost $40 billion.", "The Apollo program cost $25.4 billion.", "In 1969.")
    )
    answer, run = drafted(llm)
    assert answer == "The Apollo program cost $25.4 billion."
    assert len(llm.calls) == 3 and run.trace.llm_calls == 3
    chosen = [e for e in run.trace.events if e.name == "draft_chosen"]
    assert len(chosen) == 1 and chosen[0].detail["documents"] == [1]


def test_the_answer_over_all_documents_stays_unless_a_draft_beats_it_by_the_margin() -> None:
    same = "The Apollo program cost $25.4 billion."
    llm = FakeLLM(script(same, "The Apollo program cost $25.4 billion in all.", "In 1969."))
    answer, run = drafted(llm)
    assert answer == same
    assert not [e for e in run.trace.events if e.name == "draft_chosen"]


def test_an_unusable_draft_is_never_kept_and_one_document_means_no_draft() -> None:
    llm = FakeLLM(script("The program cost $40 billion.", "What was the Apollo program's budget?", ""))
    answer, _ = drafted(llm)
    assert answer == "The program cost $40 billion."
    single = FakeLLM("The Apollo program cost $25.4 billion.")
    strategy = PlainRAG(FakeRetriever([]), single)
    assert run_sync(drafted_answer(strategy, QUESTION, DOCS[:1], 2, 0), Run(strategy.execution))
    assert len(single.calls) == 1


def test_the_drafts_go_out_in_the_answers_round() -> None:
    llm = FakeLLM(script("a", "b", "c"), latency=0.05)
    _, run = drafted(llm)
    calls = sorted((e.start_s, e.start_s + e.latency_s) for e in run.trace.events if e.kind == "llm")
    assert len(calls) == 3
    assert calls[-1][0] < calls[0][1]  # the last starts before the first ends: one round


def test_selfirag_with_drafts_keeps_the_best_supported_first_answer() -> None:
    from selfrag_core import SelfIRAG, SelfRAGConfig

    texts = [d.text for d in DOCS]
    llm = FakeLLM(
        script("The program cost $40 billion.", "The Apollo program cost $25.4 billion.", "In 1969.")
    )
    config = SelfRAGConfig(
        top_k=3, fast_mode=False, stop_when_supported=True, max_refinement_iterations=1, drafts=2
    )
    result = SelfIRAG(FakeRetriever(texts), llm, config).query(QUESTION)
    assert result.answer == "The Apollo program cost $25.4 billion."
    assert len(llm.calls) == 3  # the answer, two drafts (it is doubted), no judge
    alone = FakeLLM(script("The program cost $40 billion.", "The Apollo program cost $25.4 billion.", ""))
    without = SelfIRAG(FakeRetriever(texts), alone, dataclasses.replace(config, drafts=0)).query(QUESTION)
    assert without.answer != result.answer and alone.calls[0].prompt.count("\n[") == 3


def test_selfirag_writes_drafts_only_when_the_check_doubts_its_first_answer() -> None:
    from selfrag_core import SelfIRAG, SelfRAGConfig

    texts = [d.text for d in DOCS]
    config = SelfRAGConfig(
        top_k=3, fast_mode=False, stop_when_supported=True, max_refinement_iterations=1, drafts=2
    )
    sure = FakeLLM(script("The Apollo program cost $25.4 billion.", "It cost $25 billion.", "In 1969."))
    result = SelfIRAG(FakeRetriever(texts), sure, config).query("What did the Apollo program cost?")
    assert result.answer == "The Apollo program cost $25.4 billion."
    assert len(sure.calls) == 1  # supported as it stands: no draft could beat it, none written
    doubted = FakeLLM(
        script("The program cost $40 billion.", "The Apollo program cost $25.4 billion.", "x"), latency=0.05
    )
    result = SelfIRAG(FakeRetriever(texts), doubted, config).query(QUESTION)
    assert result.answer == "The Apollo program cost $25.4 billion."
    assert [c.prompt.count("\n[") for c in doubted.calls] == [3, 1, 1]  # the answer over all, then the drafts
    assert doubted.rounds() == 2  # the two drafts go out together


def test_a_question_of_several_parts_gets_no_drafts() -> None:
    llm = FakeLLM("The Apollo program cost $25.4 billion, and Apollo 11 landed in 1969.")
    strategy = PlainRAG(FakeRetriever([]), llm)
    question = "What was the Apollo program's budget, and when did Apollo 11 land?"
    run_sync(drafted_answer(strategy, question, DOCS, 2, 0), Run(strategy.execution))
    assert len(llm.calls) == 1


# ------------------------------------------------------------------ DraftsRAG: plain with drafts


def test_drafts_strategy_answers_from_the_draft_the_verifier_prefers_in_one_round() -> None:
    from selfrag_core.strategies.plain import DraftsRAG

    backend = FakeRetriever([d.text for d in DOCS])
    llm = FakeLLM(
        script("The Saturn V was a rocket.", "It cost $25.4 billion.", "Apollo 11 landed in 1969."),
        latency=0.05,
    )
    result = DraftsRAG(backend, llm).query(QUESTION)
    assert result.answer == "It cost $25.4 billion."  # the draft over the first document alone
    assert result.trace.llm_calls == 3 and llm.n_calls == 3
    assert llm.rounds() == 1  # the three calls are one round
    assert "draft_chosen" in [e.name for e in result.trace.events]


def test_plain_without_drafts_is_one_call_and_the_drafts_config_is_sized_by_the_profile() -> None:
    from selfrag_core.config import DraftsRAGConfig, PlainRAGConfig
    from selfrag_core.profiles import CAPABLE, SMALL_LOCAL

    backend = FakeRetriever([d.text for d in DOCS])
    llm = FakeLLM(script("The Saturn V was a rocket.", "It cost $25.4 billion.", "Apollo 11 landed in 1969."))
    result = PlainRAG(backend, llm).query(QUESTION)
    assert llm.n_calls == 1 and result.answer == "The Saturn V was a rocket."  # PlainRAG unchanged
    assert PlainRAGConfig().drafts == 0 and DraftsRAGConfig().drafts == 2
    assert DraftsRAGConfig.for_profile(SMALL_LOCAL, top_k=3).drafts == 2  # a model that does not follow JSON
    assert DraftsRAGConfig.for_profile(CAPABLE, top_k=5).drafts == 0  # a capable one: plain


# ------------------------------------------------------------------ going on from an answer already written


def test_given_the_answer_over_all_only_the_drafts_are_written_and_the_choice_is_the_same() -> None:
    replies = script("The program cost $40 billion.", "The Apollo program cost $25.4 billion.", "In 1969.")
    whole, _ = drafted(FakeLLM(replies))
    llm = FakeLLM(replies)
    strategy = PlainRAG(FakeRetriever([]), llm)
    run = Run(strategy.execution)
    first = "The program cost $40 billion."
    assert run_sync(drafted_answer(strategy, QUESTION, DOCS, 2, 0, first=first), run) == whole
    assert len(llm.calls) == 2 and all("Saturn" not in c.prompt for c in llm.calls)  # the drafts alone


def test_an_answer_no_draft_could_beat_costs_no_draft() -> None:
    llm = FakeLLM("In 1969.")
    strategy = PlainRAG(FakeRetriever([]), llm)
    first, asked = "The Apollo program cost $25.4 billion.", "What did the Apollo program cost?"
    answer = run_sync(drafted_answer(strategy, asked, DOCS, 2, 0, first=first), Run(strategy.execution))
    assert answer == first and llm.calls == []  # an exact copy that answers the question: score 1
    unusable = "What was the Apollo program's budget?"  # an echo: every usable draft beats it
    answer = run_sync(drafted_answer(strategy, QUESTION, DOCS, 2, 0, first=unusable), Run(strategy.execution))
    assert answer == "In 1969." and len(llm.calls) == 2


def test_drafts_keep_the_context_limit_and_the_answer_over_all_is_plains_prompt() -> None:
    """DraftsRAG with ``max_context_chars``: the answer over all documents is PlainRAG's
    own prompt (its documents cut to the limit), and no draft's documents pass it."""
    from selfrag_core import DraftsRAG, DraftsRAGConfig, PlainRAGConfig

    limit = 60
    llm = FakeLLM("The Apollo program cost $25.4 billion.")
    backend = FakeRetriever([d.text for d in DOCS])
    DraftsRAG(backend, llm, config=DraftsRAGConfig(top_k=3, max_context_chars=limit)).query(QUESTION)
    plain = PlainRAG(backend, FakeLLM("unused"), config=PlainRAGConfig(top_k=3, max_context_chars=limit))
    docs = plain.query(QUESTION).sources
    prompts = [c.prompt for c in llm.calls]
    assert len(prompts) == 3 and plain.answer_prompt(QUESTION, docs) in prompts
    whole = plain.answer_prompt(QUESTION, docs).replace(QUESTION, "")
    assert "Saturn" not in whole  # the limit cut the documents that did not fit

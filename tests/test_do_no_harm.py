"""Issue 19: plain first, judge output that carries no information ignored, sanity checks
on every model output the strategies consume. The degenerate outputs quoted here are the
local model's (SmolLM2-135M) from the XQuAD and HotpotQA runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from selfrag_core import ExecutionConfig, PlainRAG, RecursiveRAG, SelfIRAG, SelfRAGConfig
from selfrag_core.grounding import clean_answer, degenerate_reason, question_coverage
from selfrag_core.strategies.base import quoted_answer
from selfrag_core.strategies.recursive import clean_decomposition
from selfrag_core.strategies.self_rag import uninformative
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.types import EvaluationResult, Grounding, RetrievedDoc

Q = "What is the capital of France?"
DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany.",
]
GOOD = "Paris is the capital of France."
CTX = " ".join(DOCS)


# ---------------------------------------------------------------- degenerate answers


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("relevance", "key_name"),  # a JSON answer field holding a key name
        ('"clarity"', "key_name"),
        ("2019-08-31", "date_not_in_context"),  # a date for a year the context gives
        ("2019-08-31T10:22:05Z", "date_not_in_context"),
        ("2018", "date_not_in_context"),  # "The answer is: 2018", the context says no 2018
        ("capital_city", "identifier"),  # snake_case fragments
        ("Martin_Luther", "identifier"),
        ("capitalCity", "identifier"),
    ],
)
def test_degenerate_outputs_are_rejected(answer: str, reason: str) -> None:
    context = CTX + " The treaty was signed in 2019."
    assert degenerate_reason(answer, Q, context) == reason


@pytest.mark.parametrize(
    "answer",
    ["Paris", "In 2019.", "2019", "Paris, in 1789.", "Seine", "يوليو 2019", "parse_config", "iPhone"],
)
def test_short_answers_from_the_context_are_kept(answer: str) -> None:
    context = CTX + " The treaty was signed in 2019. The revolution began in 1789. يوليو"
    context += " The function parse_config reads the file. Apple sold the iPhone."
    assert degenerate_reason(answer, Q, context) is None


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("The answer to the question is: Paris.", "Paris."),
        ("Improved answer: Paris is the capital of France.", "Paris is the capital of France."),
        ("The answer is: 5.67 billion metric tonnes", "5.67 billion metric tonnes"),
        ('The answer is: "Masks"', "Masks"),
        ("Answer: Paris", "Paris"),
        ("Here is the improved answer: Paris", "Paris"),
        ("الإجابة هي: باريس", "باريس"),
        ("الجواب: باريس هي عاصمة فرنسا", "باريس هي عاصمة فرنسا"),
        ("الإجابة المحسنة: باريس", "باريس"),
        ("Martin_Luther\nLuther wrote the hymn in 1523.", "Luther wrote the hymn in 1523."),
        # kept as written: no preamble, or one whose rest says something as a whole
        ("The answer is not in the context.", "The answer is not in the context."),
        ("Answers differ by country.", "Answers differ by country."),
        ("The answer:", "The answer:"),
        ("Paris", "Paris"),
    ],
)
def test_preambles_are_stripped_in_both_languages(raw: str, clean: str) -> None:
    assert clean_answer(raw) == clean


def test_every_strategy_strips_the_preamble_of_its_final_answer() -> None:
    for strategy in (
        PlainRAG(FakeRetriever(DOCS), FakeLLM("The answer to the question is: Paris.")),
        RecursiveRAG(FakeRetriever(DOCS), FakeLLM("Improved answer: Paris.")),
    ):
        assert strategy.query(Q).answer == "Paris."


def test_question_coverage_tells_an_off_topic_answer_from_a_short_one() -> None:
    context = (
        "Dada was an art movement founded in Zurich in 1916. "
        "Frank has made significant contributions to world-systems theory."
    )
    assert question_coverage("1916", "When was Dada founded?", context) == 1.0
    off_topic = "Frank has made significant contributions to world-systems theory"
    assert question_coverage(off_topic, "When was Dada founded?", context) == 0.0


# ---------------------------------------------------------------- sub-questions


def test_sub_questions_that_are_not_questions_or_off_the_question_are_dropped() -> None:
    question = "Who directed the film in which Scott Derrickson's star appeared, and when?"
    items = [
        "2023-01-05T00:00:00",  # a sub-question list made of ISO timestamps
        "2023-01-05T00:01:00",
        "film_director",  # snake_case fragments
        "What is the capital of Peru?",  # a question, but not this one's
        "Which film did Scott Derrickson direct?",
        "When was the director born?",  # "director" is "directed": same word
    ]
    kept, dropped = clean_decomposition(question, items)
    assert kept == ["Which film did Scott Derrickson direct?", "When was the director born?"]
    assert dropped == [
        "not a question ('2023-01-05T00:00:00')",
        "not a question ('2023-01-05T00:01:00')",
        "not a question ('film_director')",
        "off the question ('What is the capital of Peru?')",
    ]


def test_arabic_sub_questions_are_questions_too() -> None:
    question = "ما أسباب تغير المناخ وما نتائجه على الزراعة؟"
    kept, _ = clean_decomposition(question, ["ما أسباب تغير المناخ؟", "هل يؤثر المناخ على الزراعة"])
    assert kept == ["ما أسباب تغير المناخ؟", "هل يؤثر المناخ على الزراعة"]


# ---------------------------------------------------------------- the judge


def _evaluation(*points: int, supported: bool = True, span: bool = False) -> EvaluationResult:
    scores = [p / 10 for p in points]
    evaluation = EvaluationResult(*scores, confidence=0.5)
    evaluation.grounding = Grounding(supported=supported, span_supported=span)
    return evaluation


@pytest.mark.parametrize(
    ("points", "earlier", "kind"),
    [
        ((1, 2, 3, 4), [], "walk"),
        ((0, 1, 2, 3), [], "walk"),
        ((4, 3, 2, 1), [], "walk"),
        ((1, 0, 2, 3), [], "walk"),  # the demo's honeybee answer: "confidence 0.00"
        ((2, 4, 1, 3), [], "walk"),
        ((3, 4, 5, 2), [], None),  # shuffled, but past the schema's first steps
        ((10, 10, 10, 10), [], "maximum"),  # for an unsupported answer (below)
        ((7, 8, 7, 9), [], None),
        ((8, 8, 8, 8), [], None),
        ((8, 8, 8, 8), [_evaluation(8, 8, 8, 8, supported=True)], None),  # consistent
    ],
)
def test_judge_scores_that_carry_no_information(
    points: tuple[int, ...], earlier: list[EvaluationResult], kind: str | None
) -> None:
    evaluation = _evaluation(*points, supported=kind != "maximum")
    reason = uninformative(evaluation, earlier)
    assert (reason is None) == (kind is None)
    if kind is not None:
        assert kind in (reason or "")


def test_the_same_score_for_a_supported_and_an_unsupported_answer_is_no_information() -> None:
    earlier = [_evaluation(5, 5, 5, 5, supported=True)]
    assert "same score" in (uninformative(_evaluation(5, 5, 5, 5, supported=False), earlier) or "")
    zero_for_a_copy = _evaluation(0, 0, 0, 0, supported=True, span=True)
    assert "minimum" in (uninformative(zero_for_a_copy, []) or "")


# ---------------------------------------------------------------- SelfIRAG: plain first


def _script(answer: str, judge: str, refine: str = GOOD) -> Any:
    def reply(prompt: str) -> str:
        if "Improve the answer" in prompt:
            return refine
        if "Judge the answer" in prompt:
            return judge
        return answer

    return reply


def _judge(*points: int) -> str:
    keys = ("relevance", "accuracy", "completeness", "clarity")
    return json.dumps({**dict(zip(keys, points, strict=True)), "issues": ["x"], "suggestions": ["Seine"]})


def _self(llm: FakeLLM, **cfg: Any) -> SelfIRAG:
    instant = ExecutionConfig(sleep=lambda _: None)
    return SelfIRAG(FakeRetriever(DOCS), llm, SelfRAGConfig(fast_mode=False, **cfg), execution=instant)


def test_the_first_answer_is_the_plain_one() -> None:
    """Two-step SelfIRAG asks the first answer with PlainRAG's prompt over the same
    documents: its reference candidate is the plain answer."""
    plain_llm, self_llm = FakeLLM(GOOD), FakeLLM(_script(GOOD, _judge(9, 9, 9, 9)))
    PlainRAG(FakeRetriever(DOCS), plain_llm).query(Q)
    _self(self_llm).query(Q)
    assert self_llm.calls[0].prompt == plain_llm.calls[0].prompt


def test_a_supported_first_answer_and_a_schema_walking_judge_cost_two_calls() -> None:
    llm = FakeLLM(_script(GOOD, _judge(1, 2, 3, 4)))
    result = _self(llm, max_refinement_iterations=3).query(Q)
    assert result.answer == GOOD and llm.n_calls == 2 and result.iterations == 1
    step = result.history[0]
    assert step.evaluation.ignored is not None and "walk the schema" in step.evaluation.ignored
    assert step.evaluation.known_confidence is None and "stop" in step.reason
    assert not result.trace.fallbacks  # expected of a small model: a decision, no WARNING line
    assert "judge_uninformative" in [e.name for e in result.trace.events if e.kind == "decision"]
    assert result.history[0].evaluation.to_dict()["ignored"] == step.evaluation.ignored


def test_an_unsupported_first_answer_is_refined_without_more_judge_calls() -> None:
    """The judge walks the schema, so the refined answer is judged by the grounding
    signals alone: answer, judge, refine (three calls), and the refinement, better
    grounded, replaces the plain answer."""
    llm = FakeLLM(_script("Lyon is the biggest French town by the Alps.", _judge(0, 1, 2, 3)))
    result = _self(llm, max_refinement_iterations=2).query(Q)
    assert llm.n_calls == 3 and result.answer == GOOD and result.best_iteration == 2
    assert "step 2 is grounded" in result.history[1].reason
    assert result.history[1].evaluation.ignored is not None


def test_a_higher_judge_score_alone_does_not_replace_the_plain_answer() -> None:
    """The refinement is as well grounded but its sentences are less supported: the
    judge's higher score is not enough."""
    refined = "Paris is the capital of France. Its mayor rides a golden horse to work."
    judges = iter([_judge(6, 7, 6, 7), _judge(9, 9, 10, 9)])

    def reply(prompt: str) -> str:
        if "Improve the answer" in prompt:
            return refined
        if "Judge the answer" in prompt:
            return next(judges)
        return GOOD

    result = _self(FakeLLM(reply), max_refinement_iterations=2).query(Q)
    assert result.history[1].answer == refined and result.history[1].confidence > result.history[0].confidence
    assert result.answer == GOOD and result.best_iteration == 1
    assert "no later one better on evidence" in result.history[0].reason


def test_no_supported_step_keeps_the_best_supported_with_the_reason() -> None:
    judge = _judge(6, 7, 6, 7)
    llm = FakeLLM(_script("Lyon by the Alps.", judge, refine="Lyon, the French town by the Alps, rules it."))
    result = _self(llm, max_refinement_iterations=2).query(Q)
    best = result.history[result.best_iteration - 1]
    assert "no step is supported by the context" in best.reason
    assert best.evaluation.grounding.token_support == max(
        s.evaluation.grounding.token_support for s in result.history
    )


def test_stop_when_supported_answers_a_supported_question_with_one_call() -> None:
    """The small profile's setting: a first answer whose sentences the documents support
    is returned without asking the judge."""
    llm = FakeLLM(_script(GOOD, _judge(9, 9, 9, 9)))
    result = _self(llm, stop_when_supported=True).query(Q)
    assert result.answer == GOOD and llm.n_calls == 1 and result.iterations == 1
    assert "not asked" in (result.history[0].evaluation.ignored or "")
    # an unsupported first answer still goes to the judge and the refinement
    llm = FakeLLM(_script("Lyon by the Alps.", _judge(5, 6, 5, 6)))
    result = _self(llm, stop_when_supported=True, max_refinement_iterations=2).query(Q)
    assert llm.n_calls == 4 and result.answer == GOOD


def test_the_small_profile_does_not_trust_the_judge_over_a_supported_answer() -> None:
    from selfrag_core import CAPABLE, SMALL_LOCAL
    from selfrag_core.presets import build_strategy

    assert SelfRAGConfig.for_profile(SMALL_LOCAL).stop_when_supported
    assert not SelfRAGConfig.for_profile(CAPABLE).stop_when_supported
    small = build_strategy("self", FakeRetriever(DOCS), FakeLLM(GOOD), preset=SMALL_LOCAL)
    capable = build_strategy("self", FakeRetriever(DOCS), FakeLLM(GOOD), preset=CAPABLE)
    assert isinstance(small, SelfIRAG) and isinstance(capable, SelfIRAG)
    assert small.config.stop_when_supported and not capable.config.stop_when_supported


@pytest.mark.parametrize(
    ("text", "metadata", "quote"),
    [
        # a Wikipedia-style passage: its title line, then a sentence that repeats it
        (
            "Foo Fighters\nFoo Fighters is a rock band formed in Seattle.",
            {},
            "Foo Fighters is a rock band formed in Seattle.",
        ),
        # the title in the metadata (as `selfrag eval` and the CLI index a titled document)
        (
            "Dave_Grohl\nThe rock band was formed in Seattle.",
            {"title": "Dave_Grohl"},
            "The rock band was formed in Seattle.",
        ),
        # a wrapped line is not a title: the sentence is quoted whole
        (
            "The Foo Fighters rock band was\nformed in Seattle.",
            {},
            "The Foo Fighters rock band was formed in Seattle.",
        ),
    ],
)
def test_a_quote_leaves_out_the_title_line(text: str, metadata: dict[str, Any], quote: str) -> None:
    # the quoted fallback showed "Foo Fighters Foo Fighters is an American rock band ..."
    question = "Where was the rock band formed?"
    assert quoted_answer(question, [RetrievedDoc(text, metadata=metadata)]) == f"\u201c{quote}\u201d [1]"

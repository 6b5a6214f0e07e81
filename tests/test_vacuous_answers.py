"""Answers that say nothing: the fitted answering check ranks them below substantive
answers, and no strategy that picks between answers by the verifier trades an answer for
a restatement that is easier to support (issue 54's held-back runs: SelfHealingRAG chose
"The document states that sadness comes from the brain.")."""

from __future__ import annotations

import json

import pytest

from selfrag_core import SelfHealingRAG, SelfHealingRAGConfig
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.verify import answers_as_well, informativeness, verify_answer

SADNESS = "Where does sadness come from?"
SADNESS_DOC = (
    "Sadness is an emotional pain associated with feelings of loss. Research shows that sadness is "
    "processed in the amygdala and the prefrontal cortex of the brain, and it is triggered by loss, "
    "disappointment or separation."
)
BAND = "Why did Milli Vanilli get in trouble?"
BAND_DOC = (
    "Milli Vanilli were a pop duo. Their Grammy Award was withdrawn after it was revealed that they "
    "did not sing on the record; they lip-synced."
)
CASES = [
    (
        SADNESS,
        SADNESS_DOC,
        "The document states that sadness comes from the brain.",
        "Sadness is triggered by loss, disappointment or separation, and it is processed in the amygdala.",
    ),
    (
        BAND,
        BAND_DOC,
        "The document is about a band that got in trouble for lip-syncing.",
        "Milli Vanilli lost their Grammy Award when it was revealed that they did not sing on the record.",
    ),
]


@pytest.mark.parametrize(("question", "doc", "vacuous", "substantive"), CASES)
def test_a_restatement_answers_less_than_an_answer(
    question: str, doc: str, vacuous: str, substantive: str
) -> None:
    said_nothing = informativeness(vacuous, question, [doc])
    said_something = informativeness(substantive, question, [doc])
    assert said_nothing is not None and said_something is not None
    assert 0.0 <= said_nothing < said_something <= 1.0
    assert not answers_as_well(said_nothing, said_something) and answers_as_well(said_something, said_nothing)
    # the verdict carries the same figure
    assert verify_answer(vacuous, [doc], question=question).informativeness == pytest.approx(said_nothing)


def test_informativeness_is_unknown_without_a_question_and_zero_for_a_loop() -> None:
    assert informativeness("Sadness is processed in the amygdala.", "", [SADNESS_DOC]) is None
    assert informativeness("Answer: 2003\nAnswer: 2003\nAnswer: 2003", SADNESS, [SADNESS_DOC]) == 0.0
    assert answers_as_well(None, 0.9) and answers_as_well(0.1, None)


def _claims(*supported: bool) -> str:
    return json.dumps({"claims": [{"claim": f"claim {i}", "supported": s} for i, s in enumerate(supported)]})


def test_self_healing_keeps_the_answer_over_a_better_supported_restatement() -> None:
    """The first attempt answers in its own words (the lexical evidence finds none of
    it, as for the right "79 characters" of issue 54) and its judge finds a claim
    unsupported; the retry restates the question, and the judge approves it: it scores
    higher, with as much evidence, and says nothing."""
    substantive = "Sadness arises when we lose someone or something we value, and the amygdala processes it."
    vacuous = CASES[0][2]
    answers = iter([substantive, vacuous])

    def reply(prompt: str) -> str:
        if "factual claims" in prompt:
            return _claims(True) if "document states" in prompt.split("Answer:")[-1] else _claims(True, False)
        return next(answers)

    backends = [FakeRetriever([SADNESS_DOC]), FakeRetriever([SADNESS_DOC, "The brain is an organ."])]
    report = SelfHealingRAG(
        FakeLLM(reply), backends, config=SelfHealingRAGConfig(confidence_threshold=0.99)
    ).ask_with_report_sync(SADNESS)
    first, second = report.attempt_details
    assert second.score > first.score and (second.evidence or 0.0) >= (first.evidence or 0.0)
    assert first.informativeness is not None and second.informativeness is not None
    assert second.informativeness < first.informativeness
    assert report.answer == substantive and report.strategy == "FakeRetriever"
    recorded = report.attempt_details[1].to_dict()["informativeness"]
    assert recorded == pytest.approx(second.informativeness, abs=1e-4)

"""The fitted checks (issue 54): a logistic model over named features, read from a
versioned JSON file, and the probabilities verify_answer reports beside its score."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from selfrag_core.errors import ConfigurationError
from selfrag_core.signals.features import (
    ANSWERING_FEATURES,
    SEMANTIC,
    SUPPORT_FEATURES,
    answering_features,
    support_features,
)
from selfrag_core.signals.fitted import Checks, LogisticCheck, fit, shipped
from selfrag_core.verify import LexicalVerifier, verify_answer

PEP8 = "PEP 8 recommends a maximum line length of 79 characters for code, and 72 for docstrings."
BEES = "Honeybees dance to show the hive where the flowers are."


def test_fit_recovers_a_known_logistic_model() -> None:
    rng = random.Random(7)
    rows, labels = [], []
    for _ in range(4000):
        a, b = rng.gauss(0, 1), rng.gauss(0, 1)
        p = 1 / (1 + math.exp(-(0.5 + 2.0 * a - 1.0 * b)))
        rows.append({"a": a, "b": b})
        labels.append(rng.random() < p)
    check = fit(rows, labels, ["a", "b"], l2=0.0)
    # weights are per standard deviation: the data's are about 1, so they are the model's
    assert check.weights[0] == pytest.approx(2.0, abs=0.25)
    assert check.weights[1] == pytest.approx(-1.0, abs=0.2)
    assert check.probability({"a": 0.0, "b": 0.0}) == pytest.approx(1 / (1 + math.exp(-0.5)), abs=0.06)


def test_fit_refuses_one_label() -> None:
    with pytest.raises(ValueError, match="both labels"):
        fit([{"a": 1.0}, {"a": 2.0}], [True, True], ["a"])


def test_a_check_round_trips_through_its_dict() -> None:
    check = LogisticCheck(("a",), (1.0,), (2.0,), (0.5,), -0.25, 0.6, {"fitted_on": "x"})
    again = LogisticCheck.from_dict(json.loads(json.dumps(check.to_dict())))
    assert again == check
    assert again.probability({"a": 3.0}) == pytest.approx(1 / (1 + math.exp(-(-0.25 + 0.5))))


@pytest.mark.parametrize(
    "text",
    ["[]", '{"version": 1}', '{"version": 2, "support": {}, "answering": {}}', "{" * 5000, "not json"],
)
def test_a_bad_checks_file_is_one_typed_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "checks.json"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=r"checks file|refit"):
        Checks.load(path)


def test_a_check_with_mismatched_columns_is_refused() -> None:
    data = {"features": ["a", "b"], "mean": [0.0], "scale": [1.0], "weights": [1.0], "bias": 0.0}
    with pytest.raises(ConfigurationError, match="one mean, scale and weight"):
        LogisticCheck.from_dict(data)


def test_the_shipped_file_names_the_features_the_code_computes() -> None:
    checks = shipped()
    for kind, names in (("support", SUPPORT_FEATURES), ("answering", ANSWERING_FEATURES)):
        lexical = checks.pick(kind, semantic=False)
        assert set(lexical.features) == set(names)
        assert "fitted_on" in lexical.about
        semantic = checks.pick(kind, semantic=True)
        assert set(semantic.features) <= {*names, SEMANTIC}
    assert 0.0 < checks.pick("support", semantic=False).threshold < 1.0


def test_support_features_see_the_passage_that_holds_the_claim() -> None:
    held = support_features("PEP 8 recommends 79 characters for code.", [PEP8], 1.0)
    other = support_features("PEP 8 recommends 79 characters for code.", [BEES], 0.0)
    assert held["window"] > other["window"]
    assert held["numbers_missing"] == 0.0 and other["numbers_missing"] == 1.0
    assert held["runs"] > other["runs"]


def test_answering_features_tell_a_restatement_from_an_answer() -> None:
    question = "What maximum line length does PEP 8 recommend?"
    restated = answering_features("PEP 8 recommends a maximum line length.", question)
    answered = answering_features("Lines should be at most 79 characters long.", question)
    assert restated["restated"] > answered["restated"]
    assert answered["new_numbers"] == 1.0 and restated["new_numbers"] == 0.0


def test_verify_answer_reports_the_fitted_probabilities() -> None:
    question = "What maximum line length does PEP 8 recommend?"
    own = verify_answer("PEP 8 recommends 79 characters for code.", [PEP8], question=question)
    elsewhere = verify_answer("PEP 8 recommends 79 characters for code.", [BEES], question=question)
    assert own.probability is not None and elsewhere.probability is not None
    assert own.probability > elsewhere.probability
    assert own.informativeness is not None and 0.0 <= own.informativeness <= 1.0
    assert verify_answer("PEP 8 recommends 79 characters.", [PEP8]).informativeness is None


def test_a_loop_has_no_support_and_says_nothing() -> None:
    verdict = verify_answer("Answer: 79\nAnswer: 80\nAnswer: 81", [PEP8], question="How long?")
    assert verdict.probability == 0.0 and verdict.informativeness == 0.0
    assert not verdict.answers


def test_the_semantic_variant_is_used_with_an_embedder() -> None:
    calls: list[list[str]] = []

    class Embedder:
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            calls.append(texts)
            return [[float(len(t) % 7), 1.0, float("79" in t)] for t in texts]

    question = "What maximum line length does PEP 8 recommend?"
    verdict = verify_answer(
        "PEP 8 recommends 79 characters.", [PEP8], LexicalVerifier(embedder=Embedder()), question
    )
    assert verdict.probability is not None
    # the lexical verifier's own cosine, the support cosine and the answering cosine
    assert any(question in texts for texts in calls)


def test_a_questions_own_numbers_are_not_claims_in_the_citations() -> None:
    """Issue 52: "79 characters" to "What maximum line length does PEP 8 recommend?" was
    flagged number_not_in_source:8, the "8" of "PEP 8" copied from the question."""
    from selfrag_core import PlainRAG
    from selfrag_core.testing import FakeLLM, FakeRetriever

    passage = (
        "Maximum Line Length\nLimit all lines to a maximum of 79 characters. For flowing long blocks "
        "of text (docstrings or comments), the line length should be limited to 72 characters."
    )
    answer = "PEP 8 recommends a maximum line length of 79 characters [1]."
    result = PlainRAG(FakeRetriever([passage]), FakeLLM([answer])).query(
        "What maximum line length does PEP 8 recommend?"
    )
    assert result.answer == answer
    flags = [f for c in result.citations for f in c.flags]
    assert "number_not_in_source:8" not in flags


PEP_CHUNKS = [
    "PEP: 8 Title: Style Guide for Python Code. Maximum Line Length: limit all lines to a maximum "
    "of 79 characters. For flowing long blocks of text, the line length should be limited to 72.",
    "PEP: 572 Title: Assignment Expressions. This is a proposal for creating a way to assign to "
    "variables within an expression using the notation NAME := expr.",
]


def test_an_out_of_corpus_question_is_answered_not_in_the_documents() -> None:
    """Issue 54: an out-of-corpus question got the model's memory, never "the documents do
    not say"; the backend's scores cannot tell (its best irrelevant chunk scores high)."""
    from selfrag_core import PlainRAG
    from selfrag_core.testing import FakeLLM, FakeRetriever

    llm = FakeLLM(["Paris is the capital of France."])
    result = PlainRAG(FakeRetriever(PEP_CHUNKS), llm).query("What is the capital of France?")
    assert result.no_answer == "not_in_documents"
    assert "Paris" not in result.answer
    notes = [e for e in result.trace.fallbacks if e.name == "not_in_documents"]
    assert notes and notes[0].detail["relevance"] < notes[0].detail["threshold"]


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What maximum line length does PEP 8 recommend?", "79 characters [1]."),
        ("What maximum line length does PEP 8 recommend?", "PEP 8 recommends 79 characters [1]."),
        ("What does PEP 572 introduce?", "Assignment expressions, NAME := expr [2]."),
    ],
)
def test_a_question_the_documents_speak_to_is_answered(question: str, answer: str) -> None:
    from selfrag_core import PlainRAG
    from selfrag_core.testing import FakeLLM, FakeRetriever

    result = PlainRAG(FakeRetriever(PEP_CHUNKS), FakeLLM([answer])).query(question)
    assert result.no_answer is None
    assert result.answer == answer


def test_relevance_features_see_the_questions_words() -> None:
    from selfrag_core.signals.features import relevance_features

    near = relevance_features("What maximum line length does PEP 8 recommend?", PEP_CHUNKS)
    far = relevance_features("What is the capital of France?", PEP_CHUNKS)
    assert near["best"] > 0.5 > far["best"] == far["union"] == 0.0


def test_a_verifier_of_yours_gets_none_of_the_lexical_rules() -> None:
    """Issue 54: verify_answer wrapped a user's verifier in the lexical rules (an answer
    giving no date to a "when" question was capped at 0.2 whatever the verifier said)."""
    from selfrag_core.verify import NOT_AN_ANSWER, Verdict

    class Always:
        threshold = 0.5

        def verify(
            self, sentences: list[str], passages: list[str], question: str = ""
        ) -> list[list[Verdict]]:
            return [[Verdict(0.9, True, j, None) for j in range(len(passages))] for _ in sentences]

    question = "When was the Eiffel Tower completed?"
    answer = "The Eiffel Tower was completed long ago."
    passages = ["The Eiffel Tower was completed in 1889."]
    assert verify_answer(answer, passages, Always(), question).score == pytest.approx(0.9)
    assert (verify_answer(answer, passages, question=question).score or 0.0) <= NOT_AN_ANSWER

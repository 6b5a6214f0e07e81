"""Comparisons by date answered from two passages: the question's shape, the dates, the
verifier's check and RecursiveRAG's correction."""

from __future__ import annotations

import pytest

from selfrag_core.comparison import chosen, comparison, derived_answer, resolve
from selfrag_core.config import RecursiveRAGConfig
from selfrag_core.strategies.recursive import RecursiveRAG
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.verify import verify_answer

QUESTION = "Who was born first, Samantha Cristoforetti or Jean-Loup Chrétien?"
PASSAGES = [  # HotpotQA's two passages, shortened
    "Samantha Cristoforetti\nSamantha Cristoforetti (born 26 April 1977 in Milan) is an Italian astronaut.",
    "Jean-Loup Chrétien\nJean-Loup Jacques Marie Chrétien (born 20 August 1938) is a retired French "
    "Air Force general. In 1982 he flew to Salyut 7.",
    "Salyut 7\nSalyut 7 was a Soviet space station launched in 1982.",
]


@pytest.mark.parametrize(
    ("question", "alternatives", "earlier", "event"),
    [
        (QUESTION, ("Samantha Cristoforetti", "Jean-Loup Chrétien"), True, "born"),
        ("Which band was formed first, Wavves or Social Code?", ("Wavves", "Social Code"), True, "formed"),
        (
            "Which film was released more recently, Make Mine Music or Old Dogs?",
            ("Make Mine Music", "Old Dogs"),
            False,
            "released",
        ),
        (
            "Which tennis player is younger, John Newcombe or Květa Peschke?",
            ("John Newcombe", "Květa Peschke"),
            False,
            "born",
        ),
        ("Which magazine is older, Gallery or Dime Magazine?", ("Gallery", "Dime Magazine"), True, ""),
        ("أيهما أقدم، مكتبة الإسكندرية أم جامعة القاهرة؟", ("مكتبة الإسكندرية", "جامعة القاهرة"), True, ""),
    ],
)
def test_the_shape_of_a_comparison(
    question: str, alternatives: tuple[str, str], earlier: bool, event: str
) -> None:
    found = comparison(question)
    assert found is not None
    assert found.alternatives == alternatives
    assert (found.earlier, found.event) == (earlier, event)


@pytest.mark.parametrize(
    "question",
    [
        "Who was the first Russian composer to be famous, Alessandro Scarlatti or Tchaikovsky?",
        "Did Franki Valli sing with Hellogoodbye or The Four Seasons?",
        "Which genus has more species, Apium or Elodea?",
        "What makes a volcano erupt?",
    ],
)
def test_other_questions_compare_no_dates(question: str) -> None:
    assert comparison(question) is None


def test_the_dates_of_two_passages_decide() -> None:
    resolution = resolve(comparison(QUESTION), PASSAGES)
    assert resolution is not None
    assert resolution.winner_name == "Jean-Loup Chrétien"
    assert resolution.years == (1977, 1938)
    assert resolution.passages == (0, 1)
    assert (
        derived_answer(resolution)
        == "Jean-Loup Chrétien: 1938 [2], against 1977 for Samantha Cristoforetti [1]."
    )
    later = resolve(
        comparison("Who was born more recently, Samantha Cristoforetti or Jean-Loup Chrétien?"), PASSAGES
    )
    assert later is not None and later.winner_name == "Samantha Cristoforetti"


def test_no_resolution_without_each_alternatives_passage_or_its_year() -> None:
    assert resolve(comparison(QUESTION), PASSAGES[1:]) is None  # Cristoforetti has no passage
    undated = ["Samantha Cristoforetti\nAn Italian astronaut.", PASSAGES[1]]
    assert resolve(comparison(QUESTION), undated) is None


def test_the_alternative_an_answer_picks() -> None:
    compared = comparison(QUESTION)
    assert compared is not None
    assert chosen(compared, "Jean-Loup Chrétien was born first.") == 1
    assert chosen(compared, "Samantha Cristoforetti was born before Chrétien.") == 0
    assert chosen(compared, "Chrétien.") == 1
    assert chosen(compared, "I do not know.") is None


def test_the_verifier_caps_a_pick_the_dates_contradict_and_lifts_one_they_support() -> None:
    wrong = verify_answer("Samantha Cristoforetti was born first.", PASSAGES, question=QUESTION)
    right = verify_answer("Jean-Loup Chrétien was born first.", PASSAGES, question=QUESTION)
    assert wrong.score is not None and right.score is not None
    assert wrong.score <= 0.1 and not wrong.supported
    assert wrong.sentences[0][1].reason == "comparison_contradicted:Jean-Loup Chrétien"
    assert right.score >= 0.8 and right.supported
    # without the question (or with one passage) nothing is compared
    alone = verify_answer("Samantha Cristoforetti was born first.", PASSAGES)
    assert alone.sentences[0][1].reason != "comparison_contradicted:Jean-Loup Chrétien"


def test_recursive_searches_each_alternative_and_corrects_a_contradicted_answer() -> None:
    backend = FakeRetriever(list(PASSAGES))
    llm = FakeLLM("Samantha Cristoforetti was born first.")
    rag = RecursiveRAG(backend, llm, RecursiveRAGConfig(max_depth=1, decomposition="rules", top_k=1))
    result = rag.query(QUESTION)
    texts = [d.text for d in result.sources]
    mark = {
        name: texts.index(next(t for t in texts if t.startswith(name))) + 1 for name in ("Jean", "Samantha")
    }
    jean, samantha = mark["Jean"], mark["Samantha"]
    assert (
        result.answer
        == f"Jean-Loup Chrétien: 1938 [{jean}], against 1977 for Samantha Cristoforetti [{samantha}]."
    )
    assert backend.queries[1:] == ["Samantha Cristoforetti born", "Jean-Loup Chrétien born"]
    assert len(llm.calls) == 1
    assert [e.name for e in result.trace.events if e.name == "comparison_corrected"] == [
        "comparison_corrected"
    ]
    assert {d.text for d in result.sources} >= set(PASSAGES[:2])


def test_recursive_keeps_an_answer_the_dates_support() -> None:
    llm = FakeLLM("Jean-Loup Chrétien, born in 1938.")
    rag = RecursiveRAG(
        FakeRetriever(list(PASSAGES)), llm, RecursiveRAGConfig(max_depth=1, decomposition="rules")
    )
    result = rag.query(QUESTION)
    assert result.answer == "Jean-Loup Chrétien, born in 1938."
    assert not [e for e in result.trace.events if e.name == "comparison_corrected"]

"""The extractive candidate: with a model that cannot keep to JSON (the embedded ones),
the final answer check weighs the source sentence that speaks most to the question
beside the model's answer and answers with it when the fitted choice check prefers it;
a capable model's answer is left alone."""

from __future__ import annotations

import pytest

from selfrag_core import PlainRAG, PlainRAGConfig, SelfHealingRAGConfig, SelfIRAG, SelfRAGConfig
from selfrag_core.profiles import CAPABLE, SMALL_LOCAL
from selfrag_core.signals.choice import quote_chosen
from selfrag_core.strategies.base import kept_decision
from selfrag_core.testing import FakeLLM, FakeRetriever

QUESTION = "How do honeybees tell other bees where the flowers are?"
DOCS = [
    "Honeybees live in colonies. A honeybee performs a waggle dance to tell other bees the direction "
    "and distance of the flowers.",
    "Bumblebees are larger than honeybees.",
]
OFF = "Bees like flowers very much and they are yellow."
ANSWERED = "They dance: the waggle dance shows the direction and distance of the flowers [1]."


def _ask(answer: str, config: PlainRAGConfig) -> tuple[str, list[dict[str, object]]]:
    result = PlainRAG(FakeRetriever(DOCS), FakeLLM(answer), config).query(QUESTION)
    return result.answer, [dict(e.detail) for e in result.trace.events if e.name == "answer_quoted"]


def test_a_small_models_unsupported_answer_gives_way_to_the_quote() -> None:
    answer, quoted = _ask(OFF, PlainRAGConfig.for_profile(SMALL_LOCAL))
    assert answer.startswith("\u201cA honeybee performs a waggle dance") and answer.endswith("[1]")
    [detail] = quoted
    assert detail["answer"] == OFF and float(detail["quote"]) > float(detail["model"])  # type: ignore[arg-type]


def test_a_supported_answer_is_kept() -> None:
    answer, quoted = _ask(ANSWERED, PlainRAGConfig.for_profile(SMALL_LOCAL))
    assert answer == ANSWERED and not quoted
    assert (
        quote_chosen(ANSWERED, "\u201cBumblebees are larger than honeybees.\u201d [2]", QUESTION, DOCS)
        is None
    )


@pytest.mark.parametrize("config", [PlainRAGConfig(), PlainRAGConfig.for_profile(CAPABLE)])
def test_a_capable_models_answer_is_left_alone(config: PlainRAGConfig) -> None:
    assert not config.quotes
    assert _ask(OFF, config) == (OFF, [])


def test_quotes_is_a_setting_of_every_strategy_and_validated() -> None:
    assert SelfHealingRAGConfig.for_profile(SMALL_LOCAL).quotes
    assert not PlainRAGConfig.for_profile(SMALL_LOCAL, quotes=False).quotes
    with pytest.raises(TypeError, match="quotes must be True or False"):
        PlainRAGConfig(quotes="yes")  # type: ignore[arg-type]


def test_a_quote_keeps_the_yes_or_no_the_model_opened_with() -> None:
    quote = "\u201cA honeybee performs a waggle dance.\u201d [1]"
    assert kept_decision("No, they sing to each other.", quote) == f"No. {quote}"
    assert kept_decision("yes. Bees dance.", quote) == f"Yes. {quote}"
    assert kept_decision("Bees like flowers.", quote) == quote
    assert kept_decision("Nobody knows.", quote) == quote  # "no" as a word, not "Nobody"
    question = "Do honeybees tell other bees where the flowers are?"
    result = PlainRAG(
        FakeRetriever(DOCS),
        FakeLLM("Yes, bees like flowers very much and they are yellow."),
        PlainRAGConfig.for_profile(SMALL_LOCAL),
    ).query(question)
    assert result.answer.startswith("Yes. \u201cA honeybee performs a waggle dance"), result.answer


@pytest.mark.parametrize("quotes", [True, False])
def test_selfirag_weighs_the_quote_against_its_first_answer(quotes: bool) -> None:
    # the small profile: the first answer weighed against the quote as PlainRAG weighs it,
    # then two drafts when the verifier doubts the result, then the judge unless supported
    llm = FakeLLM(OFF)
    config = SelfRAGConfig.for_profile(SMALL_LOCAL, quotes=quotes)
    result = SelfIRAG(FakeRetriever(DOCS), llm, config=config).query(QUESTION)
    quoted = [dict(e.detail) for e in result.trace.events if e.name == "answer_quoted"]
    if quotes:  # the quote is supported: no draft is written, the judge not asked
        assert result.answer.startswith("\u201cA honeybee performs a waggle dance"), result.answer
        assert [d["answer"] for d in quoted] == [OFF] and result.iterations == 1
        assert len(llm.calls) == 1
    else:  # the model's answer, judged and refined
        assert result.answer == OFF and not quoted and result.iterations == 2
        assert len(llm.calls) > 1 + config.drafts

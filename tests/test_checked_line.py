"""The CLI's "checked" line: what the fitted checks say of an answer and what the strategy
did to the model's answer, read against plain's."""

from __future__ import annotations

from selfrag_core import PlainRAG, PlainRAGConfig
from selfrag_core.cli.output import checked_line
from selfrag_core.profiles import SMALL_LOCAL
from selfrag_core.testing import FakeLLM, FakeRetriever

QUESTION = "How do honeybees tell other bees where the flowers are?"
DOCS = [
    "Honeybees live in colonies. A honeybee performs a waggle dance to tell other bees the direction "
    "and distance of the flowers.",
    "Bumblebees are larger than honeybees.",
]
ANSWERED = "A honeybee performs a waggle dance to tell other bees the direction and distance [1]."
OFF = "Bees like flowers very much and they are yellow."


def ask(answer: str, config: PlainRAGConfig | None = None, docs: list[str] = DOCS) -> object:
    return PlainRAG(FakeRetriever(docs), FakeLLM(answer), config).query(QUESTION)


def test_a_supported_answer_shows_its_scores_and_is_not_flagged() -> None:
    line = checked_line(ask(ANSWERED), QUESTION)
    support, fitted, answering = line.split("; ")[:3]
    assert support.startswith("support ") and float(support.split()[1]) >= 0.5 and "flagged" not in line
    assert fitted.startswith("fitted support ") and answering.startswith("answers the question ")


def test_an_unsupported_answer_is_flagged() -> None:
    line = checked_line(ask(OFF), QUESTION)
    score = float(line.split()[1])  # the flag names the threshold the score is under
    assert score < 0.5 and "(flagged: under 0.50, not supported by the sources)" in line


def test_a_quote_in_place_of_the_models_answer_is_said_and_compared_with_plain() -> None:
    plain = ask(OFF)
    quoted = ask(OFF, PlainRAGConfig.for_profile(SMALL_LOCAL))
    line = checked_line(quoted, QUESTION, plain=plain)
    assert "a source's own sentence in place of the model's answer" in line
    assert line.endswith("a different answer from plain's")
    assert checked_line(ask(OFF), QUESTION, plain=plain).endswith("the same answer as plain")
    assert "in place of" not in checked_line(plain, QUESTION)


def test_no_answer_has_no_line() -> None:
    assert checked_line(ask(ANSWERED, docs=[]), QUESTION) == ""

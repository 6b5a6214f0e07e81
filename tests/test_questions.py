"""The rule-based split of multi-part questions (no LLM, English and Arabic)."""

from __future__ import annotations

import pytest

from selfrag_core.questions import is_multi_part, split_question


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        (
            "What makes a volcano erupt, and how do vaccines train the immune system?",
            ["What makes a volcano erupt?", "How do vaccines train the immune system?"],
        ),
        ("Who wrote Hamlet? When was it first staged?", ["Who wrote Hamlet?", "When was it first staged?"]),
        (
            "What is the capital of France and what river runs through it?",
            ["What is the capital of France?", "What river runs through it?"],
        ),
        ("Is Paris in France and is Berlin in Germany?", ["Is Paris in France?", "Is Berlin in Germany?"]),
        ("Who directed Jaws and when was it released?", ["Who directed Jaws?", "When was it released?"]),
        (
            "ما سبب ثوران البراكين، وكيف تدرب اللقاحات جهاز المناعة؟",
            ["ما سبب ثوران البراكين؟", "كيف تدرب اللقاحات جهاز المناعة؟"],
        ),
    ],
)
def test_a_question_of_several_parts_is_split(question: str, parts: list[str]) -> None:
    assert split_question(question) == parts
    assert is_multi_part(question)


@pytest.mark.parametrize(
    "question",
    [
        "Who wrote Hamlet and Macbeth?",  # one question word over two objects
        "How and why do bees dance?",  # too short to be two questions
        "What did the report say about cats and how they hunt?",  # an embedded clause
        "Which magazine was started first, Arthur's Magazine or First for Women?",
        "Were Scott Derrickson and Ed Wood of the same nationality?",  # a comparison: one answer
        "Are the Laleli Mosque and Esma Sultan Mansion both located in Istanbul?",
        "ما هي عاصمة فرنسا؟",
        "Tell me about volcanoes, and what causes them?",  # not a question at its start
        # a relative clause, not a second question
        "Which Panthers player got a penalty, which gave the Broncos a new set of downs?",
        # HotpotQA's: relative clauses and one subject's two verbs after "and"
        "What is the name of the fight song of the university whose main campus is in Lawrence, Kansas "
        "and whose branch campuses are in the Kansas City metropolitan area?",
        "Who was the writer of These Boots Are Made for Walkin' and who died in 2007?",
        "What distinction is held by the former NBA player who was a member of the Charlotte Hornets "
        "during their 1992-93 season and was head coach for the WNBA team Charlotte Sting?",
        "Who held the record for the longest service in the Australian Parliament for a woman, and was "
        "surpassed by a former Australian politician who was the 29th Speaker of the House?",
    ],
)
def test_a_single_question_is_kept_whole(question: str) -> None:
    assert split_question(question) == [question]
    assert not is_multi_part(question)

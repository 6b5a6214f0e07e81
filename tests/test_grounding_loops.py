"""Issue 52: a loop whose repeated unit changes only in numbers that count ("PEP: 397 Title:
... PEP: 398 Title: ...") is degenerate; honest lists and tables that hold numbers are not."""

from __future__ import annotations

import pytest

from selfrag_core.grounding import assess, clean_answer, degenerate_reason, repetition
from selfrag_core.verify import verify_answer

Q = "What does PEP 572 introduce?"
CONTEXT = "PEP: 572 Title: Assignment Expressions. It assigns to variables within an expression."
HEADER = "PEP: {n} Title: BDFL-Delegate Created: 15-Mar-2011 Python-Version: 3.3 Status: Draft Type: Process"

#: (the looping answer, what is left once the loop is cut: its first round)
LOOPS = [
    # every run of three words holds a number that counts: no run is said three times
    (
        " ".join(f"PEP: {n} Title: {n} Created: {n} Status: {n}" for n in range(397, 405)),
        "PEP: 397 Title: 397 Created: 397 Status: 397",
    ),
    # a long header said twice (the model stopped before a third): each run of words twice only
    (" ".join(HEADER.format(n=n) for n in (397, 398)), HEADER.format(n=397)),
    # counting down, after an answer, the third round cut short by the token limit
    (
        "It introduces assignment expressions. Item 9 of list 19 says v9; item 8 of list 18 says v8; "
        "item 7 of list 17 says v7; item 6 of",
        "It introduces assignment expressions. Item 9 of list 19 says v9",
    ),
]


@pytest.mark.parametrize(("answer", "first_round"), LOOPS)
def test_a_loop_that_counts_is_degenerate_and_cut(answer: str, first_round: str) -> None:
    assert repetition(answer) == "repetition"
    assert degenerate_reason(answer, Q, CONTEXT) == "repetition"
    grounding = assess(answer, Q, CONTEXT)
    assert grounding.degenerate == "repetition" and not grounding.supported
    assert not verify_answer(answer, [CONTEXT]).supported
    assert clean_answer(answer).rstrip(";,. ") == first_round  # as every loop: cut where it starts again
    assert repetition(clean_answer(answer)) is None


HONEST = [
    "1. Paris 2. Berlin 3. Rome",
    "1. Paris, 2. Berlin, 3. Rome, 4. Madrid, 5. Lisbon",
    "1990: 5.2%, 1991: 5.4%, 1992: 5.1%, 1993: 4.9%, 1994: 5.0%",
    "GDP in 1990: 5.2; GDP in 1991: 5.4; GDP in 1992: 5.1; GDP in 1993: 4.9",
    "Year 1990: GDP 5.2, growth 1.1; Year 1991: GDP 5.4, growth 1.3; Year 1992: GDP 5.1, growth 0.9",
    "| Year | Population |\n| 1990 | 5,000 |\n| 2000 | 6,000 |\n| 2010 | 7,500 |\n| 2020 | 8,100 |",
    "Python 3.10 added match statements, Python 3.11 added exception groups, "
    "Python 3.12 added type parameter syntax.",
    "Chapter 1 Introduction, Chapter 2 Methods, Chapter 3 Results, Chapter 4 Discussion",
    "Step 1: mix the flour. Step 2: add the eggs. Step 3: bake it for 20 minutes.",
    "Item 1 costs 5 euros, item 2 costs 6 euros, item 3 costs 7 euros.",
    "PEP 572 introduces assignment expressions; PEP 573 and PEP 574 followed in 2018.",
    # a unit said twice that changes more than by one count, or is short
    "The match on 3 May 2020 ended 2-1. The match on 9 May 2020 ended 0-0.",
    " ".join(HEADER.format(n=n) for n in (397, 412)),
]


@pytest.mark.parametrize("answer", HONEST)
def test_lists_and_tables_with_numbers_are_no_loop(answer: str) -> None:
    assert repetition(answer) is None
    assert degenerate_reason(answer, "What are the figures?", answer) is None
    assert clean_answer(answer) == answer

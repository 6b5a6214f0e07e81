"""Hostile model output (issue 16, section 2): parsed in linear time, only typed errors.

Deep nesting, huge numbers and megabytes of whitespace are unreadable output: the
parsers raise ParseError (or find no list), and every strategy takes its documented
fallback, visible in the trace, in sync and async code alike.
"""

from __future__ import annotations

import faulthandler
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from selfrag_core import (
    ExecutionConfig,
    HyDERAG,
    ParseError,
    RecursiveRAGConfig,
    SelfHealingRAG,
    SelfIRAG,
    SelfRAGConfig,
)
from selfrag_core.metrics import MAX_CLAIMS, parse_claims
from selfrag_core.parsing import MAX_DEPTH, MAX_PARSE_CHARS, parse_json, parse_json_object, parse_list
from selfrag_core.strategies.recursive import RecursiveRAG, clean_decomposition
from selfrag_core.strategies.self_rag import _unit
from selfrag_core.testing import FakeLLM, FakeRetriever
from selfrag_core.testing import judge_json as judged

DEEP = "[" * 50_000
DEEP_CLOSED = "[" * 50_000 + "]" * 50_000
HUGE = int("9" * 400)  # a 400-digit score
GUARD_SECONDS = 30.0  # see hang_guard; every test here takes well under a second
Q = "What is the capital of France?"
GOOD = "Paris is the capital of France."
COMPLEX = "What are the causes and effects of climate change, and how do they compare to deforestation?"
DOCS = [
    "Climate change is caused by greenhouse gas emissions.",
    "Effects of climate change include rising seas.",
    "Deforestation is the clearing of forests.",
]


@pytest.fixture
def hang_guard(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """End the test process, printing every thread's traceback, if the test runs past
    GUARD_SECONDS. These inputs never finished before the fix, and a regular expression
    holds the GIL while it backtracks, so no in-process timeout could interrupt it."""
    with capsys.disabled():
        stderr = os.dup(2)  # the terminal, not pytest's capture (lost when the process ends)
    faulthandler.dump_traceback_later(GUARD_SECONDS, exit=True, file=stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
    os.close(stderr)


async def ask(strategy: Any, query: str, mode: str) -> Any:
    return strategy.query(query) if mode == "sync" else await strategy.aquery(query)


# ---------------------------------------------------------------------- the parsers


@pytest.mark.parametrize(
    "raw",
    [
        DEEP,
        DEEP_CLOSED,
        '{"a": ' * 50_000,
        '{"a": ' * 50_000 + "1" + "}" * 50_000,
        f"```json\n{DEEP_CLOSED}\n```",
        f"Here it is: {DEEP_CLOSED} hope it helps",
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),  # parses in Python, but too deep to hand on
    ],
    ids=["open", "closed", "open-object", "closed-object", "fenced", "in-prose", "past-max-depth"],
)
@pytest.mark.parametrize("parse", [parse_json, parse_json_object, parse_claims])
def test_deep_nesting_is_a_parse_error(parse: Callable[[str], Any], raw: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(raw)
    assert info.value.raw == raw  # the error keeps the whole output


@pytest.mark.parametrize("raw", [DEEP, DEEP_CLOSED, '{"items": ' + DEEP_CLOSED + "}"])
def test_deep_nesting_is_no_list(raw: str) -> None:
    assert parse_list(raw) == []


def test_nesting_up_to_max_depth_still_parses() -> None:
    raw = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert parse_json(raw) is not None


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize(
    "raw",
    [
        "\n" * 1_000_000,
        " \n" * 500_000,
        "- " + " \n" * 500_000 + "x",
        "1." + " " * 1_000_000,
        "```" + " " * 1_000_000,  # an unclosed fence
        "," + " " * 1_000_000 + "x",
        "[x] " * 250_000,  # many spans that are no JSON
    ],
    ids=["newlines", "space-newline", "bullet", "number", "fence", "comma", "spans"],
)
def test_a_megabyte_of_junk_is_read_in_linear_time(raw: str) -> None:
    assert parse_list(raw) == []
    with pytest.raises(ParseError):
        parse_json(raw)


def test_output_past_the_parse_cap_is_not_read() -> None:
    padding = " " * MAX_PARSE_CHARS
    assert parse_json('{"a": 1}' + padding + "trailing babble") == {"a": 1}  # the head still parses
    assert parse_list("1. What is A?\n2. What is B?\n" + padding) == ["What is A?", "What is B?"]
    assert parse_list(padding + "\n1. What is A?\n2. What is B?") == []
    with pytest.raises(ParseError, match="characters"):
        parse_json(padding + '{"a": 1}')


def test_numbers_json_cannot_hold_are_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_json('{"relevance": ' + "9" * 5000 + "}")  # past Python's int digit limit


def test_claims_are_capped() -> None:
    many = json.dumps({"claims": [{"claim": f"c{i}", "supported": i % 2 == 0} for i in range(1000)]})
    claims = parse_claims(many)
    assert len(claims) == MAX_CLAIMS and claims[0] == ("c0", True)


@pytest.mark.usefixtures("hang_guard")
def test_cleaning_reads_a_bounded_prefix_in_linear_time() -> None:
    items = [f"What is climate change factor number {i}?" for i in range(100_000)]
    kept, dropped = clean_decomposition(COMPLEX, items, limit=4)
    assert kept == items[:4] and dropped == ["99996 past max_sub_questions"]
    copies = ["What causes climate change?"] * 100_000
    kept, dropped = clean_decomposition(COMPLEX, copies, limit=4)
    assert kept == copies[:1] and len(dropped) <= 3 * 4 and dropped[-1].endswith("past max_sub_questions")


# ---------------------------------------------------------------------- judge scores


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0, 0.0),
        (1, 0.1),  # an integer is on the 0-10 scale: a 1 is poor, not perfect
        (7, 0.7),
        (10, 1.0),
        (11, 1.0),  # clamped, not read as a percentage
        (85, 1.0),
        (HUGE, 1.0),
        (10**400, 1.0),
        (-3, 0.0),
        (-HUGE, 0.0),
        (7.5, 0.75),
        (0.85, 0.85),  # a float from 0 to 1 is already a fraction
        (1.0, 1.0),
        (0.0, 0.0),
        (-0.5, 0.0),
        (12.5, 1.0),
        ("7", 0.7),
        (" 8 ", 0.8),
        ("7.5", 0.75),
        ("0.85", 0.85),
        ("-3", 0.0),
        ("9/10", 0.9),
        ("9 / 10", 0.9),
        ("9 out of 10", 0.9),
        ("8.5/10", 0.85),
        ("1/10", 0.1),
        ("12/10", 1.0),
        ("9" * 400, 1.0),
        ("9" * 5000, 1.0),  # past Python's int digit limit: still no error
        ("9" * 5000 + "/10", 1.0),
        (float("inf"), None),
        (float("-inf"), None),
        (float("nan"), None),
        ("Infinity", None),
        ("inf", None),
        ("nan", None),
        ("9/100", None),
        ("high", None),
        ("", None),
        (True, None),
        (None, None),
        ([9], None),
    ],
    ids=lambda v: repr(v) if len(repr(v)) < 20 else f"{repr(v)[:8]}...({len(repr(v))} chars)",
)
def test_judge_score_rule(raw: Any, expected: float | None) -> None:
    score = _unit(raw)
    assert score is None if expected is None else score == pytest.approx(expected)


# ---------------------------------------------------------------------- strategies


def self_rag(reply: str, answer: str, backend: FakeRetriever, instant: ExecutionConfig) -> SelfIRAG:
    """SelfIRAG whose judge (fast-mode and two-step) always replies ``reply``."""

    def script(prompt: str) -> str:
        if "then judge your own answer" in prompt or "Judge the answer" in prompt:
            return reply
        return answer

    return SelfIRAG(backend, FakeLLM(script), SelfRAGConfig(max_refinement_iterations=1), execution=instant)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("reply", [DEEP, DEEP_CLOSED, "```json\n" + DEEP_CLOSED + "\n```"])
async def test_self_rag_unreadable_judge_gets_neutral_scores(
    backend: FakeRetriever, instant: ExecutionConfig, reply: str, mode: str
) -> None:
    result = await ask(self_rag(reply, GOOD, backend, instant), Q, mode)
    assert result.answer == GOOD and result.confidence == 0.5
    assert not result.history[0].evaluation.parsed
    parsing = [e.name for e in result.trace.fallbacks if e.name != "reply_truncated"]  # > max_reply_chars
    assert parsing == ["fast_mode_parse_failed", "evaluation_parse_failed"]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_self_rag_huge_scores_are_clamped(
    backend: FakeRetriever, instant: ExecutionConfig, mode: str
) -> None:
    result = await ask(self_rag(judged(GOOD, HUGE), GOOD, backend, instant), Q, mode)
    assert result.answer == GOOD and result.confidence == 1.0
    assert result.history[0].evaluation.parsed and not result.trace.fallbacks


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_self_rag_infinite_scores_are_unreadable(
    backend: FakeRetriever, instant: ExecutionConfig, mode: str
) -> None:
    reply = judged(GOOD, float("inf"))  # json.dumps writes Infinity, which json.loads reads back
    result = await ask(self_rag(reply, GOOD, backend, instant), Q, mode)
    assert result.answer == GOOD and result.confidence == 0.5
    assert [e.name for e in result.trace.fallbacks] == ["fast_mode_parse_failed", "evaluation_parse_failed"]
    assert "none of relevance" in result.trace.fallbacks[0].error


def recursive(decomposition: str) -> RecursiveRAG:
    llm = FakeLLM(
        {"SUBQUESTIONS:": decomposition, "Combine the answers": "merged answer"}, default="leaf answer"
    )
    return RecursiveRAG(FakeRetriever(list(DOCS)), llm, RecursiveRAGConfig(max_depth=1))


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("reply", [DEEP, DEEP_CLOSED, " \n" * 40_000 + "I cannot split it."])
async def test_recursive_unreadable_decomposition_is_answered_directly(reply: str, mode: str) -> None:
    result = await ask(recursive(reply), COMPLEX, mode)
    assert not result.decomposed and result.answer == "leaf answer" and "0 usable" in result.reason
    assert [e.name for e in result.trace.fallbacks] == ["decomposition_unusable"]


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_recursive_100k_sub_questions_are_capped_before_cleaning(mode: str) -> None:
    lines = "\n".join(f"{i}. What is climate change factor number {i}?" for i in range(100_000))
    result = await ask(recursive(lines), COMPLEX, mode)
    assert result.decomposed and result.answer == "merged answer"
    assert result.sub_questions == [f"What is climate change factor number {i}?" for i in range(4)]
    assert "past max_sub_questions" in result.reason and len(result.reason) < 500


def healing(judge_reply: str) -> SelfHealingRAG:
    def script(prompt: str) -> str:
        return judge_reply if "factual claims" in prompt else "The SLA guarantees 99.9 percent uptime."

    return SelfHealingRAG(
        FakeLLM(script), [FakeRetriever(["The SLA guarantees 99.9 percent uptime every month."])]
    )


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("reply", [DEEP, DEEP_CLOSED, '{"claims": ' + DEEP_CLOSED + "}"])
async def test_self_healing_unreadable_judge_falls_back_to_token_support(reply: str, mode: str) -> None:
    question = "What does the SLA say about uptime?"
    rag = healing(reply)
    report = rag.ask_with_report_sync(question) if mode == "sync" else await rag.ask_with_report(question)
    assert report.answer == "The SLA guarantees 99.9 percent uptime." and 0.5 < report.scores[0] <= 1.0
    assert "faithfulness_judge_failed" in [e.name for e in report.trace.fallbacks]


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("passage", [DEEP, "\n" * 1_000_000 + "x"])
async def test_hyde_hostile_passages_are_only_text(backend: FakeRetriever, passage: str, mode: str) -> None:
    # HyDE parses no model output: a hostile passage is only a search text, or too short
    llm = FakeLLM({"Write a passage": passage}, default=GOOD)
    result = await ask(HyDERAG(backend, llm, num_hypothetical_docs=2), Q, mode)
    assert result.answer == GOOD and "Paris" in result.sources[0].text
    short = len(passage.strip()) < 40
    assert ("no_hypothetical_docs" in [e.name for e in result.trace.fallbacks]) is short

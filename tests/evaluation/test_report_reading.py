"""What the report tells a reader (issue 34, finding 6): the failure placeholder scored and
counted as no answer, latency verdicts only on calls a contender made itself, a warning for
a metric that is the same for every answer, a note when latency was measured under load,
and fallback warnings that name the question and the strategy."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from test_evaluate import TWINS, reader, run, varying, write_data

from selfrag_core.evaluation import EvalData, EvalQuestion, EvalSettings, evaluate
from selfrag_core.evaluation.metrics import mean_interval, paired_difference
from selfrag_core.evaluation.reading import metric_spread, under_load
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER
from selfrag_core.types import Answer, RetrievedDoc

DOC = RetrievedDoc("Paris is the capital of France; the Eiffel Tower is in Paris.", 1.0, {"source": "d1"})
CITIES = EvalData(
    "cities",
    [EvalQuestion(f"q{i}", f"Where is landmark {i}?", ("in Paris",)) for i in range(1, 7)],
)


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, Path]:
    return write_data(tmp_path)


def _answers(text_for: Any) -> Any:
    return lambda question: Answer(text_for(question), [DOC])


def test_the_failure_placeholder_scores_as_no_answer_and_is_counted() -> None:
    failing = {"q2", "q5"}
    contenders = {
        "plain": _answers(lambda q: "The landmark is in Paris."),
        # "error in generating answer" shares "in" with the gold "in Paris": F1 0.4 if scored as text
        "flaky": _answers(
            lambda q: GENERATION_FAILED_ANSWER if q.split()[-1] in ("2?", "5?") else "in Paris"
        ),
    }
    report = evaluate(CITIES, contenders, settings=EvalSettings(concurrency=1))
    records = {q.id: r["flaky"] for q, r in zip(report.questions, report.results, strict=True) if r}
    for qid in failing:
        assert records[qid]["no_answer"] == "generation failed"
        assert records[qid]["metrics"] == {
            "f1": 0.0,
            "em": 0.0,
            "gold_in_answer": 0.0,
            "f1_new": 0.0,
        }  # no grounding either
    assert records["q1"]["no_answer"] is None and records["q1"]["metrics"]["f1"] == 1.0
    summary = report.summary()
    assert summary["flaky"]["no_answers"] == 2 and summary["plain"]["no_answers"] == 0
    assert summary["flaky"]["metrics"]["f1"]["mean"] == pytest.approx(4 / 6)
    assert "no answer (an error or the failure placeholder, scored 0): flaky 2 of 6" in report.table()


def test_a_metric_at_zero_for_every_answer_is_a_warning_not_a_verdict() -> None:
    contenders = {  # neither ever says the gold answer: gold in the answer is 0 everywhere
        "plain": _answers(lambda q: "Somewhere in France."),
        "other": _answers(lambda q: "It is in the north, maybe."),
    }
    report = evaluate(CITIES, contenders, settings=EvalSettings(concurrency=1))
    assert report.spreads()["gold_in_answer"] == "constant"
    table = report.table()
    assert "gold answer in the answer 0.000" in table
    assert re.search(
        r"0 for every answer \([^)]*gold answer in the answer[^)]*\) usually means the metric", table
    )
    # no "[+0.000, +0.000] no detectable difference" row for it
    assert not any(line.split()[1:2] == ["gold_in_answer"] for line in table.splitlines() if line.strip())
    assert any("cannot tell them apart" in note for note in report.to_dict()["notes"])


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"a": [0.0, 0.0, None], "b": [0.0, 0.0, 0.0]}, "constant"),
        ({"a": [1.0, 0.0, None], "b": [1.0, 0.0, None]}, "identical"),
        ({"a": [1.0, 0.0], "b": [0.0, 1.0]}, None),  # same mean, other questions: they differ
        ({"a": [None], "b": [None]}, None),
        ({"a": [0.2, 0.7]}, None),  # one contender: nothing to be identical with
    ],
)
def test_metric_spread(values: dict[str, list[float | None]], expected: str | None) -> None:
    assert metric_spread(values) == expected


def test_latency_under_load_is_named() -> None:
    assert under_load({"concurrency": 1}, {"cpus": 8, "load_before": 0.4, "concurrency": 1}) == []
    reasons = under_load({}, {"cpus": 2, "load_before": 1.6, "concurrency": 3})
    assert reasons[0].startswith("3 questions ran at a time") and "load average 1.60 on 2 CPUs" in reasons[1]
    report = evaluate(CITIES, {"plain": _answers(lambda q: "in Paris"), "b": _answers(lambda q: "x")})
    assert report.machine["concurrency"] == 2 and report.machine["cpus"]
    assert "latency measured under load: 2 questions ran at a time" in report.table()
    assert any(line.endswith("(under load)") for line in report.table().splitlines() if "latency_s" in line)


def test_latency_verdicts_only_on_calls_a_contender_made_itself(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    cache = tmp_path / "shared.sqlite"
    shared = run(data, TWINS, llm=varying(), cache=cache, limit=4, concurrency=1, shared_replies=True)
    summary = shared.summary()
    assert [r["twin"]["replayed_calls"] for r in shared.results if r] == [1, 1, 1, 1]  # borrowed from plain
    assert [r["plain"]["replayed_calls"] for r in shared.results if r] == [0, 0, 0, 0]
    assert summary["plain"]["latency_measured"] == 4 and summary["plain"]["latency_p50"] is not None
    assert summary["twin"]["latency_measured"] == 0 and summary["twin"]["latency_p50"] is None
    assert "latency_s" not in shared.comparisons()["twin"]  # no verdict on borrowed replies
    assert "llm_calls" in shared.comparisons()["twin"]
    table = shared.table()
    assert "twin 0 of 4 question(s)" in table and "borrowed from the shared replies" in table
    again = run(data, TWINS, llm=varying(), cache=cache, limit=4, concurrency=1, shared_replies=True)
    assert again.summary()["plain"]["latency_measured"] == 0  # replayed now: plain's own too
    assert "plain 0 of 4, twin 0 of 4" in again.table()


def test_fallback_warnings_name_the_question_and_the_strategy(
    data: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    # HyDE's hypothetical document is the reader's one-word reply: too short, discarded (a fallback)
    with caplog.at_level(logging.WARNING, logger="selfrag"):
        run(data, ["plain", "hyde"], llm=reader(), limit=2, concurrency=2)
    fallbacks = [r.getMessage() for r in caplog.records if "selfrag fallback" in r.getMessage()]
    assert fallbacks
    assert all(m.startswith("selfrag fallback in hyde on ") for m in fallbacks), fallbacks
    assert all("'Where does the " in m for m in fallbacks)
    caplog.clear()
    logging.getLogger("selfrag").warning(
        "selfrag fallback: %s", "outside"
    )  # outside an evaluation: as it was
    assert caplog.records[-1].getMessage() == "selfrag fallback: outside"


def test_mean_interval_is_the_bootstrap_of_the_mean() -> None:
    values = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, None]
    low, high = mean_interval(values, seed=3) or (None, None)
    assert low is not None and high is not None and low < 5 / 8 < high and low >= 0.0 and high <= 1.0
    assert mean_interval(values, seed=3) == (low, high)  # deterministic
    assert mean_interval([0.5, 0.5]) == (0.5, 0.5) and mean_interval([None]) is None
    # the paired difference keeps its interval through the shared bootstrap
    d = paired_difference([1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0], seed=0)
    assert d is not None and (d.mean, d.n) == (0.5, 4) and d.low < 0.5 < d.high

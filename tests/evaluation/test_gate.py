"""The regression gate: a run compared with an earlier one, question by question."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import ConfigurationError
from selfrag_core.cli import main
from selfrag_core.evaluation import (
    EvalData,
    EvalQuestion,
    EvalSettings,
    assert_no_regression,
    compare_runs,
    evaluate,
)

CAPITALS = {f"country{i}": f"city{i}" for i in range(40)}
DATA = EvalData(
    "capitals", [EvalQuestion(c, f"What is the capital of {c}?", (city,)) for c, city in CAPITALS.items()]
)


def answers(wrong: set[str]) -> Any:
    """A contender right on every question but those of the countries in ``wrong``."""

    def answer(question: str) -> str:
        country = question.rsplit(" ", 1)[-1].rstrip("?")
        return "somewhere else" if country in wrong else CAPITALS[country]

    return answer


def run(folder: Path, wrong: set[str]) -> Any:
    return evaluate(
        DATA, {"plain": answers(set()), "mine": answers(wrong)}, settings=EvalSettings(output=folder)
    )


def test_a_real_drop_fails_the_gate_and_noise_passes(tmp_path: Path) -> None:
    run(tmp_path / "before", set())
    drop = run(tmp_path / "after", {f"country{i}" for i in range(20)})  # wrong on half the questions
    comparisons = compare_runs(drop, tmp_path / "before")
    f1 = next(c for c in comparisons if (c.contender, c.metric) == ("mine", "f1"))
    assert f1.regressed and f1.difference.n == 40 and f1.difference.mean == pytest.approx(-0.5)
    with pytest.raises(AssertionError, match=r"regression\(s\).*\n.*mine\s+\S+\s+-0\.500"):
        assert_no_regression(drop, tmp_path / "before" / "summary.json")
    noise = run(tmp_path / "noise", {"country3"})  # one question differs: no detectable difference
    kept = assert_no_regression(noise, tmp_path / "before" / "results.jsonl")
    assert kept and not any(c.regressed for c in kept)
    # the same folders compared on disk, as the CLI does
    assert not any(c.regressed for c in compare_runs(tmp_path / "noise", tmp_path / "before"))


def test_only_the_questions_both_runs_answered_are_compared(tmp_path: Path) -> None:
    run(tmp_path / "before", set())
    partial = evaluate(
        EvalData("capitals", DATA.questions[:10]),
        {"plain": answers(set())},
        settings=EvalSettings(output=tmp_path / "p"),
    )
    [f1] = [c for c in compare_runs(partial, tmp_path / "before") if c.metric == "f1"]
    assert f1.contender == "plain" and f1.difference.n == 10


def test_a_missing_baseline_says_what_to_give(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="give the earlier run's folder"):
        compare_runs(tmp_path / "before", tmp_path / "nowhere")


def test_the_command_line_exits_1_on_a_regression_and_0_on_none(tmp_path: Path, capsys: Any) -> None:
    questions = tmp_path / "q.jsonl"
    rows = [{"id": q.id, "question": q.question, "answers": list(q.answers)} for q in DATA.questions]
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": c, "text": f"The capital of {c} is {city}."}) + "\n"
                              for c, city in CAPITALS.items()))  # fmt: skip
    args = ["eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--embedder", "none",
            "--strategies", "plain", "--no-cache", "--plain"]  # fmt: skip
    assert main([*args, "--out", str(tmp_path / "first")]) == 0
    assert main([*args, "--out", str(tmp_path / "second"), "--baseline", str(tmp_path / "first")]) == 0
    assert "0 regression(s)" in capsys.readouterr().out
    # a baseline that did better on every question: the fake model's run is significantly worse
    better = tmp_path / "better"
    better.mkdir()
    lines = [json.loads(line) for line in (tmp_path / "first" / "results.jsonl").read_text().splitlines()]
    for line in lines:
        line["results"]["plain"]["metrics"]["f1"] = 1.0
    (better / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main([*args, "--out", str(tmp_path / "third"), "--baseline", str(better)]) == 1
    assert "regression(s)" in capsys.readouterr().out
    # the baseline is read before the run: a run written over it is still compared with what it held
    assert main([*args, "--out", str(better), "--baseline", str(better)]) == 1
    assert "regression(s)" in capsys.readouterr().out
    # a baseline that answered one of the 40 questions cannot judge them: exit 2, saying what to do
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "results.jsonl").write_text(json.dumps(lines[0]) + "\n")
    assert main([*args, "--out", str(tmp_path / "fourth"), "--baseline", str(partial)]) == 2
    captured = capsys.readouterr()
    assert "regression(s)" not in captured.out
    assert captured.err.strip().splitlines()[-1] == (
        f"selfrag: error: the baseline {partial / 'results.jsonl'} answered 1 of this run's 40 question(s) "
        "(matched by id); the gate judges only when at least 50% are in common: run the baseline on the "
        "same questions (the same file, --limit, --offset and --seed)"
    )


def test_a_baseline_sharing_under_half_the_run_s_questions_cannot_judge(tmp_path: Path) -> None:
    now = run(tmp_path / "now", set())
    lines = (tmp_path / "now" / "results.jsonl").read_text().splitlines()
    for kept, judged in ((19, False), (20, True)):  # of 40: under half, then half
        (tmp_path / "base").mkdir(exist_ok=True)
        (tmp_path / "base" / "results.jsonl").write_text("\n".join(lines[:kept]) + "\n")
        if judged:
            assert {c.difference.n for c in compare_runs(now, tmp_path / "base")} == {20}
        else:
            with pytest.raises(ConfigurationError, match="answered 19 of this run's 40 question"):
                assert_no_regression(now, tmp_path / "base")
    with pytest.raises(ConfigurationError, match="holds no results"):  # and an empty one, nothing
        (tmp_path / "base" / "results.jsonl").write_text("")
        compare_runs(now, tmp_path / "base")


@pytest.mark.parametrize(
    "record",
    [{"other": {"metrics": {"f1": 1.0}}}, {"mine": {"metrics": {"recall@10": 1.0}}},
     {"mine": {"metrics": {"f1": float("nan")}}}, {"mine": {"metrics": {"f1": "high"}}}, {"mine": {}}],
    ids=["another contender", "another metric", "not finite", "not a number", "no metrics"],
)  # fmt: skip
def test_a_baseline_with_nothing_in_common_cannot_judge(tmp_path: Path, record: Any) -> None:
    now = run(tmp_path / "now", set())
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "results.jsonl").write_text(
        "".join(json.dumps({"id": q.id, "results": record}) + "\n" for q in DATA.questions)
    )
    with pytest.raises(ConfigurationError, match="measured no contender on the same metric"):
        compare_runs(now, tmp_path / "base")

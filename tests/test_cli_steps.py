"""``selfrag ask`` says each step of the query on stderr as it happens (``--quiet``: not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from selfrag_core import cli
from selfrag_core.cli import commands
from selfrag_core.testing import FakeLLM

pytest.importorskip("bm25s")

QUESTION = "Why do volcanoes erupt?"
ANSWER = "Volcanoes erupt when gas pressure breaks the rock."


@pytest.fixture
def index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "volcano.txt").write_text(ANSWER + "\n")
    (docs / "bees.md").write_text("Honeybees dance to show where flowers are.\n")
    target = str(tmp_path / "index")
    assert cli.main(["index", str(docs), "--index", target, "--embedder", "hashing"]) == 0
    capsys.readouterr()
    return target


def ask(capsys: pytest.CaptureFixture[str], index: str, *flags: str) -> tuple[int, str, str]:
    code = cli.main(["ask", QUESTION, "--index", index, "--llm", "fake", *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_ask_shows_each_step_as_it_happens(
    capsys: pytest.CaptureFixture[str], index: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    said_before_the_answer: list[str] = []

    def reply(prompt: str) -> str:  # what stderr held when the answer was asked for
        said_before_the_answer.append(capsys.readouterr().err)
        return ANSWER

    monkeypatch.setattr(commands, "_llm", lambda args: FakeLLM(reply))
    code, out, _ = ask(capsys, index, "--strategy", "plain", "--plain")
    assert code == 0 and ANSWER in out
    [before] = said_before_the_answer
    assert before.splitlines() == [f"- retrieved 2 document(s) for {QUESTION!r}"]
    assert "retrieved" not in out  # steps go to stderr, the result to stdout


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("hyde", ["- wrote a hypothetical passage", "- retrieved "]),
        (
            "healing",
            [
                "- attempt 1: plain retrieval",
                "- retrieved ",
                "- verdict on plain retrieval: 1.00 passes the threshold",
            ],
        ),
    ],
)
def test_ask_shows_the_steps_of_each_strategy(
    capsys: pytest.CaptureFixture[str], index: str, strategy: str, expected: list[str]
) -> None:
    code, out, err = ask(capsys, index, "--strategy", strategy)
    assert code == 0 and ANSWER in out
    lines = err.splitlines()
    for start in expected:
        assert any(line.startswith(start) for line in lines), (start, lines)


def test_a_failure_is_a_step_line(capsys: pytest.CaptureFixture[str], index: str, monkeypatch: Any) -> None:
    def broken(prompt: str) -> str:
        raise ConnectionError("the model server is down")

    monkeypatch.setattr(commands, "_llm", lambda args: FakeLLM(broken))
    code, _, err = ask(capsys, index, "--strategy", "plain", "--llm-timeout", "5")
    assert code == 1  # no answer
    failed = "- fallback: generation_failed: LLMCallError"
    assert any(line.startswith(failed) for line in err.splitlines()), err


def test_quiet_says_no_steps(capsys: pytest.CaptureFixture[str], index: str) -> None:
    code, out, err = ask(capsys, index, "--strategy", "hyde", "--quiet")
    assert code == 0 and ANSWER in out and "- " not in err
    assert ask(capsys, index, "--strategy", "hyde", "-q", "--json")[2].strip() == ""

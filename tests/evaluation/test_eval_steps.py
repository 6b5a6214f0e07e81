"""Issue 36: ``selfrag eval`` shows its long steps as they go (opening the index, or
indexing the corpus as a step of its own, then the questions), and ``--dry-run`` prints
its estimate without embedding a document. The LLM is the scripted fake, the embedder
the hashing one (made to raise where nothing may be embedded)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_evaluate import PLACES, reader, write_data

from selfrag_core.cli import main
from selfrag_core.evaluation import EvalSettings, evaluate

pytest.importorskip("bm25s")

FAST = ["--llm", "fake", "--embedder", "hashing", "--no-cache", "--plain"]


class Steps:
    """A :class:`~selfrag_core.progress.Steps` that records what it was shown, in order."""

    def __init__(self) -> None:
        self.shown: list[tuple[Any, ...]] = []

    @contextmanager
    def task(self, description: str, total: int, unit: str = "items") -> Iterator[Callable[..., None]]:
        self.shown.append(("start", description, total, unit))
        done = [0]

        def advance(n: int = 1, description: str | None = None) -> None:
            done[0] += n

        yield advance
        self.shown.append(("done", description, done[0]))

    def say(self, text: str) -> None:
        self.shown.append(("say", text))


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, Path]:
    return write_data(tmp_path)


def test_evaluate_shows_the_indexing_as_a_step_before_the_questions(data: tuple[Path, Path]) -> None:
    questions, corpus = data
    steps, finished = Steps(), []
    evaluate(
        questions, ["plain"], llm=reader(), corpus=corpus, steps=steps,
        progress=lambda done, total, question: finished.append(done),
        settings=EvalSettings(embed="hashing", limit=4),
    )  # fmt: skip
    n = len(PLACES)
    assert steps.shown[0] == ("say", f"indexing the corpus: {n} documents into a temporary index "
                                     "(--index DIR keeps it), embedder hashing")  # fmt: skip
    assert steps.shown[1:] == [
        ("start", "indexing", n, "documents"),
        ("done", "indexing", n),
        ("start", "eval", 4, "questions"),
        ("done", "eval", 4),
    ]
    assert finished == [1, 2, 3, 4]  # the progress callback as before


def test_evaluate_says_it_opens_an_index(data: tuple[Path, Path], tmp_path: Path) -> None:
    questions, corpus = data
    index = tmp_path / "index"
    settings = EvalSettings(embed="hashing", limit=2)
    evaluate(questions, ["plain"], llm=reader(), corpus=corpus, index=index, settings=settings)
    steps = Steps()
    evaluate(questions, ["plain"], llm=reader(), index=index, steps=steps, settings=settings)
    assert steps.shown == [
        ("say", f"opening the index {index}"),
        ("start", "eval", 2, "questions"),
        ("done", "eval", 2),
    ]


def test_eval_prints_the_indexing_progress_before_the_questions(
    capsys: pytest.CaptureFixture[str], data: tuple[Path, Path], tmp_path: Path
) -> None:
    questions, corpus = data
    code = main(
        ["eval", str(questions), "--corpus", str(corpus), "--strategies", "plain", "--limit", "3",
         "--out", str(tmp_path / "out"), *FAST]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    lines = err.splitlines()
    n = len(PLACES)
    order = [
        f"indexing the corpus: {n} documents into a temporary index (--index DIR keeps it), embedder hashing",
        f"indexing: 0/{n} documents (0%)",
        f"indexing: done, {n} documents in",
        "eval: 0/3 questions (0%)",
        "eval: done, 3 questions in",
    ]
    at = [next(i for i, line in enumerate(lines) if line.startswith(want)) for want in order]
    assert at == sorted(at), lines

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
from selfrag_core.evaluation import EvalSettings, evaluate, load_questions
from selfrag_core.evaluation.router import dry_run, dry_run_backend
from selfrag_core.store.dense import HashingEmbeddings
from selfrag_core.testing import FakeLLM

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


@pytest.fixture
def no_document_embedded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The hashing embedder refuses to embed documents (queries it still embeds)."""
    calls: list[int] = []

    def refuse(self: Any, texts: list[str]) -> Any:
        calls.append(len(texts))
        raise AssertionError(f"{len(texts)} document(s) embedded where none may be")

    monkeypatch.setattr(HashingEmbeddings, "embed_documents", refuse)
    return calls


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


def test_dry_run_embeds_no_document_and_prints_the_estimate(
    capsys: pytest.CaptureFixture[str], data: tuple[Path, Path], tmp_path: Path,
    no_document_embedded: list[int],
) -> None:  # fmt: skip
    questions, corpus = data
    index = tmp_path / "empty-index"  # no index there yet: the dry run builds none in it
    code = main(
        ["eval", str(questions), "--corpus", str(corpus), "--index", str(index), "--strategies",
         "plain,hyde", "--dry-run", *FAST]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert no_document_embedded == []
    assert not (index / "manifest.json").exists()
    lines = out.splitlines()
    n = len(PLACES)
    head = f"questions: {n} question(s); expected before any LLM call (estimates: no model was called)"
    assert lines[0] == head
    assert lines[1] == (
        f"input tokens: the answer prompt over the passages a lexical (BM25) search of the corpus's {n} "
        "documents retrieves (nothing embedded: the run, embedder hashing, may retrieve others), "
        "four characters a token"
    )
    assert lines[2].startswith("contender") and lines[2].endswith("calls in all")
    assert lines[3].split()[:3] == ["plain", "1.00", "1.00"] and lines[3].split()[-1] == str(n)
    assert lines[4].split()[:3] == ["hyde", "2.00", "2.00"] and lines[4].split()[-1] == str(2 * n)
    assert lines[5] == f"in all: about {3 * n} LLM calls"
    assert "indexing (lexical, for the estimate): done" in err and "dry run: done" in err


def test_the_dry_runs_estimate_is_the_lexical_runs(
    data: tuple[Path, Path], no_document_embedded: list[int]
) -> None:
    """The lexical index the dry run builds retrieves what a run's lexical index does:
    the same estimate as a dry run over an index built the run's way."""
    questions, corpus = data
    loaded = load_questions(questions)
    steps = Steps()
    rag, basis = dry_run_backend(loaded, ["plain"], corpus=corpus, embed="none", steps=steps)
    assert basis.endswith("(as the run will: it embeds nothing)")
    assert steps.shown[0][:2] == ("start", "indexing (lexical, for the estimate)")
    assert rag.count() == len(PLACES)
    estimate = dry_run(loaded, ["plain", "hyde"], corpus=corpus, embed="hashing", top_k=2)
    assert estimate == dry_run(loaded, ["plain", "hyde"], rag, top_k=2)
    assert no_document_embedded == []


def test_the_patched_embedder_bites(data: tuple[Path, Path], no_document_embedded: list[int]) -> None:
    """The fixture would catch a dry run that embeds: a run's index embeds the documents."""
    questions, corpus = data
    with pytest.raises(AssertionError, match="embedded where none may be"):
        evaluate(questions, ["plain"], llm=reader(), corpus=corpus, settings=EvalSettings(embed="hashing"))
    assert no_document_embedded


def test_dry_run_over_an_index_searches_it(
    capsys: pytest.CaptureFixture[str], data: tuple[Path, Path], tmp_path: Path
) -> None:
    questions, corpus = data
    index = tmp_path / "index"
    assert main(["index", str(corpus.parent), "--index", str(index), "--embedder", "hashing", "--plain"]) == 0
    capsys.readouterr()
    code = main(["eval", str(questions), "--index", str(index), "--strategies", "plain", "--dry-run", *FAST])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"opening the index {index}" in err
    assert f"the passages the index {index} retrieves, as the run will" in out


def test_a_retrieval_only_dry_run_searches_nothing(
    capsys: pytest.CaptureFixture[str], data: tuple[Path, Path], no_document_embedded: list[int]
) -> None:
    questions, corpus = data
    argv = ["eval", str(questions), "--corpus", str(corpus), "--strategies", "plain,hyde,self"]
    code = main([*argv, "--retrieval-only", "--dry-run", *FAST])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "indexing" not in err and "dry run: done" in err  # no index built, not even a lexical one
    lines = out.splitlines()
    n = len(PLACES)
    assert lines[1] == (
        "input tokens: the prompts of HyDE's hypothetical documents (a retrieval-only run ranks, "
        "answering nothing), four characters a token"
    )
    assert lines[2] == "left out of a retrieval-only run (they cannot rank on their own): self"
    assert lines[4].split() == ["plain", "0.00", "0.00", "0", "0"]  # one search, no LLM call
    assert lines[5].split()[:3] == ["hyde", "1.00", "1.00"] and lines[5].split()[-1] == str(n)
    assert lines[6] == f"in all: about {n} LLM calls"


def test_a_retrieval_only_dry_run_expects_the_runs_calls(data: tuple[Path, Path]) -> None:
    questions, corpus = data
    names = ["plain", "hyde", "self"]
    expected = dry_run(load_questions(questions), names, retrieval_only=True)
    llm = FakeLLM("The animal lives in a faraway country with a warm climate and many trees.")
    # the dry run's preset ("small", as ``selfrag eval --llm fake``): a FakeLLM declares none
    settings = EvalSettings(embed="none", retrieval_only=True, preset="small")
    report = evaluate(questions, names, llm=llm, corpus=corpus, settings=settings)
    assert set(expected) == {"plain", "hyde"} == set(report.results[0])
    for name, e in expected.items():
        calls = [r[name]["llm_calls"] for r in report.results]
        assert e["calls"] == sum(calls) / len(calls), name

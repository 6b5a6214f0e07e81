"""A strategy of your own (examples/corrective_rag.py, the guide's example) runs like the
built-in ones: sync, async, streamed, composed inside them, with one budget and one trace."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import (
    Answer,
    ExecutionConfig,
    RecursiveRAG,
    RecursiveRAGConfig,
    SelfHealingRAG,
    Strategy,
    StreamEvent,
)
from selfrag_core.testing import FakeLLM, FakeRetriever

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "corrective_rag.py"
QUESTION = "Which waterway crosses the French capital?"
DOCS = [
    "Berlin lies on the Spree, a waterway of Germany.",
    "The Seine flows through Paris, capital of France.",
]


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("corrective_rag", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("corrective_rag", module)
    spec.loader.exec_module(module)
    return module


crag = load_example()


def model(prompt: str) -> str:
    """Grades the Seine document relevant and the others not; rewrites to 'Seine Paris'."""
    if prompt.startswith("Is the document"):
        return "yes" if "Seine" in prompt.split("Question:")[0] else "no"
    if prompt.startswith("Rewrite"):
        return "Seine Paris"
    return "The Seine flows through Paris."


def strategy(llm: Any, **options: Any) -> Any:
    return crag.CorrectiveRAG(FakeRetriever(DOCS), llm, top_k=1, **options)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_grades_rewrites_and_answers(mode: str) -> None:
    llm = FakeLLM(model)
    ours = strategy(llm)
    assert isinstance(ours, Strategy)
    result = ours.query(QUESTION) if mode == "sync" else await ours.aquery(QUESTION)
    assert isinstance(result, Answer)
    assert result.answer == "The Seine flows through Paris."
    assert result.details["rewritten_query"] == "Seine Paris"  # the first document was the Spree's
    assert [d.text for d in result.sources] == [DOCS[1]]
    names = [e.name for e in result.trace.events]
    assert names.count("grade") == 2 and "rewrite" in names and "query_rewritten" in names
    assert result.trace.llm_calls == llm.n_calls == 4
    assert result.to_dict()["rewritten_query"] == "Seine Paris"


def test_streams_its_answer() -> None:
    events = list(strategy(FakeLLM(model)).stream(QUESTION))
    assert [e.kind for e in events][-1] == "result"
    tokens = "".join(e.text for e in events if e.kind == "token")
    assert tokens.strip() == events[-1].result.answer


async def test_streams_async() -> None:
    events: list[StreamEvent[Any]] = [e async for e in strategy(FakeLLM(model)).astream(QUESTION)]
    assert events[-1].kind == "result" and events[-1].result.answer == "The Seine flows through Paris."


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_composes_inside_built_in_strategies_with_one_budget(mode: str) -> None:
    llm = FakeLLM(model)
    healer = SelfHealingRAG(llm, [strategy(llm)], execution=ExecutionConfig(max_llm_calls=5))
    report = healer.query(QUESTION) if mode == "sync" else await healer.aquery(QUESTION)
    assert report.strategy == "CorrectiveRAG" and report.answer == "The Seine flows through Paris."
    assert report.trace.llm_calls == llm.n_calls == 5  # four of its own, then the faithfulness judge
    leafy = RecursiveRAG(FakeRetriever(DOCS), llm, RecursiveRAGConfig(max_depth=0), leaf=strategy(llm))
    result = leafy.query(QUESTION) if mode == "sync" else await leafy.aquery(QUESTION)
    assert result.answer == "The Seine flows through Paris." and "leaf strategy" in result.reason


def test_a_failed_grade_keeps_the_document() -> None:
    def flaky(prompt: str) -> str:
        if prompt.startswith("Is the document"):
            raise ConnectionError("grader down")
        return model(prompt)

    result = strategy(FakeLLM(flaky), execution=ExecutionConfig(sleep=lambda _: None)).query(QUESTION)
    assert result.details["rewritten_query"] is None and result.sources
    assert any(e.name == "grade_failed" for e in result.trace.events)


def test_runs_under_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from selfrag_core import cli
    from selfrag_core.local import factory

    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(DOCS):
        (docs / f"doc{i}.md").write_text(text + "\n")
    index = str(tmp_path / "index")
    assert cli.main(["index", str(docs), "--index", index, "--embedder", "none", "--plain"]) == 0
    monkeypatch.setitem(factory.PROVIDERS, "scripted", lambda name: FakeLLM(model))
    capsys.readouterr()
    argv = ["ask", QUESTION, "--index", index, "--llm", "scripted:x", "--top-k", "1", "--json"]
    assert cli.main([*argv, "--strategy", f"{EXAMPLE}:CorrectiveRAG"]) == 0
    out = capsys.readouterr().out
    assert '"answer": "The Seine flows through Paris."' in out and '"graded": 2' in out  # its own top_k
    assert cli.main([*argv, "--strategy", "no_such_module:Nothing"]) == 2
    assert "cannot load the strategy 'no_such_module:Nothing'" in capsys.readouterr().err
